"""The lean HTTP/1.1 client (`harness.server.http1`): framing, connection reuse, stamping before parsing.

Servers here are raw sockets in a thread (bytes written exactly as the test says, split where it
says), so framing across reads, keep-alive and closes are exercised as the kernel delivers them."""

from __future__ import annotations

import asyncio
import socket
import threading
import time

import pytest

from harness.core.wire import SENT_HEADER
from harness.server import http1, http1_pool


class Collect:
    """A consumer that keeps what it is given."""

    def __init__(self, verdict_at: bytes | None = None, parse_s: float = 0.0):
        self.status = None
        self.headers = None
        self.pieces: list[tuple[int, bytes]] = []
        self.parsed_at: list[int] = []
        self.ended = None
        self.verdict_at = verdict_at
        self.parse_s = parse_s

    def on_head(self, status, headers):
        self.status, self.headers = status, headers
        return http1.MORE

    def on_data(self, t, data):
        self.pieces.append((t, data))
        if self.parse_s:
            time.sleep(self.parse_s)  # a slow parser
        self.parsed_at.append(time.perf_counter_ns())
        if self.verdict_at is not None and self.verdict_at in b"".join(p for _, p in self.pieces):
            return http1.DONE
        return http1.MORE

    def on_end(self, t):
        self.ended = t

    @property
    def body(self):
        return b"".join(p for _, p in self.pieces)


class RawServer:
    """Accepts connections in a thread; `script(conn, request_bytes, n)` answers the n-th request
    of a connection (n from 0). Records the client ports it saw."""

    def __init__(self, script):
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/prefix"
        self.script = script
        self.ports: list[int] = []
        self.paths: list[bytes] = []
        self.stop = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while not self.stop:
            try:
                conn, addr = self.sock.accept()
            except OSError:
                return
            self.ports.append(addr[1])
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn):
        buf = b""
        n = 0
        with conn:
            while True:
                while b"\r\n\r\n" not in buf:
                    try:
                        data = conn.recv(65536)
                    except OSError:
                        return
                    if not data:
                        return
                    buf += data
                head, _, buf = buf.partition(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                while len(buf) < length:
                    buf += conn.recv(65536)
                self.paths.append(head.split(b" ")[1])
                buf = buf[length:]
                try:
                    if self.script(conn, head, n) == "close":
                        return
                except OSError:
                    return
                n += 1

    def close(self):
        self.stop = True
        self.sock.close()


@pytest.fixture
def raw_server():
    servers = []

    def make(script):
        s = RawServer(script)
        servers.append(s)
        return s

    yield make
    for s in servers:
        s.close()


def chunked(*parts: bytes) -> bytes:
    return b"".join(b"%x\r\n%b\r\n" % (len(p), p) for p in parts) + b"0\r\n\r\n"


HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"


def run(coro):
    return asyncio.run(coro)


def test_chunked_body_split_at_every_byte_is_reassembled(raw_server):
    """Head and chunk framing cut into 1-byte writes (separate reads): the body comes out whole,
    and the connection is reused for the next request."""
    body = chunked(b"data: one\n\n", b"data: two\n\n")

    def script(conn, head, n):
        for i in range(len(HEAD + body)):
            conn.sendall((HEAD + body)[i : i + 1])
            time.sleep(0.0005)

    server = raw_server(script)

    async def go():
        pool = http1_pool.Pool(server.url)
        outs = []
        for _ in range(2):
            c = Collect()
            ex = await pool.request("POST", "/generate", b"{}", c)
            outs.append((ex, c))
        await pool.aclose()
        return outs

    for ex, c in run(go()):
        assert ex.error is None and c.status == 200 and c.body == b"data: one\n\ndata: two\n\n"
        assert c.ended is not None and ex.sent_ns <= c.pieces[0][0]
    assert len(server.ports) == 1  # one connection for both
    assert server.paths == [b"/prefix/generate"] * 2


def test_reads_are_stamped_before_any_is_parsed(raw_server):
    """Two streams whose chunks arrive together: the second read is stamped before the first
    one's (slow) parsing ends: parsing is deferred past the stamps of a burst."""
    ready = threading.Barrier(2)
    go_write = threading.Event()

    def script(conn, head, n):
        conn.sendall(HEAD)
        ready.wait()
        go_write.wait()
        conn.sendall(chunked(b"data: x\n\n"))

    server = raw_server(script)

    async def go():
        pool = http1_pool.Pool(server.url)
        a, b = Collect(parse_s=0.1), Collect(parse_s=0.1)
        ta = asyncio.ensure_future(pool.request("POST", "/g", b"", a))
        tb = asyncio.ensure_future(pool.request("POST", "/g", b"", b))
        while a.status is None or b.status is None:
            await asyncio.sleep(0.005)
        go_write.set()
        time.sleep(0.2)  # the loop is busy: both chunks arrive before it reads either
        await asyncio.gather(ta, tb)
        await pool.aclose()
        return a, b

    a, b = run(go())
    first, second = sorted([a, b], key=lambda c: c.pieces[0][0])
    assert second.pieces[0][0] < first.parsed_at[0]


def test_done_consumer_reads_the_rest_so_the_connection_is_reused(raw_server):
    """A consumer that is DONE before the body's end ([DONE], then the terminator later): the
    request returns at the body's end and the next request uses the same connection."""

    def script(conn, head, n):
        conn.sendall(HEAD + b"%x\r\n%b\r\n" % (14, b"data: [DONE]\n\n"))
        time.sleep(0.02)
        conn.sendall(b"0\r\n\r\n")

    server = raw_server(script)

    async def go():
        pool = http1_pool.Pool(server.url)
        results = []
        for _ in range(3):
            c = Collect(verdict_at=b"[DONE]")
            results.append((await pool.request("POST", "/g", b"", c), c))
        await pool.aclose()
        return results

    for ex, c in run(go()):
        assert ex.error is None and c.body == b"data: [DONE]\n\n" and c.ended is None
    assert len(server.ports) == 1


def test_a_body_that_never_ends_after_done_is_dropped_after_the_drain_bound(raw_server, monkeypatch):
    """[DONE], then no terminator: the request returns (no error: the answer was complete) once
    `DRAIN_S` has passed, its connection dropped; an answer whose end came with its [DONE] arms
    no drain timer at all (its connection goes straight back to the pool)."""
    monkeypatch.setattr(http1, "DRAIN_S", 0.05)

    def script(conn, head, n):
        if n == 0:
            conn.sendall(HEAD + b"%x\r\n%b\r\n" % (14, b"data: [DONE]\n\n") + b"0\r\n\r\n")
        else:
            conn.sendall(HEAD + b"%x\r\n%b\r\n" % (14, b"data: [DONE]\n\n"))  # and nothing more
            time.sleep(2)

    server = raw_server(script)

    async def go():
        loop = asyncio.get_running_loop()
        timers: list[float] = []
        call_later = loop.call_later
        loop.call_later = lambda delay, *a: timers.append(delay) or call_later(delay, *a)  # asyncio's loop
        pool = http1_pool.Pool(server.url)
        whole = await pool.request("POST", "/g", b"", Collect(verdict_at=b"[DONE]"))
        armed_for_whole = list(timers)
        # a hang guard only (the bound is 0.05 s): without a drain timer this request never returns
        endless = await asyncio.wait_for(pool.request("POST", "/g", b"", Collect(verdict_at=b"[DONE]")), 30)
        await pool.aclose()
        return whole, armed_for_whole, endless, timers

    whole, armed_for_whole, endless, timers = run(go())
    assert whole.error is None and 0.05 not in armed_for_whole and len(server.ports) == 1
    assert endless.error is None and endless.finished and not endless.conn.alive and 0.05 in timers


def test_a_connection_the_server_closed_while_idle_is_not_used(raw_server):
    def script(conn, head, n):
        conn.sendall(HEAD + chunked(b"data: a\n\n"))
        time.sleep(0.01)
        return "close"  # keep-alive promised, then closed while idle

    server = raw_server(script)

    async def go():
        pool = http1_pool.Pool(server.url)
        outs = []
        for _ in range(3):
            c = Collect()
            outs.append((await pool.request("POST", "/g", b"", c), c))
            await asyncio.sleep(0.05)
        await pool.aclose()
        return outs

    for ex, c in run(go()):
        assert ex.error is None and c.body == b"data: a\n\n"
    assert len(server.ports) == 3


def test_a_reused_connection_that_closes_before_answering_is_retried_once(raw_server):
    """The server closes a kept-alive connection just as the next request goes out (it read the
    request but never answered): the request goes once more on a new connection."""

    def script(conn, head, n):
        if n == 1:
            return "close"  # the second request on a connection: closed unanswered
        conn.sendall(HEAD + chunked(b"data: a\n\n"))

    server = raw_server(script)

    async def go():
        pool = http1_pool.Pool(server.url)
        outs = []
        for _ in range(2):
            c = Collect()
            outs.append((await pool.request("POST", "/g", b"", c), c))
        await pool.aclose()
        return outs

    (ex1, c1), (ex2, c2) = run(go())
    assert ex1.error is None and ex2.error is None and c2.body == b"data: a\n\n"
    assert len(server.ports) == 2


def test_content_length_and_close_delimited_bodies(raw_server):
    def script(conn, head, n):
        if n == 0:
            conn.sendall(b"HTTP/1.1 404 Not Found\r\ncontent-length: 9\r\n\r\nnot found")
        else:
            conn.sendall(b"HTTP/1.0 200 OK\r\n\r\nuntil the end")
            return "close"

    server = raw_server(script)

    async def go():
        pool = http1_pool.Pool(server.url)
        a, b = Collect(), Collect()
        ea = await pool.request("POST", "/g", b"", a)
        eb = await pool.request("POST", "/g", b"", b)
        await pool.aclose()
        return ea, a, eb, b

    ea, a, eb, b = run(go())
    assert (ea.status, a.body, ea.error) == (404, b"not found", None) and a.ended is not None
    assert (eb.status, b.body, eb.error) == (200, b"until the end", None) and b.ended is not None


@pytest.mark.parametrize(
    "reply, kind",
    [
        (b"SPDY/9 200 OK\r\n\r\n", "protocol"),
        (HEAD + b"zz\r\nxx\r\n", "protocol"),
        (HEAD + b"5\r\nabc", "connection"),  # closed mid-chunk
        # sizes int() would take: a negative one stepped back onto its own line, 100 % CPU forever
        (HEAD + b"-6\r\nxx\r\n", "protocol"),
        (HEAD + b"+6\r\nabcdef\r\n0\r\n\r\n", "protocol"),
        (HEAD + b"0x6\r\nabcdef\r\n0\r\n\r\n", "protocol"),
        (HEAD + b"6_0\r\nabcdef\r\n0\r\n\r\n", "protocol"),
        (HEAD + b"1" * 40 + b"\r\nabc", "protocol"),
        (b"HTTP/1.1 200 OK\r\ncontent-length: -5\r\n\r\nabcdefgh", "protocol"),
        (b"HTTP/1.1 200 OK\r\ncontent-length: +5\r\n\r\nabcde", "protocol"),
        (b"HTTP/1.1 200 OK\r\ncontent-length: 1_0\r\n\r\nabcdefghij", "protocol"),
    ],
)
def test_broken_answers_are_errors(raw_server, reply, kind):
    def script(conn, head, n):
        conn.sendall(reply)
        return "close"

    server = raw_server(script)

    async def go():
        pool = http1_pool.Pool(server.url)
        ex = await pool.request("POST", "/g", b"", Collect())
        await pool.aclose()
        return ex

    ex = run(go())
    assert ex.error is not None and ex.error.kind == kind


def test_an_endless_head_is_bounded(raw_server):
    def script(conn, head, n):
        conn.sendall(b"HTTP/1.1 200 OK\r\n")
        for _ in range(200):
            conn.sendall(b"x-junk: " + b"a" * 1000 + b"\r\n")

    server = raw_server(script)

    async def go():
        pool = http1_pool.Pool(server.url)
        ex = await pool.request("POST", "/g", b"", Collect())
        await pool.aclose()
        return ex

    ex = run(go())
    assert ex.error.kind == "protocol" and "head longer" in ex.error.detail


def test_connection_refused_and_pool_limit():
    async def refused():
        pool = http1_pool.Pool("http://127.0.0.1:9")
        try:
            await pool.request("POST", "/g", b"", Collect())
        finally:
            await pool.aclose()

    with pytest.raises(http1.HttpError) as err:
        run(refused())
    assert err.value.kind == "connection"
    with pytest.raises(ValueError):
        http1_pool.Pool("ftp://host/")


def test_at_most_max_connections_are_open(raw_server):
    def script(conn, head, n):
        time.sleep(0.02)
        conn.sendall(HEAD + chunked(b"data: a\n\n"))

    server = raw_server(script)

    async def go():
        pool = http1_pool.Pool(server.url, max_connections=3)
        exs = await asyncio.gather(*(pool.request("POST", "/g", b"", Collect()) for _ in range(12)))
        await pool.aclose()
        return exs

    assert all(ex.error is None for ex in run(go()))
    assert len(server.ports) == 3


def test_run_uses_uvloop_when_installed_and_the_pool_works_there(raw_server):
    uvloop = pytest.importorskip("uvloop")
    body = chunked(b"data: one\n\n", b"data: [DONE]\n\n")
    server = raw_server(lambda conn, head, n: conn.sendall(HEAD + body))

    async def go():
        pool = http1_pool.Pool(server.url)
        outs = [await pool.request("POST", "/g", b"", Collect(verdict_at=b"[DONE]")) for _ in range(2)]
        await pool.aclose()
        return type(asyncio.get_running_loop()), outs

    loop_type, outs = http1.run(go())
    assert loop_type is uvloop.Loop
    assert all(ex.error is None for ex in outs) and len(server.ports) == 1


def test_every_request_carries_the_instant_it_was_written(raw_server):
    """`harness.core.wire.SENT_HEADER` holds the very ``sent_ns`` the exchange records, in its
    head, before the body (the simulator starts a request's modelled time there)."""
    heads: list[bytes] = []

    def script(conn, head, n):
        heads.append(head)
        conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")

    server = raw_server(script)

    async def go():
        pool = http1_pool.Pool(server.url)
        ex = await pool.request("POST", "/g", b'{"a": 1}', Collect())
        await pool.aclose()
        return ex

    ex = run(go())
    lines = heads[0].split(b"\r\n")
    stamped = [ln for ln in lines if ln.lower().startswith(SENT_HEADER + b":")]
    assert stamped == [SENT_HEADER + b": %d" % ex.sent_ns]
    assert any(ln.lower() == b"content-length: 8" for ln in lines)
    assert ex.status == 200


# --------------------------------------------------------------- an interrupt during loop set-up


def _loop_runner_hit_while_setting_up(coro):
    """What uvloop.run does when SIGTERM's handler raises inside the loop's set-up (the signal
    socketpair): the interrupt unwinds, and closing the loop, still marked running, raises over it."""
    coro.close()
    try:
        raise KeyboardInterrupt("SIGTERM")
    except KeyboardInterrupt:
        raise RuntimeError("Cannot close a running event loop") from None


def test_an_interrupt_while_the_loop_sets_up_stays_an_interrupt():
    async def body():
        return 1

    with pytest.raises(KeyboardInterrupt, match="SIGTERM"):
        http1.run_interruptible(_loop_runner_hit_while_setting_up, body())


def test_a_loop_error_without_an_interrupt_is_raised_as_it_is():
    async def body():
        raise RuntimeError("a harness bug")

    with pytest.raises(RuntimeError, match="a harness bug"):
        http1.run_interruptible(asyncio.run, body())
    assert http1.run_interruptible(asyncio.run, asyncio.sleep(0, result=7)) == 7

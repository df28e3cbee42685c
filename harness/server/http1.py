"""A lean HTTP/1.1 client for streamed answers, on asyncio transports: send one request on a
kept-alive connection and hand the response body, read by read, to a consumer.

Why not httpx for the streams (measured in docs/client-fidelity.md): its per-read cost
(httpx/httpcore/h11 layers, ~130 µs a chunk) made the client, not the server, the bottleneck past
a few thousand chunks/s, its pool assignment is quadratic in the open connections, and the time
to build a request and get a connection fell inside the measured TTFT. Here:

- **Stamping.** Each network read is stamped with `time.perf_counter_ns()` in `data_received`,
  the first code the event loop runs with the bytes. Framing (status line, headers, chunked
  coding) and the consumer's parsing run later, in one deferred callback per loop iteration for
  all connections: every read of a burst (a decode step of a whole batch) is stamped before any
  of them is parsed. A request is stamped (`Exchange.sent_ns`) after its connection is ready and
  its bytes are built, just before they are written.
- **Connections** (`harness.server.http1_pool.Pool`). Idle connections wait on a stack (O(1) take and give back; the most recently
  used first). A response is read to its end (the chunked terminator), also after the consumer
  has all it wants (`DONE`; the rest is bounded by `DRAIN_BYTES` and `DRAIN_S`), so the
  connection is back in the pool when the request returns: `data: [DONE]` is not the end of
  the body. A connection that died while idle is dropped; a request whose reused
  connection closed before any byte of an answer is sent once more on a new one (the server
  closed an idle keep-alive connection; it never saw the request).
- **Bounds.** The consumer decides when to stop (`DROP` closes the connection); the response
  head is bounded (`MAX_HEAD_BYTES`); a body drained after `DONE` is bounded in bytes and time.

Plain `http://` (and `https://`) only, no proxies, no redirects, no compression
(`accept-encoding: identity` is sent; the consumer sees `content-encoding`).
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import time
from dataclasses import dataclass, field
from typing import Protocol

from harness.core import bounds
from harness.core.errors import Broken, in_context_chain
from harness.core.wire import SENT_HEADER

MAX_HEAD_BYTES = bounds.HTTP_HEAD_BYTES  # status line + headers
DRAIN_BYTES = 64 << 10  # read after the consumer is DONE, to keep the connection
DRAIN_S = 5.0


LOOP_ENV = "HARNESS_EVENT_LOOP"  # "asyncio": asyncio's own loop even when uvloop is installed


def event_loop_name() -> str:
    """The event loop `run` uses: ``uvloop`` when it is installed (the `fast` extra) and
    ``HARNESS_EVENT_LOOP`` is not ``asyncio``, else ``asyncio``."""
    if os.environ.get(LOOP_ENV, "").strip().lower() == "asyncio":
        return "asyncio"
    return "uvloop" if importlib.util.find_spec("uvloop") is not None else "asyncio"


def run(coro):
    """`asyncio.run(coro)` on uvloop when it is installed (it halves the client's CPU per chunk
    and most of its stamping delay: docs/client-fidelity.md), else on asyncio's own loop
    (`event_loop_name`)."""
    if event_loop_name() == "uvloop":
        import uvloop  # optional, heavy-ish: only when asked for

        return run_interruptible(uvloop.run, coro)
    return run_interruptible(asyncio.run, coro)


def run_interruptible(loop_runner, coro):
    """`loop_runner(coro)`, where an interrupt stays an interrupt. A signal whose handler raises
    KeyboardInterrupt can land while the loop sets itself up (uvloop's signal socketpair): the
    loop is left marked running, and closing it raises ``RuntimeError: Cannot close a running
    event loop`` over the interrupt. That error is the interrupt's, so the interrupt is raised
    (exit 130 and the run's rows kept), not a harness bug (exit 3)."""
    try:
        return loop_runner(coro)
    except Exception as exc:
        interrupt = in_context_chain(exc, KeyboardInterrupt)
        if interrupt is None:
            raise
        raise interrupt from exc


# What a consumer's `on_data` returns.
MORE = 0  # keep reading
DONE = 1  # the answer is complete for the consumer; read the rest of the body to keep the connection
DROP = 2  # stop now and close the connection (a bound was broken)


class Consumer(Protocol):
    """What the client calls with a response, in order: `on_head` once, `on_data` per piece of
    body (with the stamp of the network read that brought it), then `on_end` at the body's end.
    A response that breaks before its end gets no `on_end` (`Exchange.error` says why)."""

    def on_head(self, status: int, headers: dict[str, str]) -> int: ...

    def on_data(self, t_ns: int, data: bytes) -> int: ...

    def on_end(self, t_ns: int) -> None: ...


class HttpError(Broken):
    """A request that got no (complete) answer. `kind`: "connection" (refused, reset, closed) or
    "timeout" (connect), or "protocol" (a malformed response head or framing)."""

    def __init__(self, kind: str, detail: str = "") -> None:
        super().__init__(f"{kind}: {detail}" if detail else kind)
        self.kind = kind
        self.detail = detail


@dataclass
class Exchange:
    """One request and its response as it went: stamps and how it ended."""

    consumer: Consumer
    sent_ns: int = 0
    wall_start: float = 0.0
    status: int | None = None
    got_bytes: bool = False  # any byte of an answer arrived
    finished: bool = False
    error: HttpError | None = None
    reused: bool = False  # sent on a connection that had served a request before
    waiter: asyncio.Future | None = field(default=None, repr=False)
    conn: "Connection | None" = field(default=None, repr=False)

    def cancel(self) -> None:
        """Stop this exchange now (a time limit, an abort, a cancelled caller): its connection is
        closed unless the exchange is already over."""
        if not self.finished and self.conn is not None:
            self.conn.close()
        self.finished = True

    def _finish(self, error: HttpError | None = None) -> None:
        if self.finished:
            return
        self.finished = True
        self.error = error
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(None)


_HEX = frozenset(b"0123456789abcdefABCDEF")
MAX_SIZE_DIGITS = bounds.HTTP_SIZE_DIGITS  # a chunk or body of up to 2**60 bytes: more digits are not a size


def _chunk_size(text: bytes) -> int | None:
    """A chunk-size line's hex digits → the size, or None: only hex digits, 1 to
    `MAX_SIZE_DIGITS` of them (``int(x, 16)`` would also take ``-6``, ``+6``, ``0x6`` and ``6_0``;
    a negative size stepped the framing back onto its own line, forever)."""
    if not 0 < len(text) <= MAX_SIZE_DIGITS or not _HEX.issuperset(text):
        return None
    return int(text, 16)


def _content_length(text: str) -> int | None:
    """A content-length value → the length, or None unless it is 1 to `MAX_SIZE_DIGITS` decimal
    digits (no sign, no underscore, no space inside)."""
    text = text.strip()
    if not 0 < len(text) <= MAX_SIZE_DIGITS or not text.isascii() or not text.isdigit():
        return None
    return int(text)


# Response framing states
_HEAD, _SIZE, _DATA, _CRLF, _TRAILER, _LENGTH, _CLOSE, _IDLE = range(8)


class Owner(Protocol):
    """What a connection tells the pool that opened it (`harness.server.http1_pool.Pool`)."""

    def _mark(self, conn: Connection) -> None: ...  # reads arrived: frame them this loop iteration

    def _forget(self, conn: Connection) -> None: ...  # closed: no longer counted or idle

    def _give_back(self, conn: Connection) -> None: ...  # its answer was read to the end: idle again


class Connection(asyncio.Protocol):
    """One keep-alive connection: stamps reads, frames the response, feeds the consumer."""

    def __init__(self, pool: Owner) -> None:
        self.pool = pool
        self.transport: asyncio.Transport | None = None
        self.alive = True
        self.used = False  # has served a request (so a failure before any byte may be a stale keep-alive)
        self.counted = False  # counts against the pool's max_connections
        self.inbox: list[tuple[int, bytes]] = []
        self.queued = False
        self.ex: Exchange | None = None
        self.state = _IDLE
        self.buf = b""
        self.remaining = 0
        self.keep_alive = True
        self.draining = False  # consumer is DONE: reading the rest only to keep the connection
        self.drain_left = 0
        self.drain_timer: asyncio.TimerHandle | None = None

    # -- transport callbacks (the event loop calls these) -------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.inbox.append((time.perf_counter_ns(), data))
        if not self.queued:
            self.queued = True
            self.pool._mark(self)

    def eof_received(self) -> bool:
        return False  # close the transport: connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        self.process()  # what arrived before the loss, first
        self.alive = False
        self.pool._forget(self)
        if self.drain_timer is not None:
            self.drain_timer.cancel()
        ex = self.ex
        if ex is None or ex.finished:
            return
        if self.state == _CLOSE:  # body delimited by the close: this is its end
            self._end(time.perf_counter_ns())
            return
        ex._finish(None if self.draining else HttpError("connection", str(exc) if exc else "closed by the server"))
        self.ex = None

    # -- framing ------------------------------------------------------------------------------
    def process(self) -> None:
        """Frame everything stamped so far (the pool's deferred callback, or before a loss)."""
        self.queued = False
        inbox, self.inbox = self.inbox, []
        for t, data in inbox:
            if not self.alive:
                return
            self._feed(t, data)
        if self.draining and self.drain_timer is None and self.ex is not None and self.alive:
            # the body did not end with the reads at hand: bound the wait for its end (armed only
            # now: a short answer's end comes in the same read as its [DONE], and needs no timer)
            self.drain_timer = asyncio.get_running_loop().call_later(DRAIN_S, self.close)

    def _feed(self, t: int, data: bytes) -> None:
        ex = self.ex
        if ex is None or self.state == _IDLE:  # bytes nobody asked for: this connection is unusable
            self.close()
            return
        ex.got_bytes = True
        buf = self.buf + data if self.buf else data
        self.buf = b""
        pos, n = 0, len(buf)
        while pos < n and self.ex is not None:
            st = self.state
            if st == _DATA or st == _LENGTH or st == _CLOSE:
                take = n - pos if st == _CLOSE else min(self.remaining, n - pos)
                piece = buf[pos : pos + take] if (pos or take < n) else buf
                pos += take
                if st != _CLOSE:
                    self.remaining -= take
                    if self.remaining == 0:
                        self.state = _CRLF if st == _DATA else _IDLE
                if not self._give(t, piece):
                    return
                if st == _LENGTH and self.remaining == 0:
                    self._end(t)
                    return
                continue
            if st == _SIZE:
                eol = buf.find(b"\r\n", pos)
                if eol < 0:
                    break
                size_text = buf[pos:eol].split(b";", 1)[0].strip()
                size = _chunk_size(size_text)
                if size is None:
                    self._fail("protocol", f"bad chunk size {size_text[:20]!r}")
                    return
                pos = eol + 2
                if size == 0:
                    self.state = _TRAILER
                else:
                    self.state, self.remaining = _DATA, size
                continue
            if st == _CRLF:
                if n - pos < 2:
                    break
                if buf[pos : pos + 2] != b"\r\n":
                    self._fail("protocol", "chunk not followed by CRLF")
                    return
                pos += 2
                self.state = _SIZE
                continue
            if st == _TRAILER:
                eol = buf.find(b"\r\n", pos)
                if eol < 0:
                    break
                line = buf[pos:eol]
                pos = eol + 2
                if not line:
                    self._end(t)
                    if pos < n:  # bytes after the response: not a clean connection
                        self.close()
                    return
                continue
            if st == _HEAD:
                end = buf.find(b"\r\n\r\n", pos)
                if end < 0:
                    if n - pos > MAX_HEAD_BYTES:
                        self._fail("protocol", f"response head longer than {MAX_HEAD_BYTES} bytes")
                        return
                    break
                if not self._head(buf[pos:end]):
                    return
                pos = end + 4
                continue
            break
        if pos < n and self.ex is not None:
            rest = buf[pos:]
            if len(rest) > MAX_HEAD_BYTES and self.state in (_HEAD, _SIZE, _TRAILER):
                self._fail("protocol", "response framing line too long")
                return
            self.buf = rest

    def _head(self, head: bytes) -> bool:
        lines = head.split(b"\r\n")
        parts = lines[0].split(b" ", 2)
        try:
            if len(parts) < 2 or not parts[0].startswith(b"HTTP/1."):
                raise ValueError
            status = int(parts[1])
        except ValueError:
            self._fail("protocol", f"bad status line {lines[0][:60]!r}")
            return False
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, sep, value = line.partition(b":")
            if sep:
                headers[name.strip().lower().decode("latin-1")] = value.strip().decode("latin-1")
        if 100 <= status < 200:  # an interim answer (100 Continue): the real head follows
            return True
        self.keep_alive = parts[0] != b"HTTP/1.0" and headers.get("connection", "").lower() != "close"
        te = headers.get("transfer-encoding", "").lower()
        if "chunked" in te:
            self.state = _SIZE
        elif "content-length" in headers:
            length = _content_length(headers["content-length"])
            if length is None:
                self._fail("protocol", f"bad content-length {headers['content-length'][:20]!r}")
                return False
            self.remaining = length
            self.state = _LENGTH
        else:
            self.state, self.keep_alive = _CLOSE, False
        ex = self.ex
        assert ex is not None
        ex.status = status
        verdict = ex.consumer.on_head(status, headers)
        if verdict == DROP:
            self._drop()
            return False
        if verdict == DONE:
            self._start_drain()
        if self.state == _LENGTH and self.remaining == 0:
            self._end(time.perf_counter_ns())
            return False
        return True

    def _give(self, t: int, piece: bytes) -> bool:
        """Hand a body piece to the consumer (or count it against the drain bound)."""
        if self.draining:
            self.drain_left -= len(piece)
            if self.drain_left < 0:
                self.close()
                return False
            return True
        ex = self.ex
        assert ex is not None
        verdict = ex.consumer.on_data(t, piece)
        if verdict == DROP:
            self._drop()
            return False
        if verdict == DONE:
            self._start_drain()
        return True

    def _start_drain(self) -> None:
        """The consumer has its answer; the rest of the body is read (bounded in bytes and time)
        so that the connection can serve the next request. The exchange finishes at the body's
        end, or when a bound drops the connection (without an error: the answer was complete).
        The time bound (`DRAIN_S`) is armed by `process` if the reads at hand did not end it."""
        self.draining = True
        self.drain_left = DRAIN_BYTES

    def _end(self, t: int) -> None:
        ex = self.ex
        self.ex = None
        self.state = _IDLE
        self.buf = b""
        if self.drain_timer is not None:
            self.drain_timer.cancel()
            self.drain_timer = None
        if ex is not None:
            if not self.draining:
                ex.consumer.on_end(t)
            ex._finish()
        self.draining = False
        if self.keep_alive and self.alive:
            self.pool._give_back(self)
        else:
            self.close()

    def _drop(self) -> None:
        ex = self.ex
        self.ex = None
        if ex is not None:
            ex._finish()
        self.close()

    def _fail(self, kind: str, detail: str) -> None:
        ex = self.ex
        self.ex = None
        if ex is not None:
            ex._finish(HttpError(kind, detail))
        self.close()

    def close(self) -> None:
        if self.alive:
            self.alive = False
            self.pool._forget(self)
            if self.transport is not None:
                self.transport.abort()  # no lingering: a dropped stream stops now
        if self.drain_timer is not None:
            self.drain_timer.cancel()
            self.drain_timer = None
        ex = self.ex
        self.ex = None
        if ex is not None and not ex.finished:
            ex._finish(None if self.draining else HttpError("connection", "closed"))

    # -- sending ------------------------------------------------------------------------------
    def send(self, ex: Exchange, head: bytes, body: bytes) -> None:
        """Write one request: ``head`` (ending in its blank line) with `SENT_HEADER` added, the
        instant it is written, then ``body``."""
        self.ex = ex
        self.state = _HEAD
        self.buf = b""
        self.draining = False
        self.keep_alive = True
        ex.wall_start = time.time()
        ex.sent_ns = time.perf_counter_ns()
        assert self.transport is not None
        self.transport.writelines((head[:-2], b"%s: %d\r\n\r\n" % (SENT_HEADER, ex.sent_ns), body))
        self.used = True

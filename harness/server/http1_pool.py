"""The kept-alive connections to one server (`Pool`): idle ones on a stack (O(1) take and give
back, the most recently used first), at most ``max_connections`` open with more requests waiting,
a request resent once on a new connection when its reused one closed before any byte of an
answer, and one deferred callback per loop iteration that frames every connection's stamped
reads (`harness.server.http1` has the why and the bounds).
"""

from __future__ import annotations

import asyncio
from collections import deque
from urllib.parse import urlsplit

from harness.server.http1 import Connection, Consumer, Exchange, HttpError


class Pool:
    """Kept-alive connections to one server (`base_url`'s scheme, host and port; its path is
    a prefix of every request path). At most `max_connections` open; more requests wait."""

    def __init__(
        self,
        base_url: str,
        *,
        max_connections: int = 4096,
        connect_timeout_s: float = 30.0,
        headers: dict[str, str] | None = None,
    ) -> None:
        u = urlsplit(base_url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ValueError(f"{base_url!r}: need an http:// or https:// URL with a host")
        self.host = u.hostname
        self.port = u.port or (443 if u.scheme == "https" else 80)
        self.ssl = u.scheme == "https"
        self.prefix = u.path.rstrip("/")
        host_header = u.netloc.rpartition("@")[2]
        self.max_connections = max_connections
        self.connect_timeout_s = connect_timeout_s
        extra = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
        self._fixed = (
            f"host: {host_header}\r\nuser-agent: hicache-harness\r\naccept-encoding: identity\r\n{extra}"
        ).encode("latin-1")
        self._heads: dict[tuple[str, str, str | None], bytes] = {}  # a request head up to its length
        self._idle: dict[Connection, None] = {}  # insertion-ordered: popitem() takes the newest
        self._open = 0
        self._conns: set[Connection] = set()
        self._waiters: deque[asyncio.Future] = deque()
        self._dirty: list[Connection] = []
        self._drain_queued = False
        self._closed = False

    # -- the deferred framing callback ---------------------------------------------------------
    def _mark(self, conn: Connection) -> None:
        self._dirty.append(conn)
        if not self._drain_queued:
            self._drain_queued = True
            asyncio.get_running_loop().call_soon(self._process)

    def _process(self) -> None:
        self._drain_queued = False
        dirty, self._dirty = self._dirty, []
        for conn in dirty:
            if conn.queued:
                try:
                    conn.process()
                except Exception as exc:  # one consumer's failure is its own request's, not its neighbours'
                    conn.queued = False
                    conn._fail("protocol", f"{type(exc).__name__} while reading the answer")

    # -- connections ----------------------------------------------------------------------------
    def _forget(self, conn: Connection) -> None:
        self._idle.pop(conn, None)
        if conn.counted:
            conn.counted = False
            self._conns.discard(conn)
            self._open -= 1
            self._wake()

    def _give_back(self, conn: Connection) -> None:
        if self._closed:
            conn.close()
            return
        self._idle[conn] = None
        self._wake()

    def _wake(self) -> None:
        while self._waiters:
            w = self._waiters.popleft()
            if not w.done():
                w.set_result(None)
                return

    async def _connect(self) -> Connection:
        loop = asyncio.get_running_loop()
        conn = Connection(self)
        conn.counted = True
        self._conns.add(conn)
        self._open += 1
        try:
            await asyncio.wait_for(
                loop.create_connection(lambda: conn, self.host, self.port, ssl=True if self.ssl else None),
                self.connect_timeout_s,
            )
        except asyncio.TimeoutError:
            self._forget(conn)
            raise HttpError("timeout", "connect") from None
        except OSError as exc:
            self._forget(conn)
            raise HttpError("connection", str(exc)) from None
        except BaseException:
            self._forget(conn)
            raise
        return conn

    async def _acquire(self, fresh: bool) -> Connection:
        while True:
            if self._closed:
                raise HttpError("connection", "client closed")
            while self._idle and not fresh:
                conn, _ = self._idle.popitem()
                if conn.alive:
                    return conn
            if self._open < self.max_connections:
                return await self._connect()
            if fresh and self._idle:  # make room: drop the oldest idle connection
                conn = next(iter(self._idle))
                conn.close()
                continue
            w = asyncio.get_running_loop().create_future()
            self._waiters.append(w)
            try:
                await w
            except BaseException:
                if w.done() and not w.cancelled():
                    self._wake()  # pass the turn on
                raise

    def head_bytes(self, method: str, path: str, body_len: int, content_type: str | None) -> bytes:
        key = (method, path, content_type)
        start = self._heads.get(key)
        if start is None:  # built once per method, path and content type (a handful per run)
            ct = f"content-type: {content_type}\r\n" if content_type else ""
            start = f"{method} {self.prefix}{path} HTTP/1.1\r\n".encode("latin-1") + self._fixed + ct.encode("latin-1")
            if len(self._heads) < 64:
                self._heads[key] = start
        return b"%scontent-length: %d\r\n\r\n" % (start, body_len)

    def start(
        self, method: str, path: str, body: bytes, consumer: Consumer, *, content_type: str | None = "application/json"
    ) -> Exchange | None:
        """Write the request now, on an idle connection, without yielding to the event loop (so a
        scheduled send goes out at its instant); None when no idle connection is at hand (then
        `request` opens or waits for one). Pass the exchange on to `request(started=...)`."""
        while self._idle and not self._closed:
            conn, _ = self._idle.popitem()
            if conn.alive:
                return self._send_on(conn, consumer, self.head_bytes(method, path, len(body), content_type), body)
        return None

    def _send_on(self, conn: Connection, consumer: Consumer, head: bytes, body: bytes) -> Exchange:
        ex = Exchange(consumer)
        ex.waiter = asyncio.get_running_loop().create_future()
        ex.conn = conn
        ex.reused = conn.used
        conn.send(ex, head, body)
        return ex

    async def send(
        self,
        method: str,
        path: str,
        body: bytes,
        consumer: Consumer,
        *,
        content_type: str | None = "application/json",
        fresh: bool = False,
    ) -> Exchange:
        """Get a connection (an idle one, a new one — `fresh`: always new — or wait for one) and
        write the request on it; the exchange's `waiter` resolves when it is over."""
        conn = await self._acquire(fresh)
        return self._send_on(conn, consumer, self.head_bytes(method, path, len(body), content_type), body)

    @staticmethod
    def stale(ex: Exchange) -> bool:
        """Whether a finished exchange failed the way a kept-alive connection the server had
        closed fails: reused, closed before any byte of an answer (worth one more try)."""
        return ex.error is not None and ex.error.kind == "connection" and ex.reused and not ex.got_bytes

    async def request(
        self, method: str, path: str, body: bytes, consumer: Consumer, *, content_type: str | None = "application/json"
    ) -> Exchange:
        """Send one request and return when the consumer is done (DONE, DROP or the body's end)
        or the exchange failed (`Exchange.error`); a stale keep-alive connection is retried once
        on a new one. Cancelling closes the connection."""
        fresh = False
        while True:
            ex = self.start(method, path, body, consumer, content_type=content_type) if not fresh else None
            if ex is None:
                ex = await self.send(method, path, body, consumer, content_type=content_type, fresh=fresh)
            try:
                assert ex.waiter is not None
                await ex.waiter
            except BaseException:
                ex.cancel()
                raise
            if self.stale(ex) and not fresh:
                fresh = True
                continue
            return ex

    async def aclose(self) -> None:
        self._closed = True
        for conn in list(self._conns):
            conn.close()
        self._idle.clear()
        for w in self._waiters:
            if not w.done():
                w.set_result(None)
        await asyncio.sleep(0)

"""One streaming request to an sglang server → one `RequestRecord`.

Speaks sglang's native `POST /generate` (default) and, as an option, `POST /v1/completions`.
Never raises for a server failure: every outcome is a record, failures carry `error`:

  "timeout"            the per-request limit passed (partial chunks are kept)
  "http_<code>"        a non-200 status
  "connection"         refused / reset / closed mid-stream (the workload layer turns this into
                       "server_died" when the server process is gone)
  "server_died"        given by the caller's `Abort` signal while the request was in flight
  "server_error: ..."  an `{"error": ...}` object inside the stream
  "aborted: ..."       finish_reason of type "abort"
  "protocol: ..."      anything the parser could not make sense of

Transport (`harness.server.http1`, docs/client-fidelity.md): streams go over kept-alive HTTP/1.1
connections of a lean asyncio client; `sent_ns` is stamped when the request is written (its
connection ready), each network read is stamped before any of a burst is parsed, and every
answer is read to its end so its connection serves the next request. A request is a single
coroutine (no task of its own); `generate_at` sends at a scheduled instant (`harness.server.schedule`).
Control requests (`flush_cache`) use httpx.

Reading and checking each answer's stream: `harness.server.stream`; what a request is (what to
send, where its record belongs, the abort signal): `harness.server.request`.
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import json
import time
import uuid
from dataclasses import dataclass
from typing import Any

import httpx

from harness.core import bounds, stall
from harness.server import http1, http1_pool
from harness.server.info import MAX_PROBE_BYTES, ServerAnswerError, aread_limited, auth_headers, request_headers
from harness.server.request import Abort, GenerateRequest, Labels, _orjson, input_hash
from harness.server.schedule import sleep_until_ns
from harness.server.stream import (
    MAX_LINE_BYTES,
    Api,
    StreamAccumulator,
    StreamMode,
    _clip,
    _max_new,
    _SseReader,
)
from harness.store.records import RequestRecord

BURST_NS = 500_000  # sends of one event-loop turn (a burst of requests) before the loop polls again
FLUSH_S = bounds.FLUSH_ANSWER_S  # one /flush_cache answer, head and body, in all


def client_stack() -> dict[str, str]:
    """What the streaming client runs on, for the manifest: the event loop (`http1.event_loop_name`)
    and the JSON codec of the answers (``orjson`` or the stdlib's ``json``)."""
    return {"event_loop": http1.event_loop_name(), "json": "orjson" if _orjson is not None else "json"}


def _encode(body: dict[str, Any]) -> bytes:
    if _orjson is not None:
        try:
            return _orjson.dumps(body)
        except TypeError:  # a type orjson does not write: the stdlib's answer (or its error)
            pass
    return json.dumps(body, separators=(",", ":")).encode()


@dataclass
class _Prepared:
    """A request ready to send: its bytes, its accumulator, what its record will carry."""

    labels: Labels
    rid: str
    prompt_len: int
    ihash: str
    path: str
    payload: bytes
    acc: StreamAccumulator
    reader: _SseReader
    scheduled_ns: int | None

    def record(self, wall_start: float, sent_ns: int) -> RequestRecord:
        rec = self.acc.to_record(
            self.labels,
            rid=self.rid,
            prompt_len=self.prompt_len,
            input_hash_=self.ihash,
            wall_start=wall_start,
            sent_ns=sent_ns,
        )
        rec.scheduled_ns = self.scheduled_ns
        return rec


class StreamingClient:
    """Async streaming client bound to one server. Streams go through `harness.server.http1` (kept-alive
    connections, a stamp per network read, parsing deferred past the stamps); control requests
    (`flush_cache`) through httpx (`transport` applies to those only). `generate` returns a
    record for every outcome; `generate_at` sends at a given instant (`harness.server.schedule`)."""

    def __init__(
        self,
        base_url: str,
        *,
        timeout_s: float = 300.0,
        api: Api = "generate",
        stream_mode: StreamMode = "auto",
        max_connections: int = 4096,
        model: str = "default",
        transport: httpx.AsyncBaseTransport | None = None,
        max_line_bytes: int = MAX_LINE_BYTES,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s
        self.api: Api = api
        self.stream_mode: StreamMode = stream_mode
        self.model = model
        self.max_line_bytes = max_line_bytes
        self._rid_prefix = uuid.uuid4().hex[:8]
        self._rid_seq = itertools.count()
        self.burst_ns = BURST_NS
        self._burst_start: int | None = None  # when the sends of this turn of the event loop began
        self._burst_sends = 0
        self._parked: collections.deque[asyncio.Future] = collections.deque()
        self._pool = http1_pool.Pool(
            self.base_url,
            max_connections=max_connections,
            connect_timeout_s=min(30.0, timeout_s),
            headers=auth_headers(self.base_url),  # a server given an API key (server.api_key_env)
        )
        # Control requests only (flush_cache): fidelity does not matter there.
        timeout = httpx.Timeout(timeout_s, connect=min(30.0, timeout_s), pool=None)
        # identity: a compressed answer could expand past a byte bound in a single read
        self._http = httpx.AsyncClient(
            base_url=self.base_url,
            timeout=timeout,
            transport=transport,
            trust_env=False,
            headers=request_headers(self.base_url),
        )

    async def aclose(self) -> None:
        await self._pool.aclose()
        await self._http.aclose()

    async def __aenter__(self) -> "StreamingClient":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # -- body ------------------------------------------------------------------------------
    def _generate_body(self, req: GenerateRequest, rid: str) -> dict[str, Any]:
        sp: dict[str, Any] = {"max_new_tokens": req.max_new_tokens, "temperature": req.temperature}
        if req.ignore_eos:
            sp["ignore_eos"] = True
        sp.update(req.extra_sampling_params)
        body: dict[str, Any] = {"sampling_params": sp, "stream": True, "rid": rid}
        if req.input_ids is not None:
            body["input_ids"] = req.input_ids
        else:
            body["text"] = req.text
        if req.return_logprob or req.top_logprobs_num:
            body["return_logprob"] = True
            body["logprob_start_len"] = -1  # output positions only
            if req.top_logprobs_num:
                body["top_logprobs_num"] = req.top_logprobs_num
        return body

    def _completions_body(self, req: GenerateRequest) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.model,
            "prompt": req.input_ids if req.input_ids is not None else req.text,
            "max_tokens": req.max_new_tokens,
            "temperature": req.temperature,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if req.ignore_eos:
            body["ignore_eos"] = True
        if req.return_logprob or req.top_logprobs_num:
            body["logprobs"] = max(1, req.top_logprobs_num)
        body.update(req.extra_sampling_params)
        return body

    # -- request ---------------------------------------------------------------------------
    def _prepare(
        self, req: GenerateRequest, labels: Labels, rid: str | None, api: Api | None, scheduled_ns: int | None
    ) -> "_Prepared":
        """Everything a request needs before it is sent (body bytes, accumulator)."""
        api = api or self.api
        if not rid:  # unique: this client's random prefix and a count (no uuid4 per request)
            seq = f"{self._rid_prefix}{next(self._rid_seq):x}"
            rid = f"{labels.workload or 'req'}-{labels.phase}-r{labels.repeat}-{labels.index}-{seq}"
        if api == "generate":
            path, body = "/generate", self._generate_body(req, rid)
        else:
            path, body = "/v1/completions", self._completions_body(req)
        sent = len(req.input_ids) if req.input_ids is not None and req.text is None else None
        acc = StreamAccumulator(self.stream_mode, max_new_tokens=_max_new(body, api), sent_prompt_tokens=sent)
        prompt_len = labels.prompt_len if labels.prompt_len is not None else req.prompt_len
        return _Prepared(
            labels,
            rid,
            prompt_len,
            input_hash(req.input_ids, req.text),
            path,
            _encode(body),
            acc,
            _SseReader(acc, api, self.max_line_bytes),
            scheduled_ns,
        )

    async def generate(
        self,
        req: GenerateRequest,
        labels: Labels = Labels(),
        *,
        abort: Abort | None = None,
        timeout_s: float | None = None,
        rid: str | None = None,
        api: Api | None = None,
    ) -> RequestRecord:
        """Send one streaming request; return its record. Never raises for server failures
        (cancelling the caller still propagates). `api` overrides the client's default."""
        await self._send_turn()
        return await self._run(self._prepare(req, labels, rid, api, None), abort, timeout_s)

    async def _send_turn(self) -> None:
        """Pace a burst (a concurrency group of hundreds of requests started at once): the sends
        of one turn of the event loop take at most `burst_ns` (building and writing each request
        is tens of µs); the rest wait, parked in order, until the loop has polled its sockets, so
        the chunks already on their way are stamped when they arrive, not after the last send.
        A request alone, or a few, go at once."""
        while True:
            now = time.perf_counter_ns()
            if self._burst_start is None:
                self._burst_start, self._burst_sends = now, 0
                asyncio.get_running_loop().call_soon(self._end_burst)  # runs after the loop's next poll
            if self._burst_sends == 0 or now - self._burst_start < self.burst_ns:  # the first always goes
                self._burst_sends += 1
                return
            fut = asyncio.get_running_loop().create_future()
            self._parked.append(fut)
            try:
                await fut
            except asyncio.CancelledError:
                if not fut.cancelled():  # woken, then cancelled before it ran: wake one in its place
                    self._wake(1)
                raise

    def _end_burst(self) -> None:
        """Next turn of the loop: a new burst may begin; wake as many parked senders as the last
        burst held (they run in this order on the following turn)."""
        self._burst_start = None
        self._wake(max(1, self._burst_sends))

    def _wake(self, n: int) -> None:
        for _ in range(n):
            while self._parked:
                fut = self._parked.popleft()
                if not fut.done():  # a cancelled waiter is skipped
                    fut.set_result(None)
                    break
            else:
                break

    async def generate_at(
        self,
        t_ns: int,
        req: GenerateRequest,
        labels: Labels = Labels(),
        *,
        abort: Abort | None = None,
        timeout_s: float | None = None,
        rid: str | None = None,
        api: Api | None = None,
    ) -> RequestRecord:
        """`generate`, sent at the instant `t_ns` (`time.perf_counter_ns()`), or at once when that
        has passed: the body is built first, then the send waits (`harness.server.schedule.sleep_until_ns`)
        and goes out on an idle connection without another turn of the event loop. The record's
        `scheduled_ns` is `t_ns` and its `sent_ns` the actual send: the difference is the
        client's schedule lag (`harness.server.schedule.schedule_lag`)."""
        prepared = self._prepare(req, labels, rid, api, t_ns)
        await sleep_until_ns(t_ns)
        return await self._run(prepared, abort, timeout_s)

    async def _run(self, p: "_Prepared", abort: Abort | None, timeout_s: float | None) -> RequestRecord:
        """Send and read one request. No task of its own: the request is written from the
        caller's turn of the event loop (on an idle connection), and the caller waits on one
        future that the response's end, the time limit or the abort signal resolves."""
        acc = p.acc
        limit = self.timeout_s if timeout_s is None else timeout_s
        wall, sent = time.time(), time.perf_counter_ns()
        if abort is not None and abort.fired:
            acc.error = abort.reason or "aborted"
            return p.record(wall, sent)
        loop = asyncio.get_running_loop()
        deadline, stalled_at_start = loop.time() + limit, stall.stalled_s()
        fresh = False
        while True:
            ex = None if fresh else self._pool.start("POST", p.path, p.payload, p.reader)
            if ex is None:  # no idle connection: open one (or wait for one), within the limit
                try:
                    ex = await asyncio.wait_for(
                        self._pool.send("POST", p.path, p.payload, p.reader, fresh=fresh),
                        max(0.0, deadline - loop.time()),
                    )
                except asyncio.TimeoutError:
                    acc.error = (abort.reason if abort is not None and abort.fired else None) or "timeout"
                    return p.record(wall, sent)
                except http1.HttpError as exc:
                    acc.error = "timeout" if exc.kind == "timeout" else "connection"
                    return p.record(wall, sent)
            wall, sent = ex.wall_start, ex.sent_ns
            outcome = await self._wait(ex, loop, deadline, abort, stalled_at_start)
            if outcome is not None:  # the time limit or the abort signal came first
                if not acc.done:
                    acc.error = outcome
                break
            if self._pool.stale(ex) and not fresh:
                fresh = True  # a kept-alive connection the server had closed: once more, on a new one
                continue
            if ex.error is not None and acc.error is None:
                acc.error = (
                    ex.error.kind
                    if ex.error.kind in ("timeout", "connection")
                    else f"protocol: {_clip(ex.error.detail)}"
                )
            break
        if acc.error is None and not acc.done:
            acc.error = "protocol: stream ended without [DONE]"
        return p.record(wall, sent)

    @staticmethod
    async def _wait(
        ex: http1.Exchange,
        loop: asyncio.AbstractEventLoop,
        deadline: float,
        abort: Abort | None,
        stalled_at_start: float = 0.0,
    ) -> str | None:
        """Wait for the exchange to finish; "timeout" or the abort reason if that came first
        (then the connection is closed). Cancelling the caller closes it too. The limit waits out
        the harness's own stalls inside it (`harness.core.stall`): a paused harness found every
        deadline passed on waking, before it had read what the server had sent meanwhile."""
        fut = ex.waiter
        assert fut is not None
        if fut.done():
            return None
        owed = [0.0]  # the harness's stall already added to the deadline

        def expire() -> None:
            if fut.done():
                return
            stalled = stall.stalled_s() - stalled_at_start
            if stalled > owed[0] + 0.01:
                owed[0] = stalled
                timer[0] = loop.call_at(deadline + stalled, expire)
                return
            fut.set_result("timeout")

        def aborted() -> None:
            if not fut.done():
                fut.set_result((abort.reason if abort is not None else None) or "aborted")

        timer = [loop.call_at(deadline, expire)]
        if abort is not None:
            abort.add_callback(aborted)
        try:
            outcome = await fut
        except BaseException:
            ex.cancel()
            raise
        finally:
            timer[0].cancel()
            if abort is not None:
                abort.remove_callback(aborted)
        if outcome is not None:
            ex.cancel()
        return outcome

    # -- control endpoints -----------------------------------------------------------------
    async def _flush_once(self) -> int:
        async with self._http.stream("POST", "/flush_cache", timeout=FLUSH_S) as r:
            try:
                await aread_limited(r, MAX_PROBE_BYTES, deadline_s=FLUSH_S)
            except ServerAnswerError:
                pass
            return r.status_code

    async def flush_cache(self, *, attempts: int = 20, wait_s: float = 0.25) -> bool:
        """POST /flush_cache. sglang refuses (400) while requests run: retry a few times. Only
        the status counts: the body is read up to a bound, never kept."""
        for _ in range(max(1, attempts)):
            try:  # the whole answer, head included, within FLUSH_S (a dripping head is no answer)
                status = await asyncio.wait_for(self._flush_once(), FLUSH_S)
            except (httpx.HTTPError, asyncio.TimeoutError):
                return False
            if status == 200:
                return True
            await asyncio.sleep(wait_s)
        return False

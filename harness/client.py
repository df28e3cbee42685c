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

Streaming facts this relies on (docs/sglang-facts.md, sglang tokenizer_manager):
- SSE `data: {json}` lines ending with `data: [DONE]`.
- `output_ids` (and `text`) are cumulative by default and incremental with `--stream-output` /
  `--incremental-streaming-output`; `StreamAccumulator` detects which, using
  `meta_info.completion_tokens` (a running total) where present and a prefix check otherwise.
- TTFT keys off the first chunk that brings new output ids, never off `text` (with
  `--skip-tokenizer-init` there is no text at all).
- `meta_info.cached_tokens_details` is null (or absent) on a miss and `{device, host[, storage]}`
  on a hit. Decision: details null and `cached_tokens == 0` → tiers 0/0/0 (a miss is a miss);
  details null and `cached_tokens > 0` → tiers None ("not reported": an older build), never
  guessed as device hits.
- With `return_logprob`, `meta_info.output_token_logprobs` is a list of `[logprob, token_id, text]`
  and `output_top_logprobs` a list (per position) of such lists; cumulative or per-chunk like ids.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Literal

import httpx

from harness.records import RequestRecord

StreamMode = Literal["auto", "cumulative", "incremental"]
Api = Literal["generate", "completions"]


@dataclass(frozen=True)
class GenerateRequest:
    """What to send. Exactly one of `input_ids` / `text`."""

    input_ids: list[int] | None = None
    text: str | None = None
    max_new_tokens: int = 1
    temperature: float = 0.0
    ignore_eos: bool = False
    return_logprob: bool = False
    top_logprobs_num: int = 0
    extra_sampling_params: dict[str, Any] = field(default_factory=dict)

    @property
    def prompt_len(self) -> int:
        """Tokens sent when ids are given; for text the caller's token count is unknown here (0)."""
        return len(self.input_ids) if self.input_ids is not None else 0


@dataclass(frozen=True)
class Labels:
    """Where a record belongs; copied verbatim into the record."""

    variant: str = ""
    workload: str = ""
    phase: str = ""
    repeat: int = 0
    index: int = 0
    warmup: bool = False
    concurrency_group: str | None = None
    prompt_len: int | None = None  # overrides GenerateRequest.prompt_len (text prompts)


class Abort:
    """A signal shared by in-flight requests: once `fire(reason)` is called, each of them stops
    and is recorded with `error=reason` (e.g. "server_died")."""

    def __init__(self) -> None:
        self.event = asyncio.Event()
        self.reason: str | None = None

    def fire(self, reason: str) -> None:
        if self.reason is None:
            self.reason = reason
        self.event.set()

    @property
    def fired(self) -> bool:
        return self.event.is_set()


def input_hash(input_ids: list[int] | None, text: str | None) -> str:
    """sha256 of what was sent: `ids:` + comma-joined ids, or `text:` + UTF-8 text."""
    if input_ids is not None:
        payload = b"ids:" + ",".join(map(str, input_ids)).encode()
    else:
        payload = b"text:" + (text or "").encode("utf-8")
    return hashlib.sha256(payload).hexdigest()


def _finish_reason(raw: Any) -> tuple[str | None, str | None]:
    """sglang sends `{"type": "length", "length": 16}`, `{"type": "stop", "matched": 2}`,
    `{"type": "abort", "message": ...}`; OpenAI-style sends a plain string. → (type, abort msg)."""
    if raw is None:
        return None, None
    if isinstance(raw, dict):
        kind = raw.get("type")
        kind = str(kind) if kind is not None else "unknown"
        if kind == "abort":
            return kind, str(raw.get("message") or "")
        return kind, None
    return str(raw), None


def _int_or_none(v: Any) -> int | None:
    if v is None or isinstance(v, bool):
        return None
    try:
        return int(v)
    except (TypeError, ValueError):
        return None


class StreamAccumulator:
    """Pure state machine over parsed stream chunks (no I/O): feed each JSON object with its
    arrival time; read the fields for a `RequestRecord`. Tested directly with hand-built chunks."""

    def __init__(self, mode: StreamMode = "auto") -> None:
        self.mode: StreamMode = mode
        self.output_ids: list[int] = []
        self.saw_output_ids = False
        self.text: str | None = None
        self._text_incremental = False
        self.chunk_ns: list[int] = []
        self.chunk_new_tokens: list[int] = []
        self.first_token_ns: int | None = None
        self.done_ns: int | None = None
        self.done = False
        self.prompt_tokens: int | None = None
        self.completion_tokens: int | None = None
        self.cached_tokens: int | None = None
        self.details: dict[str, Any] | None = None
        self.finish_reason: str | None = None
        self.output_logprobs: list[float] | None = None
        self.top_logprobs: list[list[list[float]]] | None = None
        self.error: str | None = None
        self._prev_completion: int | None = None

    # -- sglang native /generate -------------------------------------------------------------
    def feed(self, obj: dict[str, Any], t_ns: int) -> None:
        if not isinstance(obj, dict):
            self.error = self.error or f"protocol: chunk is {type(obj).__name__}, not an object"
            return
        if "error" in obj and "meta_info" not in obj:
            err = obj["error"]
            msg = err.get("message") if isinstance(err, dict) else err
            self.error = self.error or f"server_error: {msg}"
            return
        meta = obj.get("meta_info") or {}
        self._read_meta(meta)
        new_n = self._take_ids(obj.get("output_ids"))
        new_text = self._take_text(obj.get("text"))
        if new_n is None:  # a server that sends no ids: count from completion_tokens / text
            new_n = self._count_without_ids(new_text)
        self._take_logprobs(meta)
        self.chunk_ns.append(t_ns)
        self.chunk_new_tokens.append(new_n)
        if new_n > 0 and self.first_token_ns is None:
            self.first_token_ns = t_ns

    def _read_meta(self, meta: dict[str, Any]) -> None:
        if "prompt_tokens" in meta:
            self.prompt_tokens = _int_or_none(meta["prompt_tokens"])
        if "cached_tokens" in meta:
            self.cached_tokens = _int_or_none(meta["cached_tokens"])
        if isinstance(meta.get("cached_tokens_details"), dict):
            self.details = meta["cached_tokens_details"]
        if "finish_reason" in meta:
            kind, abort_msg = _finish_reason(meta["finish_reason"])
            if kind is not None:
                self.finish_reason = kind
            if abort_msg is not None and self.error is None:
                self.error = f"aborted: {abort_msg}"
        self._prev_completion = self.completion_tokens
        if "completion_tokens" in meta:
            self.completion_tokens = _int_or_none(meta["completion_tokens"])

    def _take_ids(self, ids: Any) -> int | None:
        if ids is None:
            return None
        if not isinstance(ids, list):
            self.error = self.error or "protocol: output_ids is not a list"
            return 0
        self.saw_output_ids = True
        prev = self.output_ids
        n_prev = len(prev)
        cumulative = self._is_cumulative(ids, n_prev)
        if cumulative:
            if ids[:n_prev] != prev:
                self.error = self.error or "protocol: cumulative output_ids changed their prefix"
            new = ids[n_prev:]
        else:
            new = ids
        self.output_ids = prev + [int(x) for x in new]
        return len(new)

    def _is_cumulative(self, ids: list, n_prev: int) -> bool:
        if self.mode != "auto":
            return self.mode == "cumulative"
        if n_prev == 0:
            return True  # both readings agree on the first chunk
        total = self.completion_tokens
        if total is not None:
            if len(ids) == total and n_prev + len(ids) != total:
                self.mode = "cumulative"
            elif n_prev + len(ids) == total:
                self.mode = "incremental"
        if self.mode == "auto":  # no usable running total: prefix rule
            return len(ids) >= n_prev and ids[:n_prev] == self.output_ids
        return self.mode == "cumulative"

    def _take_text(self, t: Any) -> str:
        if not isinstance(t, str):
            return ""
        if self.text is None:
            self.text = t
            return t
        if not self._text_incremental and t.startswith(self.text):
            new = t[len(self.text):]
            self.text = t
            return new
        self._text_incremental = True
        self.text += t
        return t

    def _count_without_ids(self, new_text: str) -> int:
        prev = self._prev_completion or 0
        if self.completion_tokens is not None and self.completion_tokens >= prev:
            return self.completion_tokens - prev
        return 1 if new_text else 0

    def _take_logprobs(self, meta: dict[str, Any]) -> None:
        lps = meta.get("output_token_logprobs")
        if isinstance(lps, list):
            vals = [float(e[0]) if isinstance(e, (list, tuple)) else float(e) for e in lps]
            self.output_logprobs = self._align(self.output_logprobs, vals)
        tops = meta.get("output_top_logprobs")
        if isinstance(tops, list):
            rows = [
                [[int(e[1]), float(e[0])] for e in pos if isinstance(e, (list, tuple))]
                if isinstance(pos, list) else []
                for pos in tops
            ]
            self.top_logprobs = self._align(self.top_logprobs, rows)

    def _align(self, have: list | None, got: list) -> list:
        """Logprob lists follow the ids: cumulative (replace) or per-chunk (extend)."""
        total = len(self.output_ids) if self.saw_output_ids else None
        have = have or []
        if total is not None and len(got) != total and len(have) + len(got) == total:
            return have + got
        if total is None and self.mode == "incremental":
            return have + got
        return list(got)

    # -- OpenAI-style /v1/completions --------------------------------------------------------
    def feed_completion(self, obj: dict[str, Any], t_ns: int) -> None:
        """A `/v1/completions` chunk: text deltas, usage on the last chunk (include_usage)."""
        if not isinstance(obj, dict):
            self.error = self.error or "protocol: chunk is not an object"
            return
        if "error" in obj:
            err = obj["error"]
            msg = err.get("message") if isinstance(err, dict) else err
            self.error = self.error or f"server_error: {msg}"
            return
        new_n = 0
        for choice in obj.get("choices") or []:
            delta = choice.get("text") or ""
            self.text = (self.text or "") + delta
            lp = choice.get("logprobs") or {}
            toks = lp.get("tokens") if isinstance(lp, dict) else None
            new_n += len(toks) if isinstance(toks, list) else (1 if delta else 0)
            if isinstance(lp, dict) and isinstance(lp.get("token_logprobs"), list):
                self.output_logprobs = (self.output_logprobs or []) + [
                    float(x) for x in lp["token_logprobs"] if x is not None]
            if choice.get("finish_reason") is not None:
                self.finish_reason = str(choice["finish_reason"])
        usage = obj.get("usage")
        if isinstance(usage, dict):
            self.prompt_tokens = _int_or_none(usage.get("prompt_tokens"))
            self.completion_tokens = _int_or_none(usage.get("completion_tokens"))
            ptd = usage.get("prompt_tokens_details") or {}
            if isinstance(ptd, dict) and "cached_tokens" in ptd:
                self.cached_tokens = _int_or_none(ptd.get("cached_tokens"))
        ext = obj.get("sglext")
        if isinstance(ext, dict) and isinstance(ext.get("cached_tokens_details"), dict):
            self.details = ext["cached_tokens_details"]
        self.chunk_ns.append(t_ns)
        self.chunk_new_tokens.append(new_n)
        if new_n > 0 and self.first_token_ns is None:
            self.first_token_ns = t_ns

    # -- end --------------------------------------------------------------------------------
    def finish(self, t_ns: int) -> None:
        self.done = True
        self.done_ns = t_ns

    def tiers(self) -> tuple[int | None, int | None, int | None]:
        """(device, host, storage) per the module's null-details decision."""
        d = self.details
        if isinstance(d, dict):
            return (_int_or_none(d.get("device")) or 0, _int_or_none(d.get("host")) or 0,
                    _int_or_none(d.get("storage")) or 0)
        if self.cached_tokens == 0:
            return 0, 0, 0
        return None, None, None

    def to_record(self, labels: Labels, *, rid: str, prompt_len: int, input_hash_: str,
                  wall_start: float, sent_ns: int) -> RequestRecord:
        device, host, storage = self.tiers()
        return RequestRecord(
            variant=labels.variant, workload=labels.workload, phase=labels.phase,
            repeat=labels.repeat, index=labels.index, rid=rid, warmup=labels.warmup,
            concurrency_group=labels.concurrency_group, prompt_len=prompt_len,
            input_hash=input_hash_, wall_start=wall_start, sent_ns=sent_ns,
            first_token_ns=self.first_token_ns, chunk_ns=list(self.chunk_ns),
            chunk_new_tokens=list(self.chunk_new_tokens), done_ns=self.done_ns,
            prompt_tokens=self.prompt_tokens, completion_tokens=self.completion_tokens,
            cached_tokens=self.cached_tokens, cached_device=device, cached_host=host,
            cached_storage=storage, output_ids=list(self.output_ids), text=self.text,
            output_logprobs=self.output_logprobs, top_logprobs=self.top_logprobs,
            finish_reason=self.finish_reason, error=self.error,
        )


class StreamingClient:
    """Async streaming client bound to one server. One `httpx.AsyncClient` with a pool sized for
    many concurrent streams; `generate` returns a record for every outcome."""

    def __init__(self, base_url: str, *, timeout_s: float = 300.0, api: Api = "generate",
                 stream_mode: StreamMode = "auto", max_connections: int = 4096,
                 model: str = "default", transport: httpx.AsyncBaseTransport | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s
        self.api: Api = api
        self.stream_mode: StreamMode = stream_mode
        self.model = model
        limits = httpx.Limits(max_connections=max_connections,
                              max_keepalive_connections=max_connections, keepalive_expiry=60.0)
        # Per-read limit = the request limit; the whole-request limit is enforced in generate().
        timeout = httpx.Timeout(timeout_s, connect=min(30.0, timeout_s), pool=None)
        self._http = httpx.AsyncClient(base_url=self.base_url, limits=limits, timeout=timeout,
                                       transport=transport, trust_env=False)

    async def aclose(self) -> None:
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
            "max_tokens": req.max_new_tokens, "temperature": req.temperature, "stream": True,
            "stream_options": {"include_usage": True},
        }
        if req.ignore_eos:
            body["ignore_eos"] = True
        if req.return_logprob or req.top_logprobs_num:
            body["logprobs"] = max(1, req.top_logprobs_num)
        body.update(req.extra_sampling_params)
        return body

    # -- request ---------------------------------------------------------------------------
    async def generate(self, req: GenerateRequest, labels: Labels = Labels(), *,
                       abort: Abort | None = None, timeout_s: float | None = None,
                       rid: str | None = None, api: Api | None = None) -> RequestRecord:
        """Send one streaming request; return its record. Never raises for server failures
        (cancelling the caller still propagates). `api` overrides the client's default."""
        api = api or self.api
        rid = rid or f"{labels.workload or 'req'}-{labels.phase}-r{labels.repeat}-{labels.index}-{uuid.uuid4().hex[:12]}"
        acc = StreamAccumulator(self.stream_mode)
        prompt_len = labels.prompt_len if labels.prompt_len is not None else req.prompt_len
        ihash = input_hash(req.input_ids, req.text)
        if api == "generate":
            path, body = "/generate", self._generate_body(req, rid)
        else:
            path, body = "/v1/completions", self._completions_body(req)
        payload = json.dumps(body, separators=(",", ":")).encode()
        limit = self.timeout_s if timeout_s is None else timeout_s
        stamp: dict[str, Any] = {}
        if abort is not None and abort.fired:
            return self._unsent(acc, labels, rid, prompt_len, ihash, abort.reason or "aborted")

        task = asyncio.create_task(self._stream(path, payload, acc, stamp, api))
        waiters: set[asyncio.Future] = {task}
        abort_wait = asyncio.create_task(abort.event.wait()) if abort is not None else None
        if abort_wait is not None:
            waiters.add(abort_wait)
        try:
            done, _ = await asyncio.wait(waiters, timeout=limit, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            task.cancel()
            if abort_wait is not None:
                abort_wait.cancel()
            raise
        if abort_wait is not None and not abort_wait.done():
            abort_wait.cancel()
        if task not in done:
            task.cancel()
            try:
                await task
            except (asyncio.CancelledError, Exception):
                pass
            if acc.error is None or acc.error == "connection":
                acc.error = (abort.reason if abort is not None and abort.fired else None) or "timeout"
        elif task.exception() is not None:  # _stream maps known failures itself
            exc = task.exception()
            acc.error = acc.error or f"protocol: {type(exc).__name__}: {exc}"
        if acc.error is None and not acc.done:
            acc.error = "protocol: stream ended without [DONE]"
        return acc.to_record(labels, rid=rid, prompt_len=prompt_len, input_hash_=ihash,
                             wall_start=stamp.get("wall", time.time()),
                             sent_ns=stamp.get("sent_ns", time.perf_counter_ns()))

    @staticmethod
    def _unsent(acc: StreamAccumulator, labels: Labels, rid: str, prompt_len: int, ihash: str,
                reason: str) -> RequestRecord:
        acc.error = reason
        now = time.perf_counter_ns()
        return acc.to_record(labels, rid=rid, prompt_len=prompt_len, input_hash_=ihash,
                             wall_start=time.time(), sent_ns=now)

    async def _stream(self, path: str, payload: bytes, acc: StreamAccumulator,
                      stamp: dict[str, Any], api: Api) -> None:
        feed = acc.feed if api == "generate" else acc.feed_completion
        clock = time.perf_counter_ns
        stamp["wall"] = time.time()
        stamp["sent_ns"] = clock()
        try:
            async with self._http.stream("POST", path, content=payload,
                                         headers={"content-type": "application/json"}) as resp:
                if resp.status_code != 200:
                    await resp.aread()
                    acc.error = f"http_{resp.status_code}"
                    return
                # Raw bytes, split here: one arrival stamp per network read (every line in it
                # arrived then), and no text/line decoding layers per chunk.
                buf = b""
                async for raw in resp.aiter_bytes():
                    t = clock()
                    buf += raw
                    *lines, buf = buf.split(b"\n")
                    for line in lines:
                        if not line.startswith(b"data:"):
                            continue
                        data = line[5:].strip()
                        if data == b"[DONE]":
                            acc.finish(t)
                            break
                        try:
                            obj = json.loads(data)
                        except ValueError:
                            acc.error = acc.error or "protocol: invalid JSON in stream"
                            continue
                        feed(obj, t)
                    if acc.done:
                        break
            if not acc.done and acc.error is None and acc.finish_reason is not None and acc.chunk_ns:
                acc.finish(acc.chunk_ns[-1])  # tolerate a missing [DONE] after a finished chunk
        except httpx.TimeoutException:
            acc.error = acc.error or "timeout"
        except (httpx.NetworkError, httpx.RemoteProtocolError):
            acc.error = acc.error or "connection"
        except httpx.HTTPError as exc:
            acc.error = acc.error or f"protocol: {type(exc).__name__}: {exc}"

    # -- control endpoints -----------------------------------------------------------------
    async def flush_cache(self, *, attempts: int = 20, wait_s: float = 0.25) -> bool:
        """POST /flush_cache. sglang refuses (400) while requests run: retry a few times."""
        for _ in range(max(1, attempts)):
            try:
                r = await self._http.post("/flush_cache", timeout=30.0)
            except httpx.HTTPError:
                return False
            if r.status_code == 200:
                return True
            await asyncio.sleep(wait_s)
        return False

"""One streaming answer read and checked: SSE lines, cumulative or incremental chunks, the
caps a request's `max_new_tokens` sets, the record's figures (`StreamAccumulator`).

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

What the server says is checked where it enters; a bad answer makes that request's record an
error (`protocol: <what was wrong>`, timestamps kept, the bad figures set to None), never an
exception and never a silent figure:
- an SSE line longer than `MAX_LINE_BYTES` ends the request and drops the connection (memory
  stays bounded whatever the server sends); so do more chunks, output ids or text than the request
  can produce (`StreamAccumulator`'s caps, from `max_new_tokens`);
- JSON is strict (`harness.server.info.loads_strict`: no NaN/Infinity);
- output ids are ints in [0, MAX_TOKEN_ID], checked per chunk (cheap: the new ids only);
- meta_info counts (prompt, completion, cached, cached_tokens_details.device/host/storage),
  `queue_time` (sglang 0.5.17 sends it only with `--enable-metrics`) and logprobs are checked once, when the record is made (`StreamAccumulator.check_answer`):
  non-negative ints, cached <= prompt, tiers sum <= prompt (not <= cached: sglang 0.5.17 reports a
  declined load-back's host hit beside a smaller cached_tokens), completion within the cap, logprobs
  finite numbers.
"""

from __future__ import annotations

import math
from typing import Any, Literal

from harness.core import bounds
from harness.server import http1
from harness.server.info import loads_strict, show
from harness.server.request import Labels, _orjson
from harness.store.records import RequestRecord
from harness.store.secrets import scrub

StreamMode = Literal["auto", "cumulative", "incremental"]
Api = Literal["generate", "completions"]

MAX_LINE_BYTES = (
    bounds.STREAM_LINE_BYTES
)  # one SSE line; sglang's largest (cumulative ids + top logprobs) are ~100s of KB
MAX_TOKEN_ID = (1 << 31) - 1  # token ids are int32 in sglang
MAX_TOKEN_COUNT = 1 << 31  # prompt/cached/completion counts beyond this are garbage
MAX_MESSAGE_CHARS = 300  # server-supplied strings kept in `error` / `finish_reason`
# Per request, from its max_new_tokens (None: unknown): more than this is not an answer to it.
OUTPUT_SLACK = 1024  # output ids (and completion_tokens) beyond max_new_tokens
CHUNKS_PER_TOKEN = 4  # chunks per asked token (+ OUTPUT_SLACK): empty keep-alive chunks happen
TEXT_CHARS_PER_TOKEN = 256  # accumulated text per asked token (+ MAX_LINE_BYTES)
UNKNOWN_MAX_NEW = 1 << 20
MAX_QUEUE_S = 7 * 86400.0  # a queue_time beyond a week is garbage
REVISED_TAIL_CHARS = 4  # a cumulative text's tail the detokenizer may rewrite (one UTF-8 sequence)


def _decode(data: bytes) -> Any:
    """Strict JSON (no NaN/Infinity). orjson when installed; whatever it refuses is decoded
    again by `loads_strict`, which says why (or accepts what orjson cannot, e.g. ints > 64 bits)."""
    if _orjson is not None:
        try:
            return _orjson.loads(data)
        except _orjson.JSONDecodeError:
            pass
    return loads_strict(data)


def _clip(text: str, limit: int = MAX_MESSAGE_CHARS) -> str:
    """A server-supplied string as a record keeps it: known secrets scrubbed (a server echoing
    the API key in an error or abort message), then clipped."""
    text = scrub(text)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _finish_reason(raw: Any) -> tuple[str | None, str | None]:
    """sglang sends `{"type": "length", "length": 16}`, `{"type": "stop", "matched": 2}`,
    `{"type": "abort", "message": ...}`; OpenAI-style sends a plain string. → (type, abort msg)."""
    if raw is None:
        return None, None
    if isinstance(raw, dict):
        kind = raw.get("type")
        kind = _clip(str(kind), 60) if kind is not None else "unknown"
        if kind == "abort":
            return kind, _clip(str(raw.get("message") or ""))
        return kind, None
    return _clip(str(raw), 60), None


def _server_error(err: Any) -> str:
    msg = err.get("message") if isinstance(err, dict) else err
    return f"server_error: {_clip(str(msg))}"


class _Bad(Exception):
    """An answer that fails a check (internal to `check_answer`)."""


def _count(value: Any, what: str) -> int | None:
    """A token count the server reported: None (not reported) or an int in [0, MAX_TOKEN_COUNT]."""
    if value is None:
        return None
    if type(value) is not int or not 0 <= value <= MAX_TOKEN_COUNT:
        raise _Bad(f"{what} is {show(value)}, not a token count")
    return value


def _queue_time(value: Any) -> float | None:
    """``meta_info.queue_time`` (seconds): a finite number, or absent. Negative is None, not an
    error: sglang sends forward entry − wait-queue entry, below 0 only when its forward-entry stamp
    is unset (a stage it skipped), which is no queueing figure."""
    if value is None:
        return None
    if type(value) not in (int, float) or not math.isfinite(value):
        raise _Bad(f"queue_time is {show(value)}, not a finite number")
    if value > MAX_QUEUE_S:
        raise _Bad(f"queue_time {value} s is more than {MAX_QUEUE_S:.0f} s")
    return float(value) if value >= 0 else None


def _logprob(value: Any, what: str) -> float:
    if type(value) not in (int, float) or not math.isfinite(value):
        raise _Bad(f"{what} holds {show(value)}, not a finite logprob")
    return float(value)


class StreamAccumulator:
    """Pure state machine over parsed stream chunks (no I/O): feed each JSON object with its
    arrival time; read the fields for a `RequestRecord`. Tested directly with hand-built chunks.

    Per chunk only what is cheap is checked (new ids, caps); meta_info counts and logprobs are kept
    as sent and checked once by `check_answer` (called by `to_record`). `closed` turns true when
    the stream is over for this request: [DONE], or a cap passed (then the reader drops it)."""

    def __init__(
        self, mode: StreamMode = "auto", max_new_tokens: int | None = None, sent_prompt_tokens: int | None = None
    ) -> None:
        self.mode: StreamMode = mode
        # the prompt's token ids as sent (None: sent as text, its length is the server's to say)
        self.sent_prompt_tokens = sent_prompt_tokens
        asked = max_new_tokens if type(max_new_tokens) is int and max_new_tokens >= 0 else UNKNOWN_MAX_NEW
        self.max_output_tokens = asked + OUTPUT_SLACK
        self.asked_tokens = max_new_tokens if asked == max_new_tokens else None
        self.max_chunks = CHUNKS_PER_TOKEN * asked + OUTPUT_SLACK
        self.max_text_chars = TEXT_CHARS_PER_TOKEN * asked + MAX_LINE_BYTES
        self.output_ids: list[int] = []
        self.saw_output_ids = False
        self.text: str | None = None
        self._text_incremental = False
        self.chunk_ns: list[int] = []
        self.chunk_new_tokens: list[int] = []
        self.first_token_ns: int | None = None
        self.done_ns: int | None = None
        self.done = False
        self.closed = False
        # As sent until check_answer() has run; then int | None.
        self.prompt_tokens: Any = None
        self.completion_tokens: Any = None
        self.cached_tokens: Any = None
        self.details: Any = None
        self.cached_device: int | None = None
        self.cached_host: int | None = None
        self.cached_storage: int | None = None
        self.finish_reason: str | None = None
        self.output_logprobs: list | None = None
        self.top_logprobs: list | None = None
        self.error: str | None = None
        self.queue_time: Any = None  # meta_info.queue_time as sent; float | None after check_answer
        self._prev_completion: Any = None
        self._checked = False

    def abandon(self, reason: str) -> None:
        """Stop reading this stream: it broke a bound (the reader drops the connection)."""
        self.error = self.error or f"protocol: {reason}"
        self.closed = True

    def _count_chunk(self, t_ns: int, new_n: int) -> None:
        self.chunk_ns.append(t_ns)
        self.chunk_new_tokens.append(new_n)
        if new_n > 0 and self.first_token_ns is None:
            self.first_token_ns = t_ns
        if len(self.chunk_ns) > self.max_chunks:
            self.abandon(f"more than {self.max_chunks} chunks")

    # -- sglang native /generate -------------------------------------------------------------
    def feed(self, obj: dict[str, Any], t_ns: int) -> None:
        if type(obj) is not dict:
            self.error = self.error or f"protocol: chunk is a {type(obj).__name__}, not an object"
            return
        if "error" in obj and "meta_info" not in obj:
            self.error = self.error or _server_error(obj["error"])
            return
        meta = obj.get("meta_info")
        if meta is None:
            meta = {}
        elif type(meta) is not dict:
            self.error = self.error or f"protocol: meta_info is {show(meta)}, not an object"
            meta = {}
        self._read_meta(meta)
        new_n = self._take_ids(obj.get("output_ids"))
        new_text = self._take_text(obj.get("text"))
        if new_n is None:  # a server that sends no ids: count from completion_tokens / text
            new_n = self._count_without_ids(new_text)
        self._take_logprobs(meta)
        self._count_chunk(t_ns, new_n)

    def _read_meta(self, meta: dict[str, Any]) -> None:
        if "prompt_tokens" in meta:
            self.prompt_tokens = meta["prompt_tokens"]
        if "cached_tokens" in meta:
            self.cached_tokens = meta["cached_tokens"]
        details = meta.get("cached_tokens_details")
        if details is not None:
            self.details = details
        if "finish_reason" in meta:
            kind, abort_msg = _finish_reason(meta["finish_reason"])
            if kind is not None:
                self.finish_reason = kind
            if abort_msg is not None and self.error is None:
                self.error = f"aborted: {abort_msg}"
        if "queue_time" in meta:  # every chunk carries it (--enable-metrics); the last one stands
            self.queue_time = meta["queue_time"]
        self._prev_completion = self.completion_tokens
        if "completion_tokens" in meta:
            self.completion_tokens = meta["completion_tokens"]

    def _take_ids(self, ids: Any) -> int | None:
        if ids is None:
            return None
        if type(ids) is not list:
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
        for x in new:
            if type(x) is not int or not 0 <= x <= MAX_TOKEN_ID:
                self.error = self.error or f"protocol: output id {show(x)} is not a token id"
                return 0
        if n_prev + len(new) > self.max_output_tokens:
            self.abandon(f"more than {self.max_output_tokens} output ids")
            return 0
        prev.extend(new)
        return len(new)

    def _is_cumulative(self, ids: list, n_prev: int) -> bool:
        if self.mode != "auto":
            return self.mode == "cumulative"
        if n_prev == 0:
            return True  # both readings agree on the first chunk
        total = self.completion_tokens
        if type(total) is int:
            if len(ids) == total and n_prev + len(ids) != total:
                self.mode = "cumulative"
            elif n_prev + len(ids) == total:
                self.mode = "incremental"
        if self.mode == "auto":  # no usable running total: prefix rule
            return len(ids) >= n_prev and ids[:n_prev] == self.output_ids
        return self.mode == "cumulative"

    def _take_text(self, t: Any) -> str:
        if type(t) is not str:
            return ""
        if self.text is None:
            self.text = t
            return t
        if self.mode == "cumulative" and not self._text_incremental and self._revises(t):
            # decided by the ids: each chunk's text is the whole text (a detokenizer may revise
            # the last few characters: an incomplete UTF-8 sequence resolved)
            new = t[len(self.text) :] if t.startswith(self.text) else t
            self.text = t
            return new
        if not self._text_incremental and t.startswith(self.text):
            new = t[len(self.text) :]
            self.text = t
            return new
        self._text_incremental = True
        self.text += t
        if len(self.text) > self.max_text_chars:
            self.abandon(f"more than {self.max_text_chars} characters of text")
        return t

    def _revises(self, t: str) -> bool:
        """Whether `t` reads as the whole text so far, its tail perhaps revised: at least as long,
        and the same but for the last `REVISED_TAIL_CHARS` characters. Else it is a delta (a
        server that streams ids cumulatively and text incrementally)."""
        old = self.text or ""
        if t.startswith(old):
            return True
        keep = max(1, len(old) - REVISED_TAIL_CHARS)
        return len(t) >= len(old) and t[:keep] == old[:keep]

    def _count_without_ids(self, new_text: str) -> int:
        cur, prev = self.completion_tokens, self._prev_completion
        if type(cur) is int and cur >= 0:
            prev = prev if type(prev) is int and prev >= 0 else 0
            if cur >= prev:
                return cur - prev
        return 1 if new_text else 0

    def _take_logprobs(self, meta: dict[str, Any]) -> None:
        """Kept as sent (entries `[logprob, id, text]`); shaped and checked by check_answer."""
        lps = meta.get("output_token_logprobs")
        if type(lps) is list:
            self.output_logprobs = self._align(self.output_logprobs, lps)
        tops = meta.get("output_top_logprobs")
        if type(tops) is list:
            self.top_logprobs = self._align(self.top_logprobs, tops)

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
        if type(obj) is not dict:
            self.error = self.error or f"protocol: chunk is a {type(obj).__name__}, not an object"
            return
        if "error" in obj:
            self.error = self.error or _server_error(obj["error"])
            return
        new_n = 0
        choices = obj.get("choices") or []
        if type(choices) is not list:
            self.error = self.error or f"protocol: choices is {show(choices)}, not a list"
            choices = []
        for choice in choices:
            if type(choice) is not dict:
                self.error = self.error or f"protocol: a choice is {show(choice)}, not an object"
                continue
            delta = choice.get("text") or ""
            if type(delta) is not str:
                self.error = self.error or f"protocol: choice text is {show(delta)}, not a string"
                delta = ""
            self.text = (self.text or "") + delta
            lp = choice.get("logprobs") or {}
            toks = lp.get("tokens") if type(lp) is dict else None
            new_n += len(toks) if type(toks) is list else (1 if delta else 0)
            if type(lp) is dict and type(lp.get("token_logprobs")) is list:
                self.output_logprobs = (self.output_logprobs or []) + [x for x in lp["token_logprobs"] if x is not None]
            if choice.get("finish_reason") is not None:
                self.finish_reason = _clip(str(choice["finish_reason"]), 60)
        if len(self.text or "") > self.max_text_chars:
            self.abandon(f"more than {self.max_text_chars} characters of text")
        usage = obj.get("usage")
        if type(usage) is dict:
            self.prompt_tokens = usage.get("prompt_tokens")
            self.completion_tokens = usage.get("completion_tokens")
            ptd = usage.get("prompt_tokens_details") or {}
            if type(ptd) is dict and "cached_tokens" in ptd:
                self.cached_tokens = ptd.get("cached_tokens")
        ext = obj.get("sglext")
        if type(ext) is dict and ext.get("cached_tokens_details") is not None:
            self.details = ext["cached_tokens_details"]
        self._count_chunk(t_ns, new_n)

    # -- end --------------------------------------------------------------------------------
    def finish(self, t_ns: int) -> None:
        self.done = True
        self.closed = True
        self.done_ns = t_ns

    def check_answer(self) -> None:
        """Check, once, what the server reported (see the module's docs) and turn the fields into
        their record types. A bad value sets `error` (unless one is already set: the first
        failure is the cause) and leaves that figure, and those derived from it, None."""
        if self._checked:
            return
        self._checked = True
        problems: list[str] = []

        def checked(fn, *args):
            try:
                return fn(*args)
            except _Bad as exc:
                problems.append(str(exc))
                return None

        prompt = checked(_count, self.prompt_tokens, "prompt_tokens")
        completion = checked(_count, self.completion_tokens, "completion_tokens")
        if completion is not None and completion > self.max_output_tokens:
            problems.append(f"completion_tokens {completion} is more than the {self.max_output_tokens} possible")
            completion = None
        if sum(self.chunk_new_tokens) > self.max_output_tokens:
            problems.append(f"more than {self.max_output_tokens} output tokens")
        got, asked = completion if completion is not None else sum(self.chunk_new_tokens), self.asked_tokens
        if self.done and self.finish_reason is None and asked is not None and got < asked:  # cut short, silently
            problems.append(f"the answer ended at {got} of the {asked} tokens asked, with no finish reason")
        sent = self.sent_prompt_tokens
        if sent is not None and self.error is None and self.done:
            # the server's counts against what was sent: an answer that does not say how long the
            # prompt was has no figure that can be trusted as a fraction of it
            if prompt is None and self.prompt_tokens is None:
                problems.append(f"no prompt_tokens reported for a prompt of {sent} tokens")
        cached = checked(_count, self.cached_tokens, "cached_tokens")
        if cached is not None and prompt is not None and cached > prompt:
            problems.append(f"cached_tokens {cached} exceeds prompt_tokens {prompt}")
            cached = None
        elif cached is not None and sent is not None and cached > sent:
            problems.append(f"cached_tokens {cached} exceeds the {sent} prompt tokens sent")
            cached = None
        # a bad cached_tokens leaves its tiers unknown too; an absent one is bounded by the prompt
        tiers = checked(self._tiers, cached, prompt) if cached is not None or self.cached_tokens is None else None
        if tiers is None:
            tiers = (None, None, None)
        self.prompt_tokens, self.completion_tokens, self.cached_tokens = prompt, completion, cached
        self.cached_device, self.cached_host, self.cached_storage = tiers
        self.queue_time = checked(_queue_time, self.queue_time)
        self.output_logprobs = checked(self._shape_logprobs, self.output_logprobs)
        self.top_logprobs = checked(self._shape_top_logprobs, self.top_logprobs)
        if problems and self.error is None:
            self.error = "protocol: " + _clip("; ".join(problems))

    def _tiers(self, cached: int | None, prompt: int | None) -> tuple[int | None, int | None, int | None]:
        """(device, host, storage) per the module's null-details decision, checked: their sum is
        at most prompt_tokens. It may exceed cached_tokens: sglang 0.5.17 reports a declined
        load-back's host hit all the same (``host = host_hit_length`` in
        ``ScheduleBatch.prepare_for_extend`` whatever ``HiRadixCache.load_back`` did) while
        cached_tokens counts only what it reused: "hit reported, tokens recomputed"
        (`harness.analysis.attribution`)."""
        d = self.details
        if d is None:
            return (0, 0, 0) if cached == 0 else (None, None, None)
        if type(d) is not dict:
            raise _Bad(f"cached_tokens_details is {show(d)}, not an object")
        tiers = tuple(_count(d.get(k), f"cached_tokens_details.{k}") or 0 for k in ("device", "host", "storage"))
        if prompt is not None and sum(tiers) > prompt:
            raise _Bad(f"cached_tokens_details sum to {sum(tiers)}, more than prompt_tokens {prompt}")
        return tiers

    @staticmethod
    def _shape_logprobs(entries: list | None) -> list[float] | None:
        if entries is None:
            return None
        out = []
        for e in entries:
            if type(e) in (list, tuple):
                if not e:
                    raise _Bad("output_token_logprobs holds an empty entry")
                e = e[0]
            out.append(_logprob(e, "output_token_logprobs"))
        return out

    @staticmethod
    def _shape_top_logprobs(rows: list | None) -> list[list[list[float]]] | None:
        """Per position `[[logprob, id, text], ...]` → `[[id, logprob], ...]`."""
        if rows is None:
            return None
        out = []
        for pos in rows:
            if pos is None:
                out.append([])
                continue
            if type(pos) is not list:
                raise _Bad(f"output_top_logprobs holds {show(pos)}, not a list")
            shaped = []
            for e in pos:
                if e is None:
                    continue
                if type(e) not in (list, tuple) or len(e) < 2:
                    raise _Bad(f"output_top_logprobs holds {show(e)}, not [logprob, id, ...]")
                tid = e[1]
                if type(tid) is not int or not 0 <= tid <= MAX_TOKEN_ID:
                    raise _Bad(f"output_top_logprobs holds token id {show(tid)}")
                shaped.append([tid, _logprob(e[0], "output_top_logprobs")])
            out.append(shaped)
        return out

    def tiers(self) -> tuple[int | None, int | None, int | None]:
        """(device, host, storage), checked (see check_answer)."""
        self.check_answer()
        return self.cached_device, self.cached_host, self.cached_storage

    def to_record(
        self, labels: Labels, *, rid: str, prompt_len: int, input_hash_: str, wall_start: float, sent_ns: int
    ) -> RequestRecord:
        self.check_answer()
        return RequestRecord(
            variant=labels.variant,
            workload=labels.workload,
            phase=labels.phase,
            repeat=labels.repeat,
            index=labels.index,
            rid=rid,
            warmup=labels.warmup,
            concurrency_group=labels.concurrency_group,
            prompt_len=prompt_len,
            input_hash=input_hash_,
            wall_start=wall_start,
            sent_ns=sent_ns,
            first_token_ns=self.first_token_ns,
            chunk_ns=list(self.chunk_ns),
            chunk_new_tokens=list(self.chunk_new_tokens),
            done_ns=self.done_ns,
            prompt_tokens=self.prompt_tokens,
            completion_tokens=self.completion_tokens,
            cached_tokens=self.cached_tokens,
            cached_device=self.cached_device,
            cached_host=self.cached_host,
            cached_storage=self.cached_storage,
            output_ids=list(self.output_ids),
            text=scrub(self.text) if self.text is not None else None,
            output_logprobs=self.output_logprobs,
            top_logprobs=self.top_logprobs,
            finish_reason=self.finish_reason,
            error=self.error,
            queue_time_s=self.queue_time,
        )


def _max_new(body: dict[str, Any], api: Api) -> int | None:
    """The output limit the server was given (after extra_sampling_params): caps the answer."""
    n = body.get("sampling_params", {}).get("max_new_tokens") if api == "generate" else body.get("max_tokens")
    return n if type(n) is int else None


class _SseReader:
    """The `harness.server.http1.Consumer` of one streaming answer: splits the body into SSE lines,
    decodes each `data:` line and feeds the accumulator. Every line carries the stamp of the
    network read that completed it (one stamp per read: every line in it arrived then)."""

    __slots__ = ("acc", "feed", "max_line", "pending")

    def __init__(self, acc: StreamAccumulator, api: Api, max_line: int) -> None:
        self.acc = acc
        self.feed = acc.feed if api == "generate" else acc.feed_completion
        self.max_line = max_line
        self.pending = bytearray()  # a line still arriving (a bytearray: appends stay linear)

    def on_head(self, status: int, headers: dict[str, str]) -> int:
        if status != 200:
            self.acc.error = f"http_{status}"
            return http1.DONE  # a short error body is read (bounded) to keep the connection
        enc = headers.get("content-encoding", "identity").strip().lower()
        if enc not in ("", "identity"):
            self.acc.error = f"protocol: compressed stream (content-encoding: {show(enc, 30)})"
            return http1.DROP
        return http1.MORE

    def on_data(self, t: int, raw: bytes) -> int:
        acc, max_line, pending = self.acc, self.max_line, self.pending
        if b"\n" not in raw:
            pending += raw
            if len(pending) > max_line:
                acc.abandon(f"line longer than {max_line} bytes")
                return http1.DROP
            return http1.MORE
        if pending:
            pending += raw
            raw = bytes(pending)
            pending.clear()
        *lines, tail = raw.split(b"\n")
        for line in lines:
            if len(line) > max_line:
                acc.abandon(f"line longer than {max_line} bytes")
                return http1.DROP
            if not line.startswith(b"data:"):
                continue
            data = line[5:].strip()
            if data == b"[DONE]":
                acc.finish(t)
                return http1.DONE
            try:
                obj = _decode(data)
            except ValueError as exc:
                acc.error = acc.error or f"protocol: invalid JSON in stream ({_clip(str(exc), 120)})"
                continue
            self.feed(obj, t)
            if acc.closed:
                return http1.DROP
        if tail:
            pending += tail
            if len(pending) > max_line:
                acc.abandon(f"line longer than {max_line} bytes")
                return http1.DROP
        return http1.MORE

    def on_end(self, t: int) -> None:
        acc = self.acc
        if not acc.done and acc.error is None and acc.finish_reason is not None and acc.chunk_ns:
            acc.finish(acc.chunk_ns[-1])  # tolerate a missing [DONE] after a finished chunk

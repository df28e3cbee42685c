"""HTTP face of the simulated server: sglang's endpoints, bodies and SSE framing (starlette).

One job: translate HTTP to :class:`Engine` calls and engine state back to sglang's JSON.
- ``POST /generate``: ``text`` or ``input_ids``, ``sampling_params``, ``stream``,
  ``return_logprob``, ``top_logprobs_num``, ``logprob_start_len``, ``rid``.  Stream: one
  ``data: {json}\\n\\n`` per new token(s), cumulative ``output_ids`` (and ``text`` unless
  ``--skip-tokenizer-init``), then ``data: [DONE]\\n\\n``.  ``meta_info``: id, finish_reason,
  prompt_tokens, completion_tokens, cached_tokens, ``cached_tokens_details`` (null on a miss,
  ``{"device": N, "host": M}`` on a hit, as sglang 0.5.17 did; with a storage backend also
  ``"storage": K, "storage_backend": NAME``, as sglang adds when L3 is on), e2e_latency; with
  return_logprob ``output_token_logprobs`` = [[logprob, token_id, null], ...] and
  ``output_top_logprobs`` = per position [[logprob, token_id, null] x k], cumulative; with
  ``--enable-metrics`` sglang's time stats (`_time_stats`: ``queue_time`` & co.).
- ``/v1/completions`` and ``/v1/chat/completions`` (OpenAI's shapes as sglang serves them, streaming
  and not; text counted by the model's tokenizer, `harness.sim.tokens.SimTokenizer`), ``/v1/models``,
  ``/health``, ``/health_generate``,
  ``/get_server_info`` + ``/server_info``, ``/get_model_info`` + ``/model_info``,
  ``/flush_cache`` (400 while requests run), ``/metrics`` (with ``--enable-metrics``).
Until warm-up ends every endpoint but ``/health`` answers 503, like a starting sglang. A client
that goes away has its request aborted (``ABORT_AFTER_STREAM_S``, ``DISCONNECT_POLL_S``).
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, AsyncIterator

from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from harness.core.wire import SENT_HEADER, sent_age_s
from harness.sim.engine import Engine
from harness.sim.faults import Fault, FaultArg
from harness.sim.request import RequestError, SamplingParams, SimRequest
from harness.sim.tokens import SimTokenizer, chat_prompt

FLUSH_TEXT = (
    "Cache flushed.\nPlease check backend logs for more details. "
    "(When there are running or waiting requests, the operation will not be performed.)\n"
)


@dataclass
class AppState:
    engine: Engine
    server_info: dict[str, Any]
    model_info: dict[str, Any]
    skip_tokenizer: bool
    enable_metrics: bool
    enable_cache_report: bool
    served_model_name: str
    tokenizer: SimTokenizer
    ready: bool = False
    faults: dict[Fault, FaultArg | None] = field(default_factory=dict)  # the HTTP layer's faults act here
    extra: dict[str, Any] = field(default_factory=dict)


def _error(message: str, status: int = 400) -> JSONResponse:
    return JSONResponse({"error": {"message": message}, "object": "error", "code": status}, status_code=status)


def _realtime(t: float, clock: float) -> float:
    """A time on a monotonic clock (``clock`` is that clock now) as unix seconds, as sglang's
    ``convert_time_to_realtime`` turns its perf_counter stamps."""
    return time.time() - (clock - t)


def _time_stats(req: SimRequest) -> dict[str, Any]:
    """What sglang 0.5.17 adds to ``meta_info`` with ``--enable-metrics`` (and only then:
    ``TokenizerManager`` merges ``SchedulerReqTimeStats.convert_to_output_meta_info()`` into every
    output, and ``APIServerReqTimeStats``' into the last): ``forward_entry_time`` and
    ``prefill_finished_time`` (unix seconds, once set), ``queue_time`` (seconds from the wait queue
    to the first prefill batch: the request's queueing); at the end ``request_received_ts``,
    ``request_finished_ts`` and ``decode_throughput`` (tokens/s after the first). The simulator's
    stamps are its modelled batch starts and ends."""
    loop_now = asyncio.get_running_loop().time()
    out: dict[str, Any] = {}
    if req.forward_entry_at is None:  # aborted in the queue: sglang answers that with no time stats
        return out
    out["forward_entry_time"] = _realtime(req.forward_entry_at, loop_now)
    if req.prefill_finished_at is not None:
        out["prefill_finished_time"] = _realtime(req.prefill_finished_at, loop_now)
    out["queue_time"] = req.forward_entry_at - req.arrived
    if req.finish_reason is not None:
        perf_now = time.perf_counter()
        out["request_received_ts"] = _realtime(req.created, perf_now)
        if req.finished_at is not None:
            out["request_finished_ts"] = _realtime(req.finished_at, perf_now)
            if req.first_token_at is not None and len(req.output_ids) > 1 and req.finished_at > req.first_token_at:
                out["decode_throughput"] = (len(req.output_ids) - 1) / (req.finished_at - req.first_token_at)
    return out


def _meta(req: SimRequest, storage_backend: str | None = None, time_stats: bool = False) -> dict[str, Any]:
    details: dict[str, Any] | None = None
    if req.cached_tokens or req.cached_host:  # a declined load-back's host hit is reported all the same
        details = {"device": req.cached_device, "host": req.cached_host}
        if storage_backend is not None:
            details.update(storage=req.cached_storage, storage_backend=storage_backend)
    meta: dict[str, Any] = {
        "id": req.rid,
        "finish_reason": req.finish_reason,
        "prompt_tokens": len(req.input_ids),
        "weight_version": "default",
        "completion_tokens": len(req.output_ids),
        "cached_tokens": req.cached_tokens,
        "cached_tokens_details": details,
        "e2e_latency": round(time.perf_counter() - req.created, 6),
    }
    if time_stats:
        meta.update(_time_stats(req))
    if req.return_logprob:
        n = len(req.output_ids)
        meta["output_token_logprobs"] = [[req.output_logprobs[i], req.output_ids[i], None] for i in range(n)]
        meta["output_top_logprobs"] = [[[lp, t, None] for lp, t in req.output_top[i]] for i in range(n)]
    return meta


def _input_ids(body: dict[str, Any], st: AppState) -> list[int]:
    ids = body.get("input_ids")
    text = body.get("text")
    if ids is None and text is None:
        raise RequestError("Either text or input_ids should be provided.")
    if ids is None:
        if st.skip_tokenizer:
            raise RequestError(
                "The engine initialized with skip_tokenizer_init=True cannot accept text prompts. "
                "Please provide input_ids or re-initialize the engine with skip_tokenizer_init=False."
            )
        if not isinstance(text, str):
            raise RequestError("batched text is not supported by the simulator")
        return st.tokenizer.encode(text)
    if not isinstance(ids, list) or not all(isinstance(t, int) and not isinstance(t, bool) for t in ids):
        raise RequestError("input_ids must be one list of integers (batches are not simulated)")
    return list(ids)


def _sampling(sp: Any, default_max: int = 128) -> SamplingParams:
    if sp is None:
        sp = {}
    if not isinstance(sp, dict):
        raise RequestError("sampling_params must be an object")
    try:
        max_new = int(sp.get("max_new_tokens", default_max))
        temp = float(sp.get("temperature", 1.0))
        seed = sp.get("sampling_seed")
    except (TypeError, ValueError) as exc:
        raise RequestError(f"bad sampling_params: {exc}") from exc
    if max_new < 1:
        raise RequestError("max_new_tokens must be at least 1 in the simulator")
    return SamplingParams(
        max_new_tokens=max_new,
        temperature=temp,
        ignore_eos=bool(sp.get("ignore_eos", False)),
        sampling_seed=int(seed) if seed is not None else None,
    )


# sglang's TokenizerManager: a streaming response's background task aborts its request this long
# after the response ended (`create_abort_task`: a no-op for a finished one; a client that went
# away mid-stream frees the GPU then), and a non-streaming request checks every
# SGLANG_REQUEST_STATE_WAIT_TIMEOUT seconds without output, and at each output before its last,
# whether its client is still there.
ABORT_AFTER_STREAM_S = 2.0
DISCONNECT_POLL_S = 4.0


async def _updates(
    req: SimRequest, request: Request | None = None, engine: Engine | None = None
) -> AsyncIterator[None]:
    """Yield after each scheduler update, coalescing what piled up meanwhile. With ``request``
    (a non-streaming answer), a client that went away aborts the request, as sglang's does."""
    while True:
        if req.done:
            pass  # finished while the consumer was away (a slow client): its last state is yielded below
        elif request is None or engine is None:
            await req.updates.get()
        else:
            try:
                await asyncio.wait_for(req.updates.get(), DISCONNECT_POLL_S)
                timed_out = False
            except asyncio.TimeoutError:
                timed_out = True
            # sglang checks on each output of an unfinished request and on each empty wait
            if not req.done and await request.is_disconnected():
                engine.abort(req)
            if timed_out:
                continue
        while not req.updates.empty():
            req.updates.get_nowait()
        # whether the consumer sees the end is decided now: a request that finishes while the
        # consumer writes this update (a client slow to read) gets one more update, its last one
        # (returning on req.done after the yield dropped the final chunk and its finish_reason)
        done = req.done
        yield None
        if done:
            return


def build_app(st: AppState) -> Starlette:
    engine = st.engine

    def not_ready() -> Response | None:
        """The answer to a generation request before it reaches the engine, if any."""
        if not st.ready:
            return _error("The server is not ready yet (simulated startup).", 503)
        if Fault.reject_requests in st.faults:
            return _error("simulated rejection (fault reject_requests)", int(st.faults[Fault.reject_requests] or 400))
        return None

    async def read_body(request: Request) -> dict[str, Any]:
        try:
            body = await request.json()
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise RequestError(f"invalid JSON body: {exc}") from exc
        if not isinstance(body, dict):
            raise RequestError("the request body must be a JSON object")
        return body

    async def health(request: Request) -> Response:
        return Response(status_code=200)

    async def health_generate(request: Request) -> Response:
        if not st.ready:
            return _error("The server is not ready yet (simulated startup).", 503)
        req = SimRequest(
            rid=f"HEALTH_CHECK_{uuid.uuid4().hex[:8]}",
            input_ids=[3, 4, 5, 6],
            sampling=SamplingParams(max_new_tokens=1, temperature=0.0),
            internal=True,
        )
        engine.submit(req)
        async for _ in _updates(req):
            pass
        return Response(status_code=200 if req.error is None else 503)

    def abort_task(req: SimRequest) -> BackgroundTask:
        """Run after a streaming response ended, finished or cut by the client (sglang's
        ``create_abort_task``): the request is aborted ``ABORT_AFTER_STREAM_S`` later."""

        async def later() -> None:
            await asyncio.sleep(ABORT_AFTER_STREAM_S)
            engine.abort(req)

        return BackgroundTask(later)

    def gen_chunk(req: SimRequest) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if not st.skip_tokenizer:
            out["text"] = st.tokenizer.decode(req.output_ids)
        out["output_ids"] = list(req.output_ids)
        out["meta_info"] = _meta(req, engine.cfg.storage_backend, time_stats=st.enable_metrics)
        return out

    def sent_age(request: Request) -> float:
        """How long ago the harness's client wrote this request (`harness.core.wire`): the
        scheduler starts its modelled time there."""
        return sent_age_s(request.headers.get(SENT_HEADER.decode()), time.perf_counter_ns())

    async def generate(request: Request) -> Response:
        if (r := not_ready()) is not None:
            return r
        age = sent_age(request)
        try:
            body = await read_body(request)
            ids = _input_ids(body, st)
            sp = _sampling(body.get("sampling_params"))
            try:
                top_k = int(body.get("top_logprobs_num") or 0)
            except (TypeError, ValueError) as exc:
                raise RequestError(f"bad top_logprobs_num: {exc}") from exc
            req = SimRequest(
                rid=str(body.get("rid") or uuid.uuid4().hex),
                input_ids=ids,
                sampling=sp,
                return_logprob=bool(body.get("return_logprob", False)),
                top_logprobs_num=top_k,
            )
            engine.submit(req, age)
        except RequestError as exc:
            return _error(str(exc))
        if body.get("stream"):

            async def events() -> AsyncIterator[bytes]:
                sent = -1
                async for _ in _updates(req):
                    if req.error is not None:
                        yield f"data: {json.dumps({'error': {'message': req.error}})}\n\n".encode()
                        break
                    if len(req.output_ids) != sent or req.done:
                        sent = len(req.output_ids)
                        yield f"data: {json.dumps(gen_chunk(req))}\n\n".encode()
                yield b"data: [DONE]\n\n"

            return StreamingResponse(events(), media_type="text/event-stream", background=abort_task(req))
        async for _ in _updates(req, request, engine):
            pass
        if req.error is not None:
            return _error(req.error, 500)
        return JSONResponse(gen_chunk(req))

    def openai_sampling(body: dict[str, Any], default_max: int) -> SamplingParams:
        return _sampling(
            {
                "max_new_tokens": body.get("max_completion_tokens") or body.get("max_tokens") or default_max,
                "temperature": body.get("temperature", 1.0),
                "sampling_seed": body.get("seed"),
                "ignore_eos": body.get("ignore_eos", False),
            }
        )

    async def completions(request: Request) -> Response:
        if (r := not_ready()) is not None:
            return r
        age = sent_age(request)
        try:
            body = await read_body(request)
            prompt = body.get("prompt")
            if isinstance(prompt, list) and prompt and isinstance(prompt[0], (list, str)):
                if len(prompt) != 1:
                    raise RequestError("batched prompts are not simulated")
                prompt = prompt[0]
            # text prompts are tokenised even with --skip-tokenizer-init, as sglang's OpenAI server does
            ids = st.tokenizer.encode(prompt) if isinstance(prompt, str) else _input_ids({"input_ids": prompt}, st)
            req = SimRequest(rid=f"cmpl-{uuid.uuid4().hex}", input_ids=ids, sampling=openai_sampling(body, 16))
            engine.submit(req, age)
        except RequestError as exc:
            return _error(str(exc))
        return await openai_answer(request, body, req, chat=False)

    async def chat_completions(request: Request) -> Response:
        """``/v1/chat/completions`` as sglang serves it: the messages through `chat_prompt` and the
        tokenizer, ``max_completion_tokens`` / ``max_tokens``, ``stream`` with
        ``stream_options.include_usage``; chunks of ``chat.completion.chunk`` (the first with the
        assistant role), then ``[DONE]``."""
        if (r := not_ready()) is not None:
            return r
        age = sent_age(request)
        try:
            body = await read_body(request)
            try:
                text = chat_prompt(body.get("messages"))
            except ValueError as exc:
                raise RequestError(str(exc)) from None
            ids = st.tokenizer.encode(text)
            req = SimRequest(rid=uuid.uuid4().hex, input_ids=ids, sampling=openai_sampling(body, 128))
            engine.submit(req, age)
        except RequestError as exc:
            return _error(str(exc))
        return await openai_answer(request, body, req, chat=True)

    async def openai_answer(request: Request, body: dict[str, Any], req: SimRequest, chat: bool) -> Response:
        """The OpenAI answer to ``req``: one object, or an SSE stream of chunks."""
        created = int(time.time())
        model = body.get("model") or st.served_model_name
        n_prompt = len(req.input_ids)

        def usage() -> dict[str, Any]:
            u: dict[str, Any] = {
                "prompt_tokens": n_prompt,
                "completion_tokens": len(req.output_ids),
                "total_tokens": n_prompt + len(req.output_ids),
            }
            if st.enable_cache_report:
                u["prompt_tokens_details"] = {"cached_tokens": req.cached_tokens}
            return u

        def finish() -> str | None:
            return None if req.finish_reason is None else req.finish_reason["type"]

        def choice(text: str, first: bool, stream: bool) -> dict[str, Any]:
            c: dict[str, Any] = {"index": 0}
            if not chat:
                c["text"] = text
            elif stream:
                c["delta"] = {"role": "assistant", "content": text} if first else {"content": text}
            else:
                c["message"] = {"role": "assistant", "content": text, "reasoning_content": None, "tool_calls": None}
            c.update(logprobs=None, finish_reason=finish(), matched_stop=None)
            return c

        def answer(text: str | None, usage_: dict | None, first: bool = False, stream: bool = False) -> dict[str, Any]:
            """An OpenAI object (a stream chunk: ``text`` None = the usage-only chunk)."""
            kind = ("chat.completion.chunk" if stream else "chat.completion") if chat else "text_completion"
            return {
                "id": req.rid,
                "object": kind,
                "created": created,
                "model": model,
                "choices": [] if text is None else [choice(text, first, stream)],
                "usage": usage_,
            }

        if body.get("stream"):
            include_usage = bool((body.get("stream_options") or {}).get("include_usage"))

            async def events() -> AsyncIterator[bytes]:
                sent = 0
                async for _ in _updates(req):
                    if req.error is not None:
                        yield f"data: {json.dumps({'error': {'message': req.error}})}\n\n".encode()
                        break
                    delta = st.tokenizer.decode(req.output_ids[sent:]) if len(req.output_ids) > sent else ""
                    chunk = answer(delta, None, first=sent == 0, stream=True)
                    sent = len(req.output_ids)
                    yield f"data: {json.dumps(chunk)}\n\n".encode()
                if include_usage and req.error is None:
                    yield f"data: {json.dumps(answer(None, usage(), stream=True))}\n\n".encode()
                yield b"data: [DONE]\n\n"

            return StreamingResponse(events(), media_type="text/event-stream", background=abort_task(req))
        async for _ in _updates(req, request, engine):
            pass
        if req.error is not None:
            return _error(req.error, 500)
        return JSONResponse(answer(st.tokenizer.decode(req.output_ids), usage()))

    async def server_info(request: Request) -> Response:
        info = dict(st.server_info)
        info["internal_states"] = [
            {
                "last_gen_throughput": engine.last_gen_throughput,
                "memory_usage": {"token_usage": engine.cache.device_used_tokens / engine.cfg.max_total_tokens},
                "hicache_host_used_tokens": engine.cache.host_used_tokens,
            }
        ]
        return JSONResponse(info)

    async def model_info(request: Request) -> Response:
        return JSONResponse(st.model_info)

    async def models(request: Request) -> Response:
        return JSONResponse(
            {
                "object": "list",
                "data": [
                    {
                        "id": st.served_model_name,
                        "object": "model",
                        "created": int(time.time()),
                        "owned_by": "sglang",
                        "root": st.model_info["model_path"],
                        "max_model_len": engine.cfg.context_len,
                    }
                ],
            }
        )

    async def flush_cache(request: Request) -> Response:
        ok = engine.flush()
        return PlainTextResponse(FLUSH_TEXT, status_code=200 if ok else 400)

    async def metrics(request: Request) -> Response:
        if not st.enable_metrics:
            return PlainTextResponse("Not Found", status_code=404)
        engine.update_gauges()
        return Response(engine.metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8")

    routes = [
        Route("/health", health, methods=["GET"]),
        Route("/health_generate", health_generate, methods=["GET"]),
        Route("/generate", generate, methods=["POST", "PUT"]),
        Route("/v1/completions", completions, methods=["POST"]),
        Route("/v1/chat/completions", chat_completions, methods=["POST"]),
        Route("/v1/models", models, methods=["GET"]),
        Route("/get_server_info", server_info, methods=["GET"]),
        Route("/server_info", server_info, methods=["GET"]),
        Route("/get_model_info", model_info, methods=["GET"]),
        Route("/model_info", model_info, methods=["GET"]),
        Route("/flush_cache", flush_cache, methods=["GET", "POST"]),
        Route("/metrics", metrics, methods=["GET"]),
    ]
    return Starlette(routes=routes)


async def wait_done(req: SimRequest) -> None:
    """Wait until the engine finished (or failed) ``req``."""
    async for _ in _updates(req):
        pass

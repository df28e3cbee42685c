"""Drive the quality tasks against one running server and record every answer.

One job: for each sample (task × length × index), ask it cold, push it out of the GPU pool with
churn traffic (sized by `harness.quality.churn` from the server's pools and input limit), ask it
again (``reasks`` times, churn before each), and turn every answer into a QualityRecord. Greedy
(temperature 0), fixed ``max_new_tokens`` with ``ignore_eos``, logprobs with top-k. The baseline
(``arm_role="off"``) runs a second pass recorded as ``control`` when ``cfg.control`` is set: the
OFF-vs-OFF floor (cold ask 0s, then re-asks that hit the GPU cache, without churn).

Parity itself is pure and lives in `harness.quality.parity`; ``evaluate_parity`` is re-exported
here for the runner.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from harness.core.sglang_defaults import SGLANG_DEFAULT_HICACHE_RATIO
from harness.core.tokenizers import load_tokenizer
from harness.quality.churn import ChurnPlan, plan_churn
from harness.quality.fit import (
    FittedPrompt,
    fit_sample,
    model_vocab_size,
    token_id_prompt,
)
from harness.quality.parity import ParityReport, evaluate_parity
from harness.quality.scoring import score_answer
from harness.quality.tasks import TASKS, generate
from harness.server.info import ServerAnswerError, ServerInfo, afetch_server_info
from harness.server.request import GenerateRequest, Labels
from harness.spec.values import resolve_tokens
from harness.store.quality_record import QualityRecord
from harness.workloads.prompts import PromptFactory, derive_seed

__all__ = [
    "ParityReport",
    "QualityPlan",
    "evaluate_parity",
    "plan_quality",
    "resolve_tokens",
    "run_quality",
    "server_limits",
]

MIN_CHURN_CHUNK = 16  # halving a refused churn request stops here


def _get(cfg: Any, name: str, default: Any) -> Any:
    v = cfg.get(name, default) if isinstance(cfg, dict) else getattr(cfg, name, default)
    return default if v is None else v


@dataclass(frozen=True)
class QualityPlan:
    """What one arm will ask: resolved from the quality config and the server's pool."""

    tasks: tuple[str, ...]
    lengths: tuple[int, ...]
    samples_per_task: int
    max_new_tokens: int
    churn_tokens: int
    reasks: int
    top_logprobs: int
    mode: str  # "text" | "token_ids"
    control: bool
    churn_past_host: bool = False  # ON arm: churn past the host pool too, so re-asks come from storage


def plan_quality(cfg: Any, pool_tokens: int | None, have_tokenizer: bool) -> QualityPlan:
    tasks = tuple(_get(cfg, "tasks", TASKS))
    unknown = [t for t in tasks if t not in TASKS]
    if unknown:
        raise ValueError(f"unknown quality task(s) {unknown}; known: {', '.join(TASKS)}")
    mode = str(_get(cfg, "mode", "auto"))
    if mode == "auto":
        mode = "text" if have_tokenizer else "token_ids"
    elif mode == "text" and not have_tokenizer:
        raise ValueError("quality.mode is text but no tokenizer was found for the model")
    return QualityPlan(
        tasks=tasks,
        lengths=tuple(resolve_tokens(x, pool_tokens) for x in _get(cfg, "lengths", [8000])),
        samples_per_task=int(_get(cfg, "samples_per_task", 2)),
        max_new_tokens=int(_get(cfg, "max_new_tokens", 32)),
        churn_tokens=resolve_tokens(_get(cfg, "churn_tokens", "1.5x pool"), pool_tokens),
        reasks=int(_get(cfg, "reasks", 2)),
        top_logprobs=int(_get(cfg, "top_logprobs", 5)),
        mode=mode,
        control=bool(_get(cfg, "control", True)),
        churn_past_host=bool(_get(cfg, "churn_past_host", False)),
    )


def build_prompts(plan: QualityPlan, seed: int, tokenizer: Any, vocab_size: int) -> list[FittedPrompt]:
    """Every sample of the plan with its final input ids (deterministic: both arms get the same)."""
    out = []
    for length in plan.lengths:
        for task in plan.tasks:
            for i in range(plan.samples_per_task):
                if plan.mode == "text":
                    out.append(fit_sample(generate(task, length, i, seed), tokenizer))
                else:
                    out.append(token_id_prompt(task, length, i, seed, vocab_size))
    return out


def _set_phase(ctx: Any, phase: str, detail: str | None = None) -> None:
    """``phase`` labels the samples and the requests; ``detail`` (which task, sample and ask) is
    for the console's progress line only."""
    f = getattr(ctx, "set_phase", None)
    if callable(f):
        if detail is None:
            f(phase)
        else:
            f(phase, detail=detail)


@dataclass(frozen=True)
class ServerLimits:
    """What churn sizing needs to know about the server (None: unknown)."""

    device_pool: int | None
    host_pool: int | None  # 0: no host tier
    max_input: int | None  # longest prompt a request with one output token may send
    write_policy: str | None


def as_server_info(info: ServerInfo | Mapping[str, Any] | None) -> ServerInfo | None:
    """A `ServerInfo` from what the caller has (the raw /get_server_info answer or the parsed
    one); an answer the harness cannot use reads as unknown (None): churn then falls back to
    the GPU pool and halving refused requests."""
    if info is None or isinstance(info, ServerInfo):
        return info
    try:
        return ServerInfo.parse(dict(info))
    except (ServerAnswerError, TypeError, ValueError):
        return None


def server_limits(
    info: ServerInfo | Mapping[str, Any] | None, pool_tokens: int | None, host_pool_tokens: int | None
) -> ServerLimits:
    """Pool sizes, the input limit and the write policy from what the caller knows and
    /get_server_info.

    Host pool: the caller's value (the server log's host-pool line) first; else the simulator's
    ``host_pool_tokens``; else ``hicache_ratio`` x GPU pool when HiCache is on and
    ``hicache_size`` is 0 (sglang's rule, one page apart); 0 when HiCache is off. Input limit:
    ``max_req_input_len`` (sglang's scheduler info), else the context length - 1; minus one for
    the churn request's output token."""
    si = as_server_info(info)
    device = pool_tokens or (si.max_total_num_tokens if si else None)
    host = host_pool_tokens
    if host is None and si is not None:
        hc = si.hicache
        if si.host_pool_tokens is not None:
            host = si.host_pool_tokens
        elif hc.enabled is False:
            host = 0
        elif hc.enabled and device and not hc.size_gb:
            host = int(device * (hc.ratio or SGLANG_DEFAULT_HICACHE_RATIO))
    max_req = None
    if si is not None:
        max_req = si.max_req_input_len or (si.context_length - 1 if si.context_length else None)
    max_input = max(1, max_req - 1) if max_req else None
    return ServerLimits(device, host, max_input, si.hicache.write_policy if si else None)


async def _churn(
    ctx: Any,
    factory: PromptFactory,
    churn: ChurnPlan,
    state: dict,
    key: object,
    variant: str,
    abort: Any,
    detail: str | None = None,
    flush: bool = False,
) -> dict:
    """Send ``churn.tokens`` of distinct never-seen prompts, one at a time, in requests of
    ``state["chunk"]`` tokens. A request refused with HTTP 400 (longer than the server takes,
    when its limit was unknown) halves the chunk for the rest of the pass and is sent again.
    Returns what happened: tokens, accepted, requests, failed, error, chunk.

    ``flush``: the server has no host or storage tier (the OFF baseline), so the churn can only
    make the next ask a cold prefill — which ``/flush_cache`` does at once, without the churn's
    prefill (GPU time that measured nothing: issue 28). A refused flush falls back to the churn.
    The result then says ``flushed: true`` and sent nothing."""
    out = {"tokens": churn.tokens, "accepted": 0, "requests": 0, "failed": 0, "error": None, "chunk": state["chunk"]}
    if churn.tokens <= 0:
        return out
    if flush and hasattr(ctx.client, "flush_cache"):
        _set_phase(ctx, "quality_flush", detail)
        if await ctx.client.flush_cache():
            return {**out, "tokens": 0, "flushed": True}
    _set_phase(ctx, "quality_churn", detail)
    left, j = churn.tokens, 0
    while left > 0:
        n = min(left, state["chunk"])
        ids = factory.one(n, key=("quality_churn", key, j))
        req = GenerateRequest(input_ids=ids, max_new_tokens=1, temperature=0.0)
        rr = await ctx.client.generate(
            req, Labels(variant=variant, workload="quality", phase="quality_churn", index=j), abort=abort
        )
        out["requests"] += 1
        j += 1
        if rr.error is None:
            out["accepted"] += n
            left -= n
            continue
        out["failed"] += 1
        if out["error"] is None:
            out["error"] = f"{rr.error} (churn request of {n} tokens)"
        if await _server_gone(ctx, abort):
            break
        if rr.error == "http_400" and n > MIN_CHURN_CHUNK:
            state["chunk"] = max(MIN_CHURN_CHUNK, n // 2)  # retry the same tokens in smaller requests
            continue
        left -= n  # give up on these tokens; the re-ask says what it got
    out["chunk"] = state["chunk"]
    return out


async def _server_gone(ctx: Any, abort: Any) -> bool:
    """After a failed request: has the server died (ctx.confirm_death) or the run been aborted?"""
    if abort is not None and getattr(abort, "fired", False):
        return True
    confirm = getattr(ctx, "confirm_death", None)
    return bool(await confirm()) if callable(confirm) else False


async def run_quality(
    ctx: Any,
    cfg: Any,
    arm_role: str,
    *,
    host_pool_tokens: int | None = None,
    server_info: ServerInfo | Mapping[str, Any] | None = None,
) -> list[QualityRecord]:
    """Ask every quality sample of ``cfg`` on ctx's server; record and return the answers.

    ``ctx`` (e.g. a `harness.workloads.context.WorkloadContext` with extras) needs: ``client`` (a
    `harness.server.client.StreamingClient`), ``pool_tokens`` (device pool, for ``"x pool"`` values and
    churn sizing), ``seed``, and ``record_quality`` or ``record`` (callable taking a
    QualityRecord; writes quality.jsonl — ``record_quality`` wins when both exist). Optional:
    ``set_phase``, ``variant``, ``model_path`` (tokenizer files for text mode; vocab size),
    ``tokenizer`` (an override), ``vocab_size``, ``abort`` (`harness.server.request.Abort`),
    ``confirm_death`` (async; stops the pass when the server is gone after a failed request) and
    ``base_url`` (to read /get_server_info when ``server_info`` is not given).
    ``arm_role``: ``"on"`` or ``"off"`` (the baseline; also runs the control pass if
    ``cfg.control``).
    ``host_pool_tokens``: the server's KV host pool in tokens (status.json's
    ``pools.host_pool_tokens``, parsed from the server log); ``server_info``: its
    /get_server_info answer, raw or a `harness.server.info.ServerInfo` (context length, HiCache
    ratio and write policy). Both size the churn (`harness.quality.churn`); without them the arm
    reads /get_server_info from ``ctx.base_url`` and derives the host pool."""
    if arm_role not in ("on", "off", "control"):
        raise ValueError(f"arm_role must be on, off or control, not {arm_role!r}")
    model_path = getattr(ctx, "model_path", None)
    tokenizer = getattr(ctx, "tokenizer", None)
    if tokenizer is None and str(_get(cfg, "mode", "auto")) != "token_ids":
        tokenizer = load_tokenizer(model_path)
    vocab = getattr(ctx, "vocab_size", None) or model_vocab_size(model_path)
    pool = getattr(ctx, "pool_tokens", None)
    plan = plan_quality(cfg, pool, tokenizer is not None)
    seed = int(getattr(ctx, "seed", 0) or 0)
    variant = str(getattr(ctx, "variant", "") or getattr(ctx, "variant_name", "") or "")
    abort = getattr(ctx, "abort", None)
    record = getattr(ctx, "record_quality", None) or getattr(ctx, "record", None)
    prompts = build_prompts(plan, seed, tokenizer, vocab)

    base_url = getattr(ctx, "base_url", None)
    if server_info is None and isinstance(base_url, str) and plan.churn_tokens > 0:
        try:
            server_info = await afetch_server_info(base_url)
        except ServerAnswerError:
            server_info = None  # unusable answer: size the churn without it
    if host_pool_tokens is None:
        host_pool_tokens = getattr(ctx, "host_pool_tokens", None)
    limits = server_limits(server_info, pool, host_pool_tokens)
    longest = max((p.n_tokens for p in prompts), default=0) + plan.max_new_tokens

    roles = [arm_role] + (["control"] if arm_role == "off" and plan.control else [])
    out: list[QualityRecord] = []
    si = as_server_info(server_info)
    has_storage = si is not None and si.hicache.storage_backend is not None
    # a server that says it has no HiCache: nothing a churn pushes out comes back from a lower tier
    no_lower_tier = si is not None and si.hicache.enabled is False and not has_storage and not limits.host_pool
    for role in roles:
        # only where the server has a storage tier: elsewhere churn past the host means recompute
        past_host = plan.churn_past_host and has_storage and role == "on" and bool(limits.host_pool)
        churn = plan_churn(
            # storage tier (L3): past the GPU and the host pool, so a re-ask comes back from storage
            max(plan.churn_tokens, (limits.host_pool or 0) + (limits.device_pool or 0))
            if past_host
            else plan.churn_tokens,
            device_pool=limits.device_pool,
            host_pool=limits.host_pool,
            max_input=limits.max_input,
            prompt_tokens=longest,
            write_policy=limits.write_policy,
            needs_host=role == "on" and not past_host,
        )
        churn_plan = churn.to_dict()
        state = {"chunk": churn.chunk}
        # one factory per pass: churn prompts never share a first token with samples or each other
        factory = PromptFactory(seed=derive_seed(seed, "quality", role), vocab_size=vocab)
        factory.used_first.update(p.input_ids[0] for p in prompts if p.input_ids)
        if role == "control":
            # The OFF pass left its last samples on the GPU: one churn first, so the control's
            # ask 0s are cold prefills like every other arm's.
            await _churn(
                ctx,
                factory,
                churn,
                state,
                ("control", "start"),
                variant,
                abort,
                "control: before its samples",
                flush=no_lower_tier,
            )
        for p in prompts:
            s = p.sample
            for ask in range(plan.reasks + 1):
                # The control pass re-asks WITHOUT churn: its re-asks are device-cache hits on the
                # OFF server, the same prefix-extend kernel an ON host hit runs after its load-back
                # copy. So the floor it measures includes "cached prefix vs cold prefill" numerics.
                # (Seen on a real H200 without --enable-deterministic-inference: an OFF-vs-OFF control
                # with churn was identical while ON re-asks differed, because OFF never hit a cache.)
                sent = None
                detail = f"{role}: {s.task}@{s.length_target} sample {s.index} ask {ask}/{plan.reasks}"
                if ask > 0 and role != "control":
                    sent = await _churn(
                        ctx,
                        factory,
                        churn,
                        state,
                        (role, s.key, ask),
                        variant,
                        abort,
                        f"{detail} (churn first)",
                        flush=no_lower_tier and role == "off",
                    )
                    if abort is not None and getattr(abort, "fired", False):
                        return out
                phase = "quality_cold" if ask == 0 else "quality_reask"
                _set_phase(ctx, phase, detail)
                req = GenerateRequest(
                    input_ids=list(p.input_ids),
                    max_new_tokens=plan.max_new_tokens,
                    temperature=0.0,
                    ignore_eos=True,
                    return_logprob=True,
                    top_logprobs_num=plan.top_logprobs,
                )
                rr = await ctx.client.generate(
                    req,
                    Labels(variant=variant, workload="quality", phase=phase, repeat=ask, index=s.index),
                    abort=abort,
                )
                text = rr.text
                correct = score = None
                if p.mode == "text" and rr.error is None:
                    if text is None and tokenizer is not None:
                        text = tokenizer.decode(rr.output_ids)
                    if text is not None:
                        sc = score_answer(s.answer, text)
                        correct, score = sc.correct, sc.value
                qr = QualityRecord(
                    variant=variant,
                    arm_role=role,
                    task=s.task,
                    length_target=s.length_target,
                    index=s.index,
                    seed=s.seed,
                    ask=ask,
                    mode=p.mode,
                    prompt_tokens=p.n_tokens,
                    input_hash=p.input_hash,
                    rid=rr.rid,
                    output_ids=list(rr.output_ids),
                    output_logprobs=rr.output_logprobs,
                    top_logprobs=rr.top_logprobs,
                    cached_tokens=rr.cached_tokens,
                    cached_device=rr.cached_device,
                    cached_host=rr.cached_host,
                    cached_storage=rr.cached_storage,
                    text=text,
                    answer=s.answer.to_json() if p.mode == "text" else None,
                    correct=correct,
                    score=score,
                    finish_reason=rr.finish_reason,
                    error=rr.error,
                    sent_ns=rr.sent_ns,
                    first_token_ns=rr.first_token_ns,
                    done_ns=rr.done_ns,
                    churn=sent,
                    churn_plan=churn_plan,
                )
                out.append(qr)
                if callable(record):
                    record(qr)
                if (rr.error is not None and await _server_gone(ctx, abort)) or (
                    abort is not None and getattr(abort, "fired", False)
                ):
                    return out
    return out

"""Drive the quality tasks against one running server and record every answer.

One job: for each sample (task × length × index), ask it cold, push it out of the GPU pool with
churn traffic (sized by `harness.quality.churn` from the server's pools and input limit), ask it
again (``reasks`` times, churn before each), and turn every answer into a QualityRecord. Greedy
(temperature 0), fixed ``max_new_tokens`` with ``ignore_eos``, logprobs with top-k. The baseline
(``QualityArm.role == "off"``) runs a second pass recorded as ``control`` when the plan says so: the
OFF-vs-OFF floor (cold ask 0s, then re-asks that hit the GPU cache, without churn).

The serving window resolves the ``quality:`` block once (`plan_quality`, against the server's
pool) and hands the arm its server (`QualityArm`); nothing here reads the scenario. Parity itself
is pure and lives in `harness.quality.parity`; ``evaluate_parity`` is re-exported here for the
runner.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from harness.core.sglang_defaults import SGLANG_DEFAULT_HICACHE_RATIO
from harness.core.tokenizers import load_tokenizer
from harness.quality.churn import ChurnPlan, plan_churn
from harness.quality.config import Quality
from harness.quality.fit import (
    FittedPrompt,
    fit_sample,
    token_id_prompt,
)
from harness.quality.parity import ParityReport, evaluate_parity
from harness.quality.scoring import score_answer
from harness.quality.tasks import generate
from harness.server.info import ServerAnswerError, ServerInfo, afetch_server_info
from harness.server.request import Abort, GenerateRequest, Labels
from harness.spec.values import resolve_tokens
from harness.store.quality_record import QualityRecord
from harness.workloads.prompts import PromptFactory, derive_seed

if TYPE_CHECKING:  # the client (httpx) is loaded by whoever runs the arm
    from harness.core.tokenizers import Tokenizer
    from harness.server.client import StreamingClient

__all__ = [
    "ParityReport",
    "QualityArm",
    "QualityPlan",
    "arm_tokenizer",
    "evaluate_parity",
    "plan_quality",
    "resolve_tokens",
    "run_quality",
    "server_limits",
]

MIN_CHURN_CHUNK = 16  # halving a refused churn request stops here
ARM_ROLES = ("on", "off", "control")


@dataclass(frozen=True)
class QualityPlan:
    """What one arm will ask: the ``quality:`` block resolved once against the server's pool."""

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


def plan_quality(cfg: Quality, pool_tokens: int | None, have_tokenizer: bool) -> QualityPlan:
    """``cfg``'s sizes resolved against a GPU pool of ``pool_tokens``; ``mode: auto`` is text
    with a tokenizer, token ids without one (text without one is refused)."""
    mode = cfg.mode
    if mode == "auto":
        mode = "text" if have_tokenizer else "token_ids"
    elif mode == "text" and not have_tokenizer:
        raise ValueError("quality.mode is text but no tokenizer was found for the model")
    return QualityPlan(
        tasks=tuple(cfg.tasks),
        lengths=tuple(resolve_tokens(x, pool_tokens) for x in cfg.lengths),
        samples_per_task=cfg.samples_per_task,
        max_new_tokens=cfg.max_new_tokens,
        churn_tokens=resolve_tokens(cfg.churn_tokens, pool_tokens),
        reasks=cfg.reasks,
        top_logprobs=cfg.top_logprobs,
        mode=mode,
        control=cfg.control,
        churn_past_host=cfg.churn_past_host,
    )


def arm_tokenizer(cfg: Quality, model_path: str | None) -> Tokenizer | None:
    """The model's tokenizer from its local files, unless ``cfg`` asks for token ids only."""
    return None if cfg.mode == "token_ids" else load_tokenizer(model_path)


def _no_phase(name: str, detail: str | None = None) -> None:
    return None


@dataclass(frozen=True)
class QualityArm:
    """One arm's server and where its answers go, handed to `run_quality` by the serving window.

    ``record`` writes each answer (quality.jsonl); ``set_phase(label, detail=...)`` labels the
    samples (``detail``: the console line only); ``abort`` stops the pass once fired;
    ``confirm_death`` (after a failed request) says whether the server is gone. The server's
    figures size the churn (`harness.quality.churn`): ``pool_tokens`` (its GPU pool; also what
    ``"x pool"`` sizes resolve against), ``host_pool_tokens`` (the server log's host-pool line),
    ``server_info`` (its /get_server_info answer, raw or parsed); without one the arm reads it
    from ``base_url``."""

    client: StreamingClient
    role: str  # "on" | "off" (the baseline; it also runs the control pass when the plan says so)
    variant: str
    seed: int
    vocab_size: int
    pool_tokens: int | None
    record: Callable[[QualityRecord], None]
    set_phase: Callable[..., None] = _no_phase
    abort: Abort | None = None
    confirm_death: Callable[[], Awaitable[bool]] | None = None
    tokenizer: Tokenizer | None = None  # text mode: fits the samples and decodes the answers
    host_pool_tokens: int | None = None
    server_info: ServerInfo | Mapping[str, Any] | None = None
    base_url: str | None = None

    def __post_init__(self) -> None:
        if self.role not in ARM_ROLES:
            raise ValueError(f"arm role must be on, off or control, not {self.role!r}")

    @property
    def aborted(self) -> bool:
        return self.abort is not None and self.abort.fired


def build_prompts(plan: QualityPlan, seed: int, tokenizer: Tokenizer | None, vocab_size: int) -> list[FittedPrompt]:
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
    arm: QualityArm,
    factory: PromptFactory,
    churn: ChurnPlan,
    state: dict,
    key: object,
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
    if flush:
        arm.set_phase("quality_flush", detail=detail)
        if await arm.client.flush_cache():
            return {**out, "tokens": 0, "flushed": True}
    arm.set_phase("quality_churn", detail=detail)
    left, j = churn.tokens, 0
    while left > 0:
        n = min(left, state["chunk"])
        ids = factory.one(n, key=("quality_churn", key, j))
        req = GenerateRequest(input_ids=ids, max_new_tokens=1, temperature=0.0)
        rr = await arm.client.generate(
            req, Labels(variant=arm.variant, workload="quality", phase="quality_churn", index=j), abort=arm.abort
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
        if await _server_gone(arm):
            break
        if rr.error == "http_400" and n > MIN_CHURN_CHUNK:
            state["chunk"] = max(MIN_CHURN_CHUNK, n // 2)  # retry the same tokens in smaller requests
            continue
        left -= n  # give up on these tokens; the re-ask says what it got
    out["chunk"] = state["chunk"]
    return out


async def _server_gone(arm: QualityArm) -> bool:
    """After a failed request: has the server died (``arm.confirm_death``) or the run been aborted?"""
    if arm.aborted:
        return True
    return bool(await arm.confirm_death()) if arm.confirm_death is not None else False


async def run_quality(arm: QualityArm, plan: QualityPlan) -> list[QualityRecord]:
    """Ask every sample of ``plan`` on the arm's server; record (``arm.record``) and return the
    answers. The OFF arm (``arm.role == "off"``) also runs the control pass when ``plan.control``."""
    tokenizer, seed, variant = arm.tokenizer, arm.seed, arm.variant
    if plan.mode == "text" and tokenizer is None:
        raise ValueError("a text-mode quality plan needs the arm's tokenizer")
    vocab = arm.vocab_size
    prompts = build_prompts(plan, seed, tokenizer, vocab)

    server_info = arm.server_info
    if server_info is None and arm.base_url is not None and plan.churn_tokens > 0:
        try:
            server_info = await afetch_server_info(arm.base_url)
        except ServerAnswerError:
            server_info = None  # unusable answer: size the churn without it
    limits = server_limits(server_info, arm.pool_tokens, arm.host_pool_tokens)
    longest = max((p.n_tokens for p in prompts), default=0) + plan.max_new_tokens

    roles = [arm.role] + (["control"] if arm.role == "off" and plan.control else [])
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
                arm,
                factory,
                churn,
                state,
                ("control", "start"),
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
                        arm,
                        factory,
                        churn,
                        state,
                        (role, s.key, ask),
                        f"{detail} (churn first)",
                        flush=no_lower_tier and role == "off",
                    )
                    if arm.aborted:
                        return out
                phase = "quality_cold" if ask == 0 else "quality_reask"
                arm.set_phase(phase, detail=detail)
                req = GenerateRequest(
                    input_ids=list(p.input_ids),
                    max_new_tokens=plan.max_new_tokens,
                    temperature=0.0,
                    ignore_eos=True,
                    return_logprob=True,
                    top_logprobs_num=plan.top_logprobs,
                )
                rr = await arm.client.generate(
                    req,
                    Labels(variant=variant, workload="quality", phase=phase, repeat=ask, index=s.index),
                    abort=arm.abort,
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
                arm.record(qr)
                if (rr.error is not None and await _server_gone(arm)) or arm.aborted:
                    return out
    return out

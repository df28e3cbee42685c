"""The quality arm's cost on one variant (once, not per repeat): every sample asked 1 + reasks
times, the churn the arm's planner (``harness.quality.churn.plan_churn``) will send before each
re-ask, and the OFF baseline's control pass; whether the churn leaves the host tier a chance.
(`harness.run.estimate` has the token arithmetic in full.) Pure.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from harness.workloads.estimating import EstimateContext, WorkEstimate
from harness.workloads.estimating import est as _est
from harness.workloads.estimating import size as _size

try:  # the quality arm's churn planner, where this tree has it: the estimate sends what the arm sends
    from harness.quality import churn as _churn_planner
except ImportError:  # pragma: no cover - older trees: full chunks of the configured churn
    _churn_planner = None  # type: ignore[assignment]


def _decode_s(steps: int, decode_tok_s: float | None) -> float | None:
    """Seconds to generate ``steps`` tokens one after another (the first comes with the prefill)."""
    if decode_tok_s is None:
        return None
    return max(0, steps) / decode_tok_s


def churn_chunks(churn_tokens: int, pool_tokens: int | None) -> list[int]:
    """The churn prompts of one re-ask when the quality arm has no churn planner
    (``harness.quality.churn``): ``ceil(churn / chunk)`` full chunks of min(churn, pool / 2)."""
    if churn_tokens <= 0:
        return []
    chunk = max(1, min(churn_tokens, (pool_tokens or churn_tokens) // 2 or 1))
    return [chunk] * math.ceil(churn_tokens / chunk)


@dataclass(frozen=True)
class _Churn:
    tokens: int  # churn sent before each re-ask
    requests: int  # churn requests before each re-ask
    control_start: bool  # the control pass churns once before it starts
    host_ok: bool | None  # the planner's verdict (None: no planner, judge by the window)
    note: str


def _plan_churn(
    requested: int, c: EstimateContext, prompt_tokens: int, write_policy: str | None, needs_host: bool
) -> _Churn:
    """The churn the quality arm will send on this variant: the arm's own planner when this tree has
    it (it clamps the configured churn into the window per variant), else the configured churn in
    full chunks."""
    if _churn_planner is None:
        chunks = churn_chunks(requested, c.P)
        return _Churn(sum(chunks), len(chunks), False, None, "")
    host = (c.H if c.H is not None else None) if c.hicache else 0
    max_input = None if c.max_input is None else max(1, c.max_input - 1)  # room for the output token
    plan = _churn_planner.plan_churn(
        requested,
        device_pool=c.P,
        host_pool=host,
        max_input=max_input,
        prompt_tokens=prompt_tokens,
        write_policy=write_policy,
        needs_host=needs_host,
    )
    n = math.ceil(plan.tokens / plan.chunk) if plan.tokens > 0 else 0
    ok = None if not needs_host or plan.low is None or plan.high is None else plan.low <= plan.high
    return _Churn(plan.tokens, n, True, ok, plan.note)


def quality_estimate(q: Any, c: EstimateContext, baseline: bool, write_policy: str | None) -> WorkEstimate:
    """The quality arm on one variant (once, not per repeat)."""
    P = c.P
    lengths = [_size(x, P) for x in q.lengths]
    requested = _size(q.churn_tokens, P)
    per_length = len(q.tasks) * q.samples_per_task
    asks = 1 + q.reasks
    passes = 2 if (baseline and q.control) else 1
    n_asks = passes * asks * per_length * len(lengths)
    dec = _decode_s(n_asks * (q.max_new_tokens - 1), c.decode_tok_s)
    if requested is None or any(x is None for x in lengths):
        return _est(
            "quality",
            "quality",
            n_asks,
            None,
            None,
            None,
            n_asks * q.max_new_tokens,
            dec,
            notes=['"x pool" sizes need the GPU pool: tokens not counted'],
        )
    longest = max(x for x in lengths if x is not None) + q.max_new_tokens
    churn = _plan_churn(requested, c, longest, write_policy, needs_host=c.hicache and not baseline)
    # the OFF baseline (no lower tier) flushes its cache instead of churning (harness.quality.run._churn)
    flushed = baseline and not c.hicache
    churn_tokens, churn_requests = (0, 0) if flushed else (churn.tokens, churn.requests)
    n_samples = per_length * len(lengths)
    requests = n_asks + n_samples * q.reasks * churn_requests
    sent = computed = expected = 0
    warn: list[str] = []
    if churn.host_ok is False:  # the arm's planner found no churn that leaves the host tier a chance
        warn.append(f"the quality arm sends {churn.tokens:,} tokens of churn per re-ask: {churn.note}")
    for L in lengths:
        assert L is not None
        traffic = churn.tokens + L  # the sample's age when it is asked again
        evicted = flushed or c.evicted(traffic)
        host_ok, w = c.host_window(f"churn + length ({churn.tokens:,} + {L:,})", traffic)
        if churn.host_ok is not None:
            host_ok = host_ok and churn.host_ok
        if c.hicache and not baseline and churn.host_ok is not False:
            warn += w
        # the asking pass: a cold ask, then churn and a re-ask, reasks times
        sent += per_length * (asks * L + q.reasks * churn_tokens)
        base = per_length * (L + q.reasks * churn_tokens)
        computed += base + (per_length * q.reasks * L if evicted else 0)
        expected += base + (per_length * q.reasks * L if evicted and not host_ok else 0)
        if passes == 2:  # the control pass: the same asks without churn; its re-asks hit the GPU
            sent += per_length * asks * L
            computed += per_length * L
            expected += per_length * L
        warn += c.too_long(L) + c.aligned("quality length", L)
    if passes == 2 and churn.control_start:  # one churn (or flush) before the control pass
        sent, computed, expected = sent + churn_tokens, computed + churn_tokens, expected + churn_tokens
        requests += churn_requests
    est = _est(
        "quality",
        "quality",
        requests,
        sent,
        computed,
        expected,
        n_asks * q.max_new_tokens,
        dec,
        warn,
        churn.tokens + longest - q.max_new_tokens,
    )
    return replace(est, churn_requests=requests - n_asks)

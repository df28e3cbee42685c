"""prefix_sharing_fanout: one shared prefix, N suffixes fanned out at once — how RAG and agent
traffic meets the cache (one document or system prompt, many questions on it).

Phases: "seed" (the shared prefix alone, one request: its cold prefill), "fanout" (N prompts =
the prefix + a distinct suffix each, sent concurrently, one concurrency group). Every fan-out
request should find the prefix cached and compute only its suffix (`flush_before` on the
workload starts it from an empty cache).
"""

from __future__ import annotations

from typing import Literal

from harness.spec.numbers import count
from harness.spec.values import TokenSize, TokenSizeT
from harness.workloads.config import PrefillConfig
from harness.workloads.context import WorkloadContext, WorkloadScope
from harness.workloads.estimating import EstimateContext, WorkEstimate, add, est, mul
from harness.workloads.kind import (
    Derived,
    PhaseStat,
    PhaseSummaries,
    ReportRow,
    WorkloadKind,
    ratio,
)


class PrefixSharingFanout(PrefillConfig):
    """One shared prefix, then ``fanout`` suffixes on it sent concurrently."""

    kind: Literal["prefix_sharing_fanout"]
    prefix_tokens: TokenSizeT
    suffix_tokens: TokenSizeT = TokenSize(tokens=128)
    fanout: count("requests per prefix") = 8

    def longest_request_tokens(self, pool_tokens: int) -> int:
        return self.prefix_tokens.resolve(pool_tokens) + self.suffix_tokens.resolve(pool_tokens) + self.new_tokens()


async def run(ctx: WorkloadContext, cfg: PrefixSharingFanout) -> None:
    w = WorkloadScope(ctx, cfg)
    prefix_tokens, suffix_tokens = ctx.tokens(cfg.prefix_tokens), ctx.tokens(cfg.suffix_tokens)
    prompts = ctx.prompts.shared_prefix(cfg.fanout, prefix_tokens, suffix_tokens, key=(ctx.variant, w.name, ctx.repeat))
    w.phase("seed")
    await w.send("seed", 0, prompts[0][:prefix_tokens])
    w.phase("fanout")
    group = w.group("fanout")
    await w.gather(w.send("fanout", i, ids, group=group) for i, ids in enumerate(prompts))


def fanout_cached_fraction(phases: PhaseSummaries) -> float | None:
    """Mean share of each fan-out prompt served from cache (the prefix, at best)."""
    s = (phases.get("fanout") or {}).get("metrics", {}).get("cached_fraction")
    return float(s["mean"]) if s else None


_SEED_TTFT = PhaseStat("seed", "ttft_ms")
_FANOUT_TTFT = PhaseStat("fanout", "ttft_ms")


def estimate(w: PrefixSharingFanout, c: EstimateContext) -> WorkEstimate:
    """The prefix once, then fanout x (prefix + suffix); the fan-out computes only its suffixes."""
    r, new = c.repeats, w.new_tokens()
    X, Y, N = c.size(w.prefix_tokens), c.size(w.suffix_tokens), w.fanout
    sent = mul(add(X, mul(N, add(X, Y))), r)
    computed = mul(add(X, mul(N, Y)), r)
    reqs = 1 + N
    return est(
        w.name,
        w.kind,
        reqs * r,
        sent,
        computed,
        computed,
        reqs * r * new,
        c.decode_s(2 * r * max(0, new - 1)),
        c.too_long(add(X, Y)) + c.aligned("prefix_tokens", X),
    )


KIND = WorkloadKind(
    config=PrefixSharingFanout,
    estimate=estimate,
    run=run,
    derived=(
        Derived(
            "fanout_cached_fraction",
            "fraction",
            True,
            "mean cached share of the fan-out prompts",
            fanout_cached_fraction,
            needs=("fanout",),
            compared=True,
            counts_hits=True,
        ),
        Derived(
            "fanout_ttft_ratio",
            "ratio",
            False,
            "fan-out TTFT / the prefix's cold TTFT, medians",
            lambda p: ratio(_FANOUT_TTFT.of(p), _SEED_TTFT.of(p)),
            needs=("seed", "fanout"),
        ),
    ),
    report_rows=(
        ReportRow(
            "fan-out cached share ({workload})",
            "",
            "fanout_cached_fraction",
            True,
            note="prefix reuse across concurrent suffixes",
        ),
        ReportRow("fan-out TTFT ({workload})", "ms", _FANOUT_TTFT, False, note="p50"),
    ),
    tier_hit_phases=True,
    hit_tier=lambda phase: "device" if phase == "fanout" else None,  # the prefix, cached by the seed
)

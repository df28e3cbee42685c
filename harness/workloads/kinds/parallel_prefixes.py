"""parallel_prefixes: K distinct long prefixes sent concurrently, P passes (seed 000: K=8, 2
passes, second pass 5.2 s → 1.6 s with HiCache).

Phases "pass1" ... "passP"; every request of a pass shares `concurrency_group`
"<workload>/pass<p>/r<repeat>", from which `metrics.group_walls` derives the pass wall time
(last done − first sent). With K×L above the GPU pool, pass 2 finds its prefixes on the host tier.
"""

from __future__ import annotations

from typing import Literal

from harness.spec.numbers import count
from harness.spec.values import TokenSizeT
from harness.workloads.config import PrefillConfig
from harness.workloads.context import WorkloadContext, WorkloadScope
from harness.workloads.estimating import EstimateContext, WorkEstimate, est, mul
from harness.workloads.kind import Derived, PhaseRoofline, PhaseStat, ReportRow, Tier, WorkloadKind, ratio


class ParallelPrefixes(PrefillConfig):
    """K distinct prefixes sent concurrently, ``passes`` times."""

    kind: Literal["parallel_prefixes"]
    k: count("prompts") = 8
    prompt_tokens: TokenSizeT
    passes: count("passes") = 2

    def longest_request_tokens(self, pool_tokens: int) -> int:
        return self.prompt_tokens.resolve(pool_tokens) + self.new_tokens()


async def run(ctx: WorkloadContext, cfg: ParallelPrefixes) -> None:
    w = WorkloadScope(ctx, cfg)
    n_tokens = ctx.tokens(cfg.prompt_tokens)
    prompts = w.prompts(cfg.k, n_tokens, "prefixes")
    for p in range(1, cfg.passes + 1):
        phase = f"pass{p}"
        w.phase(phase)
        group = w.group(phase)
        await w.gather(w.send(phase, i, ids, group=group) for i, ids in enumerate(prompts))


_PASS1_WALL = PhaseStat("pass1", "pass_wall_s")
_PASS2_WALL = PhaseStat("pass2", "pass_wall_s")


def estimate(w: ParallelPrefixes, c: EstimateContext) -> WorkEstimate:
    """k x L per pass; the working set is W = k x L (a second pass hits where W fits)."""
    r, new = c.repeats, w.new_tokens()
    L = c.size(w.prompt_tokens)
    W = mul(w.k, L)
    reqs = w.k * w.passes
    sent = mul(W, w.passes, r)
    host_ok, warn = c.host_window("working set", W)
    computed = mul(W, w.passes if c.evicted(W) else 1, r)
    expected = mul(W, 1 if (host_ok or not c.evicted(W)) else w.passes, r)
    return est(
        w.name,
        w.kind,
        reqs * r,
        sent,
        computed,
        expected,
        reqs * r * new,
        c.decode_s(w.passes * r * max(0, new - 1)),
        c.too_long(L) + c.aligned("prompt_tokens", L) + warn,
        W,
    )


def hit_tier(phase: str) -> Tier | None:
    """Every pass after the first exists to find its prefixes on the host tier (K x L over the GPU
    pool); pass 1 is cold."""
    n = phase.removeprefix("pass")
    return "host" if phase.startswith("pass") and n.isdigit() and int(n) > 1 else None


KIND = WorkloadKind(
    config=ParallelPrefixes,
    table_cells={"second_pass_speedup": "second_pass_speedup"},
    hit_tier=hit_tier,
    estimate=estimate,
    run=run,
    derived=(
        Derived(
            "second_pass_speedup",
            "ratio",
            True,
            "pass 1 wall / pass 2 wall, medians",
            lambda p: ratio(_PASS1_WALL.of(p), _PASS2_WALL.of(p)),
            needs=("pass1", "pass2"),
            compared=True,
        ),
        Derived(
            "pass2_vs_floor",
            "ratio",
            False,
            "pass 2 first-token wall / its roofline floor (host KV bytes / probed pinned H2D + suffixes at the cold rate)",
            PhaseRoofline("pass2").of,
            needs=("pass2",),
            compared=True,
            when=PhaseRoofline("pass2").present,
        ),
    ),
    report_rows=(
        ReportRow("parallel prefixes pass 1 wall", "s", _PASS1_WALL, False),
        ReportRow("parallel prefixes pass 2 wall", "s", _PASS2_WALL, False),
        ReportRow("second-pass speedup", "×", "second_pass_speedup", True, note="pass 1 wall / pass 2 wall"),
        ReportRow("pass 2 / roofline floor", "×", "pass2_vs_floor", False, note="1 = at the PCIe floor"),
    ),
    tier_hit_phases=True,
    pass_walls=True,
)

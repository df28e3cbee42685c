"""cold_prefill: N never-seen prompts of L tokens, one at a time (seed 000: 75K tokens).

Phases: "warmup" (`warmup` requests, marked), "cold". Reports TTFT and prefill tok/s.
"""

from __future__ import annotations

from typing import Literal

from harness.spec.numbers import count
from harness.spec.values import TokenSizeT
from harness.workloads.config import PrefillConfig
from harness.workloads.context import WorkloadContext, WorkloadScope
from harness.workloads.estimating import EstimateContext, WorkEstimate, est, mul
from harness.workloads.kind import Derived, PhaseStat, ReportRow, WorkloadKind


class ColdPrefill(PrefillConfig):
    """N never-seen prompts, one at a time."""

    kind: Literal["cold_prefill"]
    n: count("requests") = 1
    prompt_tokens: TokenSizeT
    warmup: count("requests", lo=0) = 1

    def longest_request_tokens(self, pool_tokens: int) -> int:
        return self.prompt_tokens.resolve(pool_tokens) + self.new_tokens()


async def run(ctx: WorkloadContext, cfg: ColdPrefill) -> None:
    w = WorkloadScope(ctx, cfg)
    n_tokens = ctx.tokens(cfg.prompt_tokens)
    await w.warmup(cfg.warmup, n_tokens)
    w.phase("cold")
    for i, ids in enumerate(w.prompts(cfg.n, n_tokens, "cold")):
        await w.send("cold", i, ids)


# Shared with repeat_prefill, whose first phase is "cold" too.
COLD_PREFILL_FIGURES = (
    Derived.phase_median("cold", "prefill_tok_s", "uncached prompt tokens / TTFT of the cold phase, median"),
    Derived.phase_median("cold", "prefill_total_tok_s", "all prompt tokens / TTFT of the cold phase, median"),
)


def estimate(w: ColdPrefill, c: EstimateContext) -> WorkEstimate:
    """(warmup + n) x L, all computed."""
    r, new = c.repeats, w.new_tokens()
    L = c.size(w.prompt_tokens)
    reqs = w.warmup + w.n
    sent = mul(reqs, L, r)
    return est(
        w.name,
        w.kind,
        reqs * r,
        sent,
        sent,
        sent,
        reqs * r * new,
        c.decode_s(reqs * r * max(0, new - 1)),
        c.too_long(L),
    )


KIND = WorkloadKind(
    config=ColdPrefill,
    table_cells={"cold_ttft_ms": PhaseStat("cold", "ttft_ms")},
    estimate=estimate,
    run=run,
    derived=COLD_PREFILL_FIGURES,
    report_rows=(
        ReportRow(
            "cold prefill ({workload})", "tok/s", "prefill_total_tok_s", True, note="prompt tokens / TTFT, median"
        ),
    ),
)

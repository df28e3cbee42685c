"""decode_during_restore: running decodes' ITL and TPOT while a large host-tier restore happens
("TPOT got worse with HiCache on"), beside short_ttft's TTFT during a long prefill.

Phases:
  "seed"            the ``n_restores`` large prompts (``restore_tokens``), cold: now cached
  "evict"           distinct filler of ``eviction_tokens`` (prompts of at most the restore length
                    and half the pool): pushes them out of the GPU pool, onto the host with
                    HiCache. Filler.
  "alone"           a batch of ``batch`` decodes (``prompt_tokens`` each, ``output_tokens`` out,
                    ignore_eos), nothing else running: the decodes' own ITL / TPOT
  "during_restore"  the same batch again, new prompts, and once they run (``START_DELAY_S``)
  "restore"         the large prompts once more, one after another: host-tier hits loaded back
                    with HiCache (its restore), a recompute without — while the decodes decode.
HiCache ON against OFF is the comparison: OFF's decodes wait behind a recompute's prefill chunks,
ON's behind a load-back (and its write-through backups). The derived ratios (during / alone) are
compared and gateable; the restore phase exists to hit the host tier (an unexercised one says so).
"""

from __future__ import annotations

import asyncio
from typing import Literal

from harness.spec.numbers import count, tokens
from harness.spec.values import TokenSize, TokenSizeT
from harness.workloads.config import WorkloadConfig
from harness.workloads.context import WorkloadContext, WorkloadScope
from harness.workloads.estimating import EstimateContext, WorkEstimate, add, est, mul
from harness.workloads.kind import Derived, PhaseStat, ReportRow, Tier, WorkloadKind, ratio
from harness.workloads.kinds.repeat_prefill import eviction_sizes

START_DELAY_S = 0.05  # the decodes' short prompts are prefilled and decoding before the restore is sent


class DecodeDuringRestore(WorkloadConfig):
    """A decode batch alone, then again while large prompts come back from the host tier."""

    kind: Literal["decode_during_restore"]
    batch: count("requests at once") = 4
    prompt_tokens: TokenSizeT = TokenSize(tokens=128)
    output_tokens: tokens() = 256
    n_restores: count("restores") = 1
    restore_tokens: TokenSizeT = TokenSize(pool_fraction=0.5)
    # over the GPU pool (pushes the restore prompts out of it), within a ratio-2 host pool
    eviction_tokens: TokenSizeT = TokenSize(pool_fraction=1.2)

    def longest_request_tokens(self, pool_tokens: int) -> int:
        return max(
            self.prompt_tokens.resolve(pool_tokens) + self.output_tokens, self.restore_tokens.resolve(pool_tokens) + 1
        )


async def run(ctx: WorkloadContext, cfg: DecodeDuringRestore) -> None:
    w = WorkloadScope(ctx, cfg)
    restore_len, short = ctx.tokens(cfg.restore_tokens), ctx.tokens(cfg.prompt_tokens)
    restores = w.prompts(cfg.n_restores, restore_len, "restore")
    w.phase("seed")
    for i, ids in enumerate(restores):
        await w.send("seed", i, ids, max_new_tokens=1)
    w.phase("evict")
    for i, size in enumerate(eviction_sizes(ctx.tokens(cfg.eviction_tokens), restore_len, ctx.pool_tokens)):
        (ids,) = w.prompts(1, size, f"evict{i}")
        await w.send("evict", i, ids, max_new_tokens=1)
    w.phase("alone")
    group = w.group("alone")
    await w.gather(
        w.send("alone", i, ids, max_new_tokens=cfg.output_tokens, ignore_eos=True, group=group)
        for i, ids in enumerate(w.prompts(cfg.batch, short, "alone"))
    )
    w.phase("during_restore")
    group = w.group("during_restore")
    decodes = [
        asyncio.create_task(
            w.send("during_restore", i, ids, max_new_tokens=cfg.output_tokens, ignore_eos=True, group=group)
        )
        for i, ids in enumerate(w.prompts(cfg.batch, short, "during"))
    ]
    try:
        await asyncio.sleep(START_DELAY_S)
        for i, ids in enumerate(restores):
            await w.send("restore", i, ids, max_new_tokens=1)
    finally:
        await asyncio.gather(*decodes, return_exceptions=True)
    for t in decodes:
        t.result()  # re-raises StopSending if a decode could not be sent


_ALONE_TPOT = PhaseStat("alone", "tpot_ms")
_DURING_TPOT = PhaseStat("during_restore", "tpot_ms")
_ALONE_ITL99 = PhaseStat("alone", "itl_ms", "p99")
_DURING_ITL99 = PhaseStat("during_restore", "itl_ms", "p99")


def estimate(w: DecodeDuringRestore, c: EstimateContext) -> WorkEstimate:
    """The restore prompts cold, the filler, 2 x batch decodes, the restore prompts again (host
    hits where the pools allow: counted as computed, not known before launch)."""
    r = c.repeats
    R, S, E, P = c.size(w.restore_tokens), c.size(w.prompt_tokens), c.size(w.eviction_tokens), c.P
    sizes = eviction_sizes(E, R, P) if E is not None and R is not None and P is not None else None
    filler = sum(sizes) if sizes is not None else E
    reqs = 2 * w.n_restores + 2 * w.batch + (len(sizes) if sizes is not None else 0)
    sent = mul(add(mul(2 * w.n_restores, R), filler, mul(2 * w.batch, S)), r)
    return est(
        w.name,
        w.kind,
        reqs * r,
        sent,
        sent,
        sent,
        r * (2 * w.batch * w.output_tokens + 2 * w.n_restores + (len(sizes) if sizes is not None else 0)),
        c.decode_s(2 * r * (w.output_tokens - 1)),
        c.too_long(R),
    )


HIT_TIERS: dict[str, Tier] = {"restore": "host"}

KIND = WorkloadKind(
    config=DecodeDuringRestore,
    hit_tier=HIT_TIERS.get,
    estimate=estimate,
    run=run,
    filler_phases=frozenset({"evict"}),
    derived=(
        Derived(
            "restore_tpot_ratio",
            "ratio",
            False,
            "running decodes' TPOT while a large prompt is restored / alone, medians",
            lambda p: ratio(_DURING_TPOT.of(p), _ALONE_TPOT.of(p)),
            needs=("alone", "during_restore"),
            compared=True,
        ),
        Derived(
            "restore_itl_p99_ratio",
            "ratio",
            False,
            "running decodes' ITL p99 while a large prompt is restored / alone",
            lambda p: ratio(_DURING_ITL99.of(p), _ALONE_ITL99.of(p)),
            needs=("alone", "during_restore"),
            compared=True,
        ),
        Derived(
            "restore_ttft_ms",
            "ms",
            False,
            "TTFT of the restored prompts (host hits with HiCache, a recompute without), median",
            PhaseStat("restore", "ttft_ms").of,
            needs=("restore",),
            compared=True,
        ),
    ),
    report_rows=(
        ReportRow("decode TPOT alone", "ms", _ALONE_TPOT, False, note="{workload}, p50"),
        ReportRow("decode TPOT during a restore", "ms", _DURING_TPOT, False, note="{workload}, p50"),
        ReportRow("decode ITL p99 during a restore", "ms", _DURING_ITL99, False, note="{workload}"),
        ReportRow("TPOT during / alone", "×", "restore_tpot_ratio", False, note="{workload}"),
    ),
    history_stats=(_ALONE_TPOT, _DURING_TPOT),
    tier_hit_phases=True,
)

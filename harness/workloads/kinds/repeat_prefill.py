"""repeat_prefill: the same prompts cold, again at once (device hits), then after eviction
traffic (host hits with HiCache, recompute without).

Phases, each one request at a time:
  "cold"                the N prompts, first time
  "repeat_device"       the same N again, right away: GPU-tier hits
  "evict"               distinct filler of `eviction_tokens` in total (prompts of at most L and
                        at most half the pool): pushes the N out of the GPU pool. Filler — the
                        summary lists it but derives no figure from it.
  "repeat_after_evict"  the same N once more: host-tier hits with HiCache, recompute without
With ``storage_eviction_tokens`` (a storage tier, L3, under test), two more:
  "evict_host"          distinct filler of that many tokens: pushes the N past the GPU *and* the
                        host pool (size it over host + GPU pool). Filler.
  "repeat_from_storage" the same N once more: storage-tier hits with a storage backend (prefetched
                        into the host pool, then loaded back), recompute without
"""

from __future__ import annotations

from typing import Literal

from harness.spec.numbers import count
from harness.spec.values import TokenSize, TokenSizeT
from harness.workloads.config import PrefillConfig
from harness.workloads.context import WorkloadContext, WorkloadScope
from harness.workloads.estimating import EstimateContext, WorkEstimate, add, est, mul
from harness.workloads.kind import Derived, PhaseRoofline, PhaseStat, ReportRow, Tier, WorkloadKind, ratio
from harness.workloads.kinds.cold_prefill import COLD_PREFILL_FIGURES


class RepeatPrefill(PrefillConfig):
    """The same prompts again: at once (device hits), then after eviction traffic (host hits)."""

    kind: Literal["repeat_prefill"]
    n: count("requests") = 1
    prompt_tokens: TokenSizeT
    # Over the GPU pool (pushes the prompts out of it), within a ratio-2 host pool minus the
    # prompts (more would push them out of the host tier too, and the phase would test recompute).
    eviction_tokens: TokenSizeT = TokenSize(pool_fraction=1.2)
    # Past the host pool too (over host + GPU pool, e.g. "3x pool" at hicache ratio 1.5): the
    # prompts come back from the storage tier. None: no storage phases.
    storage_eviction_tokens: TokenSizeT | None = None

    def longest_request_tokens(self, pool_tokens: int) -> int:
        return self.prompt_tokens.resolve(pool_tokens) + self.new_tokens()


def eviction_sizes(total_tokens: int, prompt_tokens: int, pool_tokens: int) -> list[int]:
    """Split `total_tokens` of filler into prompts of at most min(L, pool/2) tokens (≥ 1 each)."""
    if total_tokens <= 0:
        return []
    chunk = max(1, min(prompt_tokens, pool_tokens // 2 if pool_tokens > 1 else prompt_tokens))
    sizes = [chunk] * (total_tokens // chunk)
    if total_tokens % chunk:
        sizes.append(total_tokens % chunk)
    return sizes


async def run(ctx: WorkloadContext, cfg: RepeatPrefill) -> None:
    w = WorkloadScope(ctx, cfg)
    n_tokens = ctx.tokens(cfg.prompt_tokens)
    prompts = w.prompts(cfg.n, n_tokens, "measured")
    for phase in ("cold", "repeat_device"):
        w.phase(phase)
        for i, ids in enumerate(prompts):
            await w.send(phase, i, ids)
    w.phase("evict")
    sizes = eviction_sizes(ctx.tokens(cfg.eviction_tokens), n_tokens, ctx.pool_tokens)
    for i, size in enumerate(sizes):
        (ids,) = w.prompts(1, size, f"evict{i}")
        await w.send("evict", i, ids)
    w.phase("repeat_after_evict")
    for i, ids in enumerate(prompts):
        await w.send("repeat_after_evict", i, ids)
    if cfg.storage_eviction_tokens is None:
        return
    w.phase("evict_host")
    for i, size in enumerate(eviction_sizes(ctx.tokens(cfg.storage_eviction_tokens), n_tokens, ctx.pool_tokens)):
        (ids,) = w.prompts(1, size, f"evict_host{i}")
        await w.send("evict_host", i, ids)
    w.phase("repeat_from_storage")
    for i, ids in enumerate(prompts):
        await w.send("repeat_from_storage", i, ids)


_COLD_TTFT = PhaseStat("cold", "ttft_ms")
_STORAGE_TTFT = PhaseStat("repeat_from_storage", "ttft_ms")


def estimate(w: RepeatPrefill, c: EstimateContext) -> WorkEstimate:
    """Cold n x L, repeated at once n x L (GPU-tier hits), the eviction filler in prompts of
    min(L, P/2) (`eviction_sizes`), then n x L again (host-tier hits where the pools allow); with
    ``storage_eviction_tokens`` the storage filler and n x L once more (counted as computed: a
    storage hit is not known before launch)."""
    r, P, new = c.repeats, c.P, w.new_tokens()
    L, E = c.size(w.prompt_tokens), c.size(w.eviction_tokens)
    n = w.n
    sizes = eviction_sizes(E, L, P) if E is not None and L is not None and P is not None else None
    filler = sum(sizes) if sizes is not None else E
    reqs = 3 * n + (len(sizes) if sizes is not None else 0)
    sent = mul(add(mul(3 * n, L), filler), r)
    prompts = mul(n, L)
    again = prompts if c.evicted(prompts) else 0  # repeated at once: GPU-tier hits if they fit
    traffic = add(prompts, filler)
    host_ok, warn = c.host_window("prompts + eviction traffic", traffic)
    after = 0 if (host_ok or not c.evicted(traffic)) else prompts
    computed = mul(add(prompts, again, filler, prompts if c.evicted(traffic) else 0), r)
    expected = mul(add(prompts, again, filler, after), r)
    if w.storage_eviction_tokens is not None:  # the storage phases: more filler, the prompts again
        S = c.size(w.storage_eviction_tokens)
        s_sizes = eviction_sizes(S, L, P) if S is not None and L is not None and P is not None else None
        s_filler = sum(s_sizes) if s_sizes is not None else S
        reqs += n + (len(s_sizes) if s_sizes is not None else 0)
        more = mul(add(s_filler, prompts), r)
        sent, computed, expected = add(sent, more), add(computed, more), add(expected, more)
    return est(
        w.name,
        w.kind,
        reqs * r,
        sent,
        computed,
        expected,
        reqs * r * new,
        c.decode_s(reqs * r * max(0, new - 1)),
        c.too_long(L) + c.aligned("prompt_tokens", L) + warn,
        traffic,
    )


# the tier each repeat exists to hit (cold and the filler miss on purpose)
HIT_TIERS: dict[str, Tier] = {"repeat_device": "device", "repeat_after_evict": "host", "repeat_from_storage": "storage"}

KIND = WorkloadKind(
    config=RepeatPrefill,
    table_cells={
        "cold_ttft_ms": PhaseStat("cold", "ttft_ms"),
        "device_hit_ttft_ms": PhaseStat("repeat_device", "ttft_ms"),
        "host_hit_ttft_ms": PhaseStat("repeat_after_evict", "ttft_ms"),
    },
    hit_tier=HIT_TIERS.get,
    estimate=estimate,
    run=run,
    filler_phases=frozenset({"evict", "evict_host"}),
    derived=COLD_PREFILL_FIGURES
    + (
        Derived(
            "device_speedup",
            "ratio",
            True,
            "cold TTFT / TTFT repeated at once (GPU-tier hit)",
            lambda p: ratio(_COLD_TTFT.of(p), PhaseStat("repeat_device", "ttft_ms").of(p)),
            needs=("cold", "repeat_device"),
            compared=True,
        ),
        Derived(
            "host_speedup",
            "ratio",
            True,
            "cold TTFT / TTFT after eviction (host-tier hit)",
            lambda p: ratio(_COLD_TTFT.of(p), PhaseStat("repeat_after_evict", "ttft_ms").of(p)),
            needs=("cold", "repeat_after_evict"),
            compared=True,
        ),
        Derived(
            "storage_speedup",
            "ratio",
            True,
            "cold TTFT / TTFT after eviction past the host pool (storage-tier hit)",
            lambda p: ratio(_COLD_TTFT.of(p), _STORAGE_TTFT.of(p)),
            needs=("cold", "repeat_from_storage"),
            compared=True,
        ),
        Derived(
            "storage_hit_ttft_ms",
            "ms",
            False,
            "median TTFT of the repeats served from the storage tier (L3)",
            _STORAGE_TTFT.of,
            needs=("repeat_from_storage",),
            compared=True,
        ),
        Derived(
            "host_hit_vs_floor",
            "ratio",
            False,
            "host-hit TTFT / its roofline floor (KV bytes / probed pinned H2D + suffix at the cold rate), median",
            PhaseRoofline("repeat_after_evict").of,
            needs=("repeat_after_evict",),
            compared=True,
            when=PhaseRoofline("repeat_after_evict").present,
        ),
        Derived(
            "storage_hit_vs_floor",
            "ratio",
            False,
            "storage-hit TTFT / its roofline floor (+ KV bytes / probed disk read), median",
            PhaseRoofline("repeat_from_storage").of,
            needs=("repeat_from_storage",),
            compared=True,
            when=PhaseRoofline("repeat_from_storage").present,
        ),
        Derived(
            "storage_hit_fraction",
            "fraction",
            True,
            "mean share of the storage repeats' prompt tokens served from the storage tier",
            PhaseStat("repeat_from_storage", "storage_hit_fraction", "mean").of,
            needs=("repeat_from_storage",),
            counts_hits=True,
        ),
    ),
    report_rows=(
        ReportRow("repeat speedup, device hit", "×", "device_speedup", True, note="cold TTFT / repeat TTFT"),
        ReportRow("repeat speedup, host hit", "×", "host_speedup", True, note="cold TTFT / TTFT after eviction"),
        ReportRow(
            "repeat speedup, storage hit", "×", "storage_speedup", True, note="cold TTFT / TTFT past the host pool"
        ),
        ReportRow("TTFT, storage hit", "ms", "storage_hit_ttft_ms", False, note="repeats served from L3"),
        ReportRow("host hit / roofline floor", "×", "host_hit_vs_floor", False, note="1 = at the PCIe floor"),
        ReportRow(
            "storage hit / roofline floor", "×", "storage_hit_vs_floor", False, note="1 = at the disk + PCIe floor"
        ),
        ReportRow("storage-hit fraction", "", "storage_hit_fraction", True, note="L3 share of the storage repeats"),
    ),
    tier_hit_phases=True,
)

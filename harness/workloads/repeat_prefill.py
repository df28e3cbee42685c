"""repeat_prefill: the same prompts cold, again at once (device hits), then after eviction
traffic (host hits with HiCache, recompute without).

Phases, each one request at a time:
  "cold"                the N prompts, first time
  "repeat_device"       the same N again, right away: GPU-tier hits
  "evict"               distinct filler of `eviction_tokens` in total (prompts of at most L and
                        at most half the pool): pushes the N out of the GPU pool. Filler — the
                        summary lists it but derives no ratio from it.
  "repeat_after_evict"  the same N once more: host-tier hits with HiCache, recompute without
"""

from __future__ import annotations

from typing import Any

from harness.workloads.base import WorkloadContext, WorkloadScope



def eviction_sizes(total_tokens: int, prompt_tokens: int, pool_tokens: int) -> list[int]:
    """Split `total_tokens` of filler into prompts of at most min(L, pool/2) tokens (≥ 1 each)."""
    if total_tokens <= 0:
        return []
    chunk = max(1, min(prompt_tokens, pool_tokens // 2 if pool_tokens > 1 else prompt_tokens))
    sizes = [chunk] * (total_tokens // chunk)
    if total_tokens % chunk:
        sizes.append(total_tokens % chunk)
    return sizes


async def run(ctx: WorkloadContext, cfg: Any) -> None:
    w = WorkloadScope(ctx, cfg)
    n_tokens = ctx.tokens(cfg.prompt_tokens)
    await w.warmup(n_tokens)
    prompts = w.prompts(int(cfg.n), n_tokens, "measured")
    for phase in ("cold", "repeat_device"):
        w.phase(phase)
        for i, ids in enumerate(prompts):
            await w.send(phase, i, ids)
    evict_total = ctx.tokens(getattr(cfg, "eviction_tokens", None) or "2x pool")
    w.phase("evict")
    sizes = eviction_sizes(evict_total, n_tokens, ctx.pool_tokens)
    for i, size in enumerate(sizes):
        (ids,) = w.prompts(1, size, f"evict{i}")
        await w.send("evict", i, ids)
    w.phase("repeat_after_evict")
    for i, ids in enumerate(prompts):
        await w.send("repeat_after_evict", i, ids)

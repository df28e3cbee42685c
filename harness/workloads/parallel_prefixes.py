"""parallel_prefixes: K distinct long prefixes sent concurrently, P passes (seed 000: K=8, 2
passes, second pass 5.2 s → 1.6 s with HiCache).

Phases "pass1" ... "passP"; every request of a pass shares `concurrency_group`
"<workload>/pass<p>/r<repeat>", from which `metrics.group_walls` derives the pass wall time
(last done − first sent). With K×L above the GPU pool, pass 2 finds its prefixes on the host tier.
"""

from __future__ import annotations

from typing import Any

from harness.workloads.base import WorkloadContext, WorkloadScope


async def run(ctx: WorkloadContext, cfg: Any) -> None:
    w = WorkloadScope(ctx, cfg)
    n_tokens = ctx.tokens(cfg.prompt_tokens)
    await w.warmup(n_tokens)
    prompts = w.prompts(int(cfg.k), n_tokens, "prefixes")
    for p in range(1, int(getattr(cfg, "passes", 2) or 2) + 1):
        phase = f"pass{p}"
        w.phase(phase)
        group = w.group(phase)
        await w.gather(w.send(phase, i, ids, group=group) for i, ids in enumerate(prompts))

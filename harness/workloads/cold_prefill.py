"""cold_prefill: N never-seen prompts of L tokens, one at a time (seed 000: 75K tokens).

Phases: "warmup" (cfg.warmup requests, marked), "cold". Reports TTFT and prefill tok/s.
"""

from __future__ import annotations

from typing import Any

from harness.workloads.base import WorkloadContext, WorkloadScope


async def run(ctx: WorkloadContext, cfg: Any) -> None:
    w = WorkloadScope(ctx, cfg)
    n_tokens = ctx.tokens(cfg.prompt_tokens)
    await w.warmup(n_tokens)
    w.phase("cold")
    for i, ids in enumerate(w.prompts(int(cfg.n), n_tokens, "cold")):
        await w.send("cold", i, ids)

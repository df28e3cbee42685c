"""decode: a batch of B requests at once, fixed output length (`ignore_eos`), phase "decode".

Reports decode tok/s, ITL, TPOT. `n` (optional, default 1) repeats the batch.
"""

from __future__ import annotations

from typing import Any

from harness.workloads.base import WorkloadContext, WorkloadScope


async def run(ctx: WorkloadContext, cfg: Any) -> None:
    w = WorkloadScope(ctx, cfg)
    batch, n_tokens = int(cfg.batch), ctx.tokens(cfg.prompt_tokens)
    out = int(cfg.output_tokens)
    await w.warmup(n_tokens)
    w.phase("decode")
    rounds = int(getattr(cfg, "n", 1) or 1)
    for r in range(rounds):
        group = f"{w.group('decode')}/b{r}"
        prompts = w.prompts(batch, n_tokens, f"decode{r}")
        await w.gather(w.send("decode", r * batch + i, ids, max_new_tokens=out, ignore_eos=True,
                              group=group) for i, ids in enumerate(prompts))

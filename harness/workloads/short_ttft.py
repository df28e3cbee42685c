"""short_ttft: TTFT of short prompts alone, then while a long prefill runs (interference).

Phases: "alone" (N short prompts, one at a time), "long" (one long prompt), "during_long" (N
short prompts sent one after another while the long one is in flight; the long request and
these share a concurrency group). A short prompt that could only be sent after the long one
had finished is labelled "after_long" instead, so "during_long" never holds non-overlapping rows.
With `long_prompt_tokens: null` only "alone" runs.
"""

from __future__ import annotations

import asyncio
from typing import Any

from harness.workloads.base import WorkloadContext, WorkloadScope

START_DELAY_S = 0.01  # let the long request reach the server's scheduler first


async def run(ctx: WorkloadContext, cfg: Any) -> None:
    w = WorkloadScope(ctx, cfg)
    n, short = int(cfg.n), ctx.tokens(cfg.prompt_tokens)
    await w.warmup(short)
    w.phase("alone")
    for i, ids in enumerate(w.prompts(n, short, "alone")):
        await w.send("alone", i, ids)
    if getattr(cfg, "long_prompt_tokens", None) is None:
        return  # alone only
    long_tokens = ctx.tokens(cfg.long_prompt_tokens)

    w.phase("during_long")
    group = w.group("during_long")
    (long_ids,) = w.prompts(1, long_tokens, "long")
    long_task = asyncio.create_task(w.send("long", 0, long_ids, group=group))
    await asyncio.sleep(START_DELAY_S)
    try:
        for i, ids in enumerate(w.prompts(n, short, "during")):
            phase = "during_long" if not long_task.done() else "after_long"
            await w.send(phase, i, ids, group=group if phase == "during_long" else None)
    finally:
        await asyncio.gather(long_task, return_exceptions=True)
    long_task.result()  # re-raises StopSending if the long one could not be sent

"""multi_turn: S sessions × T turns, like sglang's bench_multiturn: sessions run concurrently,
each turn of a session waits for the previous one and sends the whole history (previous prompt
+ the model's output + `turn_tokens` new user tokens), so every turn after the first should hit
the cache for its history.

Phases "turn1" ... "turnT" (1-based; the sampler sees one label, "<workload>/turns"). Output
length fixed with `ignore_eos`.
"""

from __future__ import annotations

from typing import Any

from harness.workloads.base import WorkloadContext, WorkloadScope


async def run(ctx: WorkloadContext, cfg: Any) -> None:
    w = WorkloadScope(ctx, cfg)
    sessions, turns = int(cfg.sessions), int(cfg.turns)
    first, more = ctx.tokens(cfg.first_turn_tokens), ctx.tokens(cfg.turn_tokens)
    out = int(getattr(cfg, "output_tokens", None) or w.max_new_tokens)
    await w.warmup(first)
    histories = w.prompts(sessions, first, "sessions")
    w.phase("turns")  # sampler label: sessions are at different turns at any moment

    async def session(s: int, history: list[int]) -> None:
        for t in range(1, turns + 1):
            if t > 1:
                history = ctx.prompts.extend(
                    history, more, key=(ctx.variant, w.name, ctx.repeat, "turn", s, t))
            rec = await w.send(f"turn{t}", s, history, max_new_tokens=out, ignore_eos=True)
            history = history + rec.output_ids

    await w.gather(session(s, h) for s, h in enumerate(histories))

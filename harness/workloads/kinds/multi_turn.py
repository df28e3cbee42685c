"""multi_turn: S sessions × T turns, like sglang's bench_multiturn: sessions run concurrently,
each turn of a session waits for the previous one and sends the whole history (previous prompt
+ the model's output + `turn_tokens` new user tokens), so every turn after the first should hit
the cache for its history.

Phases "turn1" ... "turnT" (1-based; the sampler sees one label, "<workload>/turns"). Output
length fixed with `ignore_eos`.
"""

from __future__ import annotations

from typing import Literal

import numpy as np

from harness.spec.numbers import count, tokens
from harness.spec.values import TokenSize, TokenSizeT
from harness.workloads.config import WorkloadConfig
from harness.workloads.context import WorkloadContext, WorkloadScope
from harness.workloads.estimating import EstimateContext, WorkEstimate, est
from harness.workloads.kind import Derived, PhaseSummaries, WorkloadKind


class MultiTurn(WorkloadConfig):
    """Sessions that grow turn by turn."""

    kind: Literal["multi_turn"]
    sessions: count("sessions") = 4
    turns: count("turns") = 4
    first_turn_tokens: TokenSizeT = TokenSize(tokens=2000)
    turn_tokens: TokenSizeT = TokenSize(tokens=200)
    output_tokens: tokens() = 32

    def longest_request_tokens(self, pool_tokens: int) -> int:
        turn = self.turn_tokens.resolve(pool_tokens) + self.output_tokens
        return self.first_turn_tokens.resolve(pool_tokens) + (self.turns - 1) * turn + self.output_tokens


async def run(ctx: WorkloadContext, cfg: MultiTurn) -> None:
    w = WorkloadScope(ctx, cfg)
    first, more = ctx.tokens(cfg.first_turn_tokens), ctx.tokens(cfg.turn_tokens)
    histories = w.prompts(cfg.sessions, first, "sessions")
    w.phase("turns")  # sampler label: sessions are at different turns at any moment

    async def session(s: int, history: list[int]) -> None:
        for t in range(1, cfg.turns + 1):
            if t > 1:
                history = ctx.prompts.extend(history, more, key=(ctx.variant, w.name, ctx.repeat, "turn", s, t))
            rec = await w.send(f"turn{t}", s, history, max_new_tokens=cfg.output_tokens, ignore_eos=True)
            history = history + rec.output_ids

    await w.gather(session(s, h) for s, h in enumerate(histories))


def _turn(phase: str) -> int | None:
    return int(phase[4:]) if phase.startswith("turn") and phase[4:].isdigit() else None


def later_turns_cached_fraction(phases: PhaseSummaries) -> float | None:
    """Mean over turns ≥ 2 of each turn's mean cached fraction."""
    means = [phases[p]["metrics"]["cached_fraction"] for p in phases if (_turn(p) or 0) >= 2]
    values = [m["mean"] for m in means if m]
    return float(np.mean(values)) if values else None


def estimate(w: MultiTurn, c: EstimateContext) -> WorkEstimate:
    """Turn t of a session sends first + (t-1) x (output + turn) tokens; a later turn's history
    hits the GPU tier while every session's history fits the pool."""
    r, P = c.repeats, c.P
    F, M, Out, T, S = c.size(w.first_turn_tokens), c.size(w.turn_tokens), w.output_tokens, w.turns, w.sessions
    sent = computed = None
    last = None
    if F is not None and M is not None:
        prompts = [F + (t - 1) * (Out + M) for t in range(1, T + 1)]
        last = prompts[-1]
        sent = S * sum(prompts) * r
        histories_fit = P is not None and S * (last + Out) <= P
        computed = (S * (F + (T - 1) * (Out + M)) if histories_fit else S * sum(prompts)) * r
    return est(
        w.name,
        w.kind,
        S * T * r,
        sent,
        computed,
        computed,
        S * T * Out * r,
        c.decode_s(T * r * (Out - 1)),
        c.too_long(last),
    )


KIND = WorkloadKind(
    config=MultiTurn,
    estimate=estimate,
    run=run,
    derived=(
        Derived(
            "later_turns_cached_fraction",
            "fraction",
            True,
            "mean cached share of turns >= 2",
            later_turns_cached_fraction,
        ),
    ),
    tier_hit_phases=True,
)

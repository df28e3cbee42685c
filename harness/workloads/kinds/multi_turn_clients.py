"""multi_turn_clients: N chat clients × rounds, like sglang's benchmark/hicache/bench_multiturn:
each round's prompt is the conversation so far (every earlier prompt and answer) plus a new user
turn, so a round should find its whole history cached — on the GPU while the conversations fit
there, then on the host tier (HiCache) or nowhere (recomputed).

Each client starts at once (or spread evenly over ``start_spread_s``) and sends its next round
``think_time_s`` after its answer came (``gaps: exponential``: that mean), or at ``client_rate``
rounds per second (its next round is due one gap after the last was due, or when the answer
came if that is later). ``max_parallel`` caps the requests in flight over all clients (first
come first served; a waiting round is due when a slot frees). A conversation ends after
``rounds`` rounds, or before a round whose prompt plus ``output_tokens`` would pass
``max_context_tokens``. Rounds are sent at their instants (`StreamingClient.generate_at`), so
each record carries its scheduled and actual send time; a round whose p99 lag is over
``lag_limit_ms`` is client-bound (`harness.workloads.arrivals`). The rows are written when the
last round is over (an fsync per row on the event loop would delay the rounds due meanwhile).

Phases ``round1`` ... ``roundR`` (the sampler sees one label, ``<workload>/rounds``): per-round
TTFT and cached tokens by tier, so the tier-hit chart and the per-round rows show the round where
conversations fall out of the GPU pool into the host tier. Output length fixed (``ignore_eos``).
"""

from __future__ import annotations

import random
import time
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
from pydantic import model_validator

from harness.server.schedule import LAG_LIMIT_MS, sleep_until_ns, young_collections_only
from harness.spec.errors import field_error
from harness.spec.numbers import DAY_S, count, ranged, seconds, tokens
from harness.spec.values import TokenSize, TokenSizeT
from harness.store.records import RequestRecord
from harness.workloads.arrivals import (
    LAG_DERIVED,
    LAG_ROWS,
    START_NS,
    LagLimit,
    Slots,
    freed_at,
    lag_figures,
    record_all,
    warn_if_client_bound,
)
from harness.workloads.config import WorkloadConfig
from harness.workloads.context import WorkloadContext, WorkloadScope
from harness.workloads.estimating import NEEDS_POOL, EstimateContext, WorkEstimate, est
from harness.workloads.kind import Derived, PhaseStat, PhaseSummaries, ReportRow, WorkloadKind, ratio
from harness.workloads.prompts import derive_seed

ROUND_ROWS = 10  # rounds with a row of their own in the report's HiCache table


class MultiTurnClients(WorkloadConfig):
    """Chat clients whose conversations grow round by round."""

    kind: Literal["multi_turn_clients"]
    clients: count("clients") = 8
    rounds: count("rounds per client") = 5
    first_turn_tokens: TokenSizeT = TokenSize(tokens=1000)
    turn_tokens: TokenSizeT = TokenSize(tokens=200)  # each later round's new user turn
    output_tokens: tokens() = 64
    max_context_tokens: TokenSizeT | None = None  # a conversation ends before its prompt + output passes this
    think_time_s: seconds(0, DAY_S) = 0.0  # from an answer to the client's next round
    client_rate: ranged(float, 0.0001, 1e6, "rounds/s per client") | None = (
        None  # rounds per second per client, instead of think time
    )
    gaps: Literal["constant", "exponential"] = "constant"  # think times / gaps between rounds
    max_parallel: count("requests in flight") | None = None  # requests in flight over all clients
    start_spread_s: seconds(0, DAY_S) = 0.0  # first rounds spread evenly over this window
    lag_limit_ms: LagLimit = LAG_LIMIT_MS

    @model_validator(mode="after")
    def _one_pace(self):
        if self.client_rate is not None and self.think_time_s:
            raise field_error("give think_time_s or client_rate, not both: a client's pace is one of them")
        return self

    def new_tokens(self) -> int:
        return self.output_tokens

    def full_context_tokens(self, pool_tokens: int) -> int:
        """The last round's prompt when nothing ends a conversation early."""
        turn = self.turn_tokens.resolve(pool_tokens) + self.output_tokens
        return self.first_turn_tokens.resolve(pool_tokens) + (self.rounds - 1) * turn

    def longest_request_tokens(self, pool_tokens: int) -> int:
        longest = self.full_context_tokens(pool_tokens) + self.output_tokens
        if self.max_context_tokens is not None:
            longest = min(longest, self.max_context_tokens.resolve(pool_tokens))
        return max(longest, self.first_turn_tokens.resolve(pool_tokens) + self.output_tokens)


async def run(ctx: WorkloadContext, cfg: MultiTurnClients) -> None:
    w = WorkloadScope(ctx, cfg)
    first, more, out = ctx.tokens(cfg.first_turn_tokens), ctx.tokens(cfg.turn_tokens), cfg.output_tokens
    limit = ctx.tokens(cfg.max_context_tokens) if cfg.max_context_tokens is not None else None
    if limit is not None and first + out > limit:
        raise ValueError(f"the first round ({first} + {out} output tokens) is over max_context_tokens ({limit})")
    histories = w.prompts(cfg.clients, first, "clients")
    slots = Slots(cfg.max_parallel) if cfg.max_parallel is not None else None
    mean_gap_s = 1.0 / cfg.client_rate if cfg.client_rate is not None else cfg.think_time_s
    w.phase("rounds")  # sampler label: clients are at different rounds at any moment
    start = time.perf_counter_ns() + START_NS
    sent: list[RequestRecord] = []

    async def client(c: int, history: list[int]) -> None:
        rng = random.Random(derive_seed(ctx.seed, w.name, ctx.repeat, "gaps", c))
        due = start + round(cfg.start_spread_s * 1e9 * c / cfg.clients)
        for r in range(1, cfg.rounds + 1):
            prompt = (
                history
                if r == 1
                else ctx.prompts.extend(history, more, key=(ctx.variant, w.name, ctx.repeat, "round", c, r))
            )
            if limit is not None and len(prompt) + out > limit:
                return  # the conversation reached its length
            rec = None
            if slots is not None:
                await sleep_until_ns(due)
                freed = await slots.acquire()
                due = due if freed is None else max(due, freed)
            try:
                rec = await w.send(f"round{r}", c, prompt, max_new_tokens=out, ignore_eos=True, at_ns=due, defer=True)
                sent.append(rec)
            finally:
                if slots is not None:
                    slots.release(freed_at(rec))
            if rec.error is not None:
                return  # a conversation without its answer cannot go on
            history = prompt + rec.output_ids
            answered = freed_at(rec)
            gap = round((rng.expovariate(1.0) if cfg.gaps == "exponential" else 1.0) * mean_gap_s * 1e9)
            due = max(due + gap, answered) if cfg.client_rate is not None else answered + gap

    try:
        with young_collections_only():  # no millisecond collections while rounds are due
            await w.gather(client(c, h) for c, h in enumerate(histories))
    finally:
        record_all(w, sent)  # after the last round: an fsync per row would delay the sends due meanwhile
    for r in range(1, cfg.rounds + 1):
        warn_if_client_bound(w.name, f"round{r}", [x for x in sent if x.phase == f"round{r}"], cfg.lag_limit_ms)


def round_of(phase: str) -> int | None:
    """The round of a ``round<k>`` phase."""
    return int(phase[5:]) if phase.startswith("round") and phase[5:].isdigit() else None


def _later_mean(metric: str) -> Any:
    def compute(phases: PhaseSummaries) -> float | None:
        means = [
            ((p.get("metrics") or {}).get(metric) or {}).get("mean")
            for ph, p in phases.items()
            if (round_of(ph) or 0) >= 2
        ]
        values = [m for m in means if m is not None]
        return float(np.mean(values)) if values else None

    return compute


def first_host_round(phases: PhaseSummaries) -> float | None:
    """The first round whose prompts came more from the host tier than from the GPU (None: none
    did): where the conversations fell out of the GPU pool."""
    for ph in sorted(phases, key=lambda p: round_of(p) or 0):
        k = round_of(ph)
        hits = (phases[ph] or {}).get("hits") or {}
        if k is not None and (hits.get("host_tokens") or 0) > (hits.get("device_tokens") or 0):
            return float(k)
    return None


def ttft_growth(phases: PhaseSummaries) -> float | None:
    """TTFT p50 of the last round / of the first."""
    rounds = sorted((k, ph) for ph in phases if (k := round_of(ph)) is not None)
    if len(rounds) < 2:
        return None
    return ratio(PhaseStat(rounds[-1][1], "ttft_ms").of(phases), PhaseStat(rounds[0][1], "ttft_ms").of(phases))


def phase_figures(cfg: MultiTurnClients | None, phase: str, records: Sequence[RequestRecord]) -> dict[str, Any]:
    """Schedule lag of a round (its sends are due after think time or at the client's rate)."""
    return lag_figures(records, cfg.lag_limit_ms if cfg is not None else LAG_LIMIT_MS)


def estimate(cfg: MultiTurnClients, c: EstimateContext) -> WorkEstimate:
    """Round r of a client sends first + (r-1) x (turn + output) tokens, up to ``rounds`` or
    ``max_context_tokens``. A round's history is cached while every conversation fits the GPU
    pool (computed: its new turn only); past the GPU pool, a healthy HiCache serves it from the
    host tier while they fit there (expected), and the upper bound recomputes it. The clock: the
    think times between rounds add to the serving; a ``client_rate`` clock and the start spread
    overlap it."""
    r, Out = c.repeats, cfg.output_tokens
    F, M = c.size(cfg.first_turn_tokens), c.size(cfg.turn_tokens)
    limit = c.size(cfg.max_context_tokens) if cfg.max_context_tokens is not None else None
    if F is None or M is None or (cfg.max_context_tokens is not None and limit is None):
        return est(cfg.name, cfg.kind, 0, None, None, None, 0, None, notes=[NEEDS_POOL])
    prompts = [F + (k - 1) * (M + Out) for k in range(1, cfg.rounds + 1)]
    if limit is not None:
        prompts = [x for x in prompts if x + Out <= limit]
    C, R = cfg.clients, len(prompts)
    if not R:
        return est(
            cfg.name, cfg.kind, 0, 0, 0, 0, 0, 0.0, ["the first round is over max_context_tokens: nothing is sent"]
        )
    sent = C * sum(prompts) * r
    fresh = C * (F + (R - 1) * (M + Out)) * r  # every history cached: each round computes its new turn
    conversations = C * (prompts[-1] + Out)
    host_ok, warn = c.host_window("all conversations", conversations)
    computed = fresh if not c.evicted(conversations) else sent
    expected = fresh if (host_ok or not c.evicted(conversations)) else sent
    if cfg.client_rate is not None:  # rounds due on the client's clock: the serving overlaps it
        clock, idle = ((R - 1) / cfg.client_rate + cfg.start_spread_s) * r, 0.0
    else:  # a think time starts when the answer came: it adds to the serving
        clock, idle = cfg.start_spread_s * r, (R - 1) * cfg.think_time_s * r
    return est(
        cfg.name,
        cfg.kind,
        C * R * r,
        sent,
        computed,
        expected,
        C * R * Out * r,
        c.decode_s(R * r * (Out - 1)),  # the clients decode together, round after round
        c.too_long(prompts[-1]) + warn,
        conversations,
        clock_s=clock,
        idle_s=idle,
    )


KIND = WorkloadKind(
    config=MultiTurnClients,
    estimate=estimate,
    round_of=round_of,
    run=run,
    derived=(
        Derived(
            "later_rounds_cached_fraction",
            "fraction",
            True,
            "mean cached share of rounds >= 2",
            _later_mean("cached_fraction"),
            compared=True,
        ),
        Derived(
            "later_rounds_host_fraction",
            "fraction",
            True,
            "mean host-tier share of rounds >= 2",
            _later_mean("host_hit_fraction"),
        ),
        Derived(
            "first_host_round",
            "round",
            True,
            "first round served more from the host tier than from the GPU",
            first_host_round,
        ),
        Derived("ttft_growth", "ratio", False, "TTFT p50 of the last round / of the first", ttft_growth),
    )
    + LAG_DERIVED,
    report_rows=tuple(
        ReportRow(
            f"round {k} host-tier share ({{workload}})",
            "",
            PhaseStat(f"round{k}", "host_hit_fraction", "mean"),
            True,
            note="prompt tokens loaded back from host memory",
        )
        for k in range(1, ROUND_ROWS + 1)
    )
    + (
        ReportRow(
            "later rounds cached share ({workload})",
            "",
            "later_rounds_cached_fraction",
            True,
            note="rounds >= 2, any tier",
        ),
        ReportRow(
            "first host-tier round ({workload})",
            "",
            "first_host_round",
            True,
            note="where conversations fell out of the GPU pool",
        ),
    )
    + LAG_ROWS,
    tier_hit_phases=True,
    phase_figures=phase_figures,
)

"""open_loop: requests arrive on a clock, not when earlier ones finish — how production traffic
meets a server, and how sglang's bench_serving / vLLM's ``bench serve`` load it.

Arrivals (`harness.workloads.arrivals`): Poisson, gamma (``burstiness``) or constant gaps at
``rate`` requests/s, optionally capped at ``max_concurrency`` in flight; ``max_concurrency``
alone is a closed loop at that concurrency. Each load point runs ``duration_s``; requests due in
its first ``warmup_s`` and last ``cooldown_s`` are sent but left out of the figures. A list under
``rate`` (or ``max_concurrency``) is a sweep: one phase per value, ``rate_4``, ``rate_8``, ... (or
``conc_1``, ...), in the order written, so one variant yields a latency-vs-load curve.

Prompts: ``prompt_tokens`` seeded ids each, of which the first ``prefix_tokens`` are one of
``prefixes`` shared prefixes (a system prompt; round robin), the rest fresh per request;
``output_tokens`` each (``ignore_eos``). A prompt without a shared prefix is random ids (two
share their first token with probability 1/vocab: no reuse worth a page).

Per phase (``figures`` of its summary): schedule lag (`arrivals.lag_figures`: a phase whose p99
lag is over ``lag_limit_ms`` is client-bound, and the run says so on the console), the achieved
send rate, and with an ``slo`` its attainment and goodput (`harness.workloads.slo`). Derived:
the sweep's knee (``knee_rate`` / ``knee_concurrency``, compared), the best goodput (compared),
the SLO fractions, the worst schedule lag and ``client_bound``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from pydantic import model_validator

from harness.spec.errors import field_error
from harness.spec.numbers import WEEK_S, count, seconds, tokens
from harness.spec.values import TokenSize, TokenSizeT
from harness.store.records import RequestRecord
from harness.workloads.arrivals import CLOCK_DERIVED, CLOCK_ROWS, Load, Outgoing, point_figures, run_point
from harness.workloads.config import WorkloadConfig
from harness.workloads.context import WorkloadContext, WorkloadScope
from harness.workloads.estimating import NEEDS_POOL, NEEDS_SPEED, EstimateContext, WorkEstimate, est, point_requests
from harness.workloads.kind import WorkloadKind
from harness.workloads.prompts import derive_seed
from harness.workloads.slo import SLOFields


class OpenLoop(Load, SLOFields, WorkloadConfig):
    """Synthetic prompts on a clock; a list under ``rate`` or ``max_concurrency`` is a sweep."""

    kind: Literal["open_loop"]
    duration_s: seconds(0.01, WEEK_S) = 30.0  # each load point
    prompt_tokens: TokenSizeT = TokenSize(tokens=1000)
    prefix_tokens: TokenSizeT | None = None  # the shared part of each prompt (null: none)
    prefixes: count("prefixes") = 1  # distinct shared prefixes, round robin
    output_tokens: tokens() = 64

    @model_validator(mode="after")
    def _prefix_fits(self):
        p, q = self.prefix_tokens, self.prompt_tokens
        if p is not None and p.tokens is not None and q.tokens is not None and p.tokens >= q.tokens:
            raise field_error(
                f"prefix_tokens ({p.tokens}) must be shorter than prompt_tokens ({q.tokens}): "
                "it is the shared part of the prompt"
            )
        return self

    def new_tokens(self) -> int:
        return self.output_tokens

    def longest_request_tokens(self, pool_tokens: int) -> int:
        return self.prompt_tokens.resolve(pool_tokens) + self.output_tokens


async def run(ctx: WorkloadContext, cfg: OpenLoop) -> None:
    w = WorkloadScope(ctx, cfg)
    prompt = ctx.tokens(cfg.prompt_tokens)
    shared = ctx.tokens(cfg.prefix_tokens) if cfg.prefix_tokens is not None else 0
    if shared >= prompt:
        raise ValueError(f"prefix_tokens ({shared}) must be shorter than prompt_tokens ({prompt}) on this server")
    prefixes = w.prompts(cfg.prefixes, shared, "prefixes") if shared else []
    for point in cfg.points():
        phase = point.phase

        def build(i: int, phase: str = phase) -> Outgoing:
            head = prefixes[i % len(prefixes)] if prefixes else []
            ids = ctx.prompts.extend(head, prompt - len(head), key=(ctx.variant, w.name, ctx.repeat, phase, i))
            return Outgoing(ids, cfg.output_tokens)

        await run_point(w, cfg, point, build, seed=derive_seed(ctx.seed, w.name, ctx.repeat, phase))


def phase_figures(cfg: OpenLoop | None, phase: str, records: Sequence[RequestRecord]) -> dict[str, Any]:
    """A load point's figures (`arrivals.point_figures`); goodput over ``duration_s`` less the
    warm-up and cool-down."""
    return point_figures(cfg, phase, records, cfg.points() if cfg else [], cfg.measured_window_s() if cfg else None)


def estimate(cfg: OpenLoop, c: EstimateContext) -> WorkEstimate:
    """Each load point runs ``duration_s``: ``rate`` x duration requests (a closed loop, or a cap
    the stated speeds cannot keep up with: what those speeds serve). A request computes its own
    part; the shared prefixes once each while they fit the GPU pool (else every time)."""
    r = c.repeats
    L = c.size(cfg.prompt_tokens)
    shared = c.size(cfg.prefix_tokens) if cfg.prefix_tokens is not None else 0
    if L is None or shared is None:
        return est(cfg.name, cfg.kind, 0, None, None, None, 0, None, notes=[NEEDS_POOL])
    prefixes_fit = not shared or not c.evicted(cfg.prefixes * shared + L)
    own = L - shared if prefixes_fit else L
    n, warn = 0, []
    for point in cfg.points():
        k, w = point_requests(point.rate, point.cap, cfg.duration_s, own, cfg.output_tokens, c)
        warn += [f"{point.phase}: {m}" for m in w]
        if k is None:
            clock = len(cfg.points()) * cfg.duration_s * r
            return est(cfg.name, cfg.kind, 0, None, None, None, 0, None, warn, clock_s=clock, notes=[NEEDS_SPEED])
        n += k
    sent = n * L * r
    computed = (n * own + (cfg.prefixes * shared if prefixes_fit else 0)) * r
    clock = len(cfg.points()) * cfg.duration_s * r
    return est(
        cfg.name,
        cfg.kind,
        n * r,
        sent,
        computed,
        computed,
        n * r * cfg.output_tokens,
        None if c.decode_tok_s is None else 0.0,  # decoding overlaps the clock (within clock_s)
        c.too_long(L) + warn,
        clock_s=clock,
    )


KIND = WorkloadKind(
    config=OpenLoop,
    estimate=estimate,
    load_points=True,
    run=run,
    derived=CLOCK_DERIVED,
    report_rows=CLOCK_ROWS,
    phase_figures=phase_figures,
)

"""Requests on a clock, for the workload kinds that send open loop (not one after another): when
each request is due, a cap on requests in flight, the sender that keeps the schedule, the load
points of a sweep, and how late each phase's requests went out.

- `Load`: the fields such a kind shares (``arrivals``, ``rate``, ``max_concurrency``,
  ``duration_s``, warm-up and cool-down windows, ``lag_limit_ms``); a list under ``rate`` or
  ``max_concurrency`` is a sweep: one phase per value (`point_phase`: ``rate_4``, ``rate_0p5``,
  ``conc_8``), so one variant yields a latency-vs-load curve.
- `arrival_offsets_ns`: Poisson, gamma (``burstiness`` = the gamma shape: 1 is Poisson, below 1
  burstier, above 1 more even; the mean rate stays ``rate``, as vLLM's ``--burstiness``) or
  constant gaps, seeded.
- `send_on_clock`: one task per request (`harness.server.schedule.send_schedule`: started `LEAD_NS`
  before its instant), built then and written at its instant (`WorkloadScope.send(at_ns=...)` →
  `StreamingClient.generate_at`), so the record carries its ``scheduled_ns`` and its actual
  ``sent_ns``. With a cap (`Slots`), a request that finds every slot taken waits, first come
  first served, and is due when a slot frees (the finished request's last byte): its
  ``scheduled_ns`` is then that instant, so the lag stays the client's own lateness and the wait
  shows as an achieved rate below the offered one.
- `send_closed_loop`: ``max_concurrency`` without a rate: that many senders, each sending its next
  request when its previous one finished (due at the previous one's last byte), for ``duration_s``.
- Both record a load point's requests when the point is over (`record_all`), not as each
  finishes: a row is fsynced on the event loop as it is recorded, which would delay the sends
  due meanwhile. A harness killed mid-point loses that point's rows (its variant reruns whole).
- `lag_figures`: per phase, sent − scheduled over the measured requests (p50/p99/max ms) and
  ``client_bound`` when p99 is over ``lag_limit_ms`` (default 1 ms): the client, not the server,
  then set the load, and every latency figure of that phase is suspect. The kinds' derived
  ``schedule_lag_p99_ms`` and ``client_bound`` (`LAG_DERIVED`) carry it to the summary's
  headline figures, and the workload logs a warning.

Requests scheduled in the warm-up window (the first ``warmup_s``) or the cool-down window (the
last ``cooldown_s``) are sent and recorded with ``warmup: true``: the summary leaves them out of
every metric and counts them in ``n_warmup``.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import math
import random
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import model_validator

from harness.server.schedule import LAG_LIMIT_MS, schedule_lag, send_schedule, sleep_until_ns
from harness.spec.errors import field_error
from harness.spec.numbers import DAY_S, WEEK_S, count, one_or_list, ranged, seconds
from harness.spec.values import ScenarioModel
from harness.store.records import RequestRecord
from harness.workloads.context import StopSending, WorkloadScope
from harness.workloads.kind import Derived, PhaseSummaries, ReportRow
from harness.workloads.slo import SLO_DERIVED, SLO_ROWS, slo_figures

log = logging.getLogger(__name__)

START_NS = 20_000_000  # a closed loop's clock starts this long after it is planned
MAX_POINTS = 32  # values of one sweep
MAX_REQUESTS_PER_POINT = 200_000  # rate x duration beyond this is a typo, not a benchmark

Process = Literal["poisson", "gamma", "constant"]
Axis = Literal["rate", "conc"]


# ------------------------------------------------------------------------------ load points


@dataclass(frozen=True)
class Point:
    """One load point of a sweep: its axis and value (what the phase is named after), the
    arrival rate (None: closed loop, or a trace's own clock) and the cap on requests in flight
    (None: none). ``label``: a phase name of its own (a trace's one point)."""

    axis: Axis
    value: float
    rate: float | None
    cap: int | None
    label: str | None = None

    @property
    def phase(self) -> str:
        return self.label or point_phase(self.axis, self.value)


def _fmt(value: float) -> str:
    text = f"{value:g}" if float(value) != int(value) else str(int(value))
    return text.replace(".", "p").replace("-", "m").replace("+", "")  # 0.5 -> 0p5, 1e-05 -> 1em05


def point_phase(axis: str, value: float) -> str:
    """The phase of a load point: ``rate_4``, ``rate_0p5`` (no '.': a check's path splits on it),
    ``conc_8``."""
    return f"{axis}_{_fmt(value)}"


def parse_point_phase(phase: str) -> tuple[str, float] | None:
    """(axis, value) of a `point_phase` name; None for any other phase."""
    axis, _, text = phase.partition("_")
    if axis not in ("rate", "conc") or not text:
        return None
    try:
        return axis, float(text.replace("p", ".").replace("m", "-"))
    except ValueError:
        return None


def _one_or_list(v: float | list | None) -> list:
    return [] if v is None else list(v) if isinstance(v, list) else [v]


Rate = ranged(float, 0.0001, 1e6, "requests/s")
Concurrency = count("requests in flight")
LagLimit = ranged(float, 0.001, 60_000, "ms")  # p99 schedule lag


class Load(ScenarioModel):
    """Fields of a workload that sends on a clock (mixed into its config)."""

    arrivals: Process = "poisson"
    burstiness: ranged(float, 0.001, 1000, "gamma shape (no unit)") = 1.0  # gamma shape, with arrivals: gamma
    rate: one_or_list(Rate) | None = None  # requests/s; a list: one phase per rate
    max_concurrency: one_or_list(Concurrency) | None = None  # cap on requests in flight; a list: a sweep
    duration_s: seconds(0.01, WEEK_S) | None = 30.0  # each load point
    warmup_s: seconds(0, DAY_S) = 0.0  # sent first, left out of the figures
    cooldown_s: seconds(0, DAY_S) = 0.0  # sent last, left out of the figures
    lag_limit_ms: LagLimit = LAG_LIMIT_MS  # p99 schedule lag beyond this: the phase is client-bound

    @model_validator(mode="after")
    def _check_load(self):
        rates, caps = _one_or_list(self.rate), _one_or_list(self.max_concurrency)
        for name, values, given in (("rate", rates, self.rate), ("max_concurrency", caps, self.max_concurrency)):
            if len(values) > MAX_POINTS:
                raise field_error(f"{name}: at most {MAX_POINTS} sweep points, got {len(values)}")
            if len(set(values)) != len(values):
                raise field_error(f"{name}: a sweep's values must differ, got {values}")
            if isinstance(given, list) and not values:
                raise field_error(f"{name}: an empty list sweeps nothing")
        if isinstance(self.rate, list) and isinstance(self.max_concurrency, list):
            raise field_error("sweep one axis at a time: rate or max_concurrency, not both as lists")
        if self.arrivals != "trace":
            if not rates and not caps:
                raise field_error("give a rate (requests/s, open loop) or max_concurrency (closed loop)")
            if not rates and self.duration_s is None and self.cooldown_s:
                raise field_error("a closed loop (max_concurrency without rate) has a cool-down only with duration_s")
        if self.burstiness != 1.0 and self.arrivals != "gamma":
            raise field_error(f"burstiness shapes gamma arrivals; with arrivals: {self.arrivals} it would be ignored")
        if self.duration_s is not None:
            if self.warmup_s + self.cooldown_s >= self.duration_s:
                raise field_error(
                    f"warmup_s + cooldown_s ({self.warmup_s:g} + {self.cooldown_s:g}) leave "
                    f"nothing of duration_s {self.duration_s:g} to measure"
                )
            most = max(rates, default=0) * self.duration_s
            if most > MAX_REQUESTS_PER_POINT:
                raise field_error(
                    f"rate x duration_s is {most:,.0f} requests per point, more than {MAX_REQUESTS_PER_POINT:,}"
                )
        return self

    def points(self) -> list[Point]:
        """The load points in the order written (one for a scalar rate and cap)."""
        rates, caps = _one_or_list(self.rate), _one_or_list(self.max_concurrency)
        if isinstance(self.max_concurrency, list):
            rate = rates[0] if rates else None
            return [Point("conc", float(c), rate, int(c)) for c in caps]
        cap = int(caps[0]) if caps else None
        if not rates:
            return [Point("conc", float(cap), None, cap)] if cap is not None else []
        return [Point("rate", float(r), float(r), cap) for r in rates]

    def measured_window_s(self, span_s: float | None = None) -> float | None:
        """Seconds of a point's clock whose requests are measured: duration (or, without one,
        ``span_s``, the requests' own span) less the warm-up and cool-down windows."""
        total = self.duration_s if self.duration_s is not None else span_s
        if total is None:
            return None
        left = total - self.warmup_s - self.cooldown_s
        return left if left > 0 else None


# --------------------------------------------------------------------------------- arrivals


def arrival_offsets_ns(
    process: Process,
    rate_per_s: float,
    *,
    seed: int,
    duration_s: float | None = None,
    limit: int | None = None,
    burstiness: float = 1.0,
) -> list[int]:
    """Send offsets (ns from the point's start; the first at 0) at mean rate ``rate_per_s``, until
    ``duration_s`` or ``limit`` offsets, whichever comes first (at least one of them): constant
    gaps, exponential gaps (Poisson) or gamma gaps of shape ``burstiness``. Seeded."""
    if rate_per_s <= 0 or not math.isfinite(rate_per_s):
        raise ValueError(f"rate_per_s must be a positive number, not {rate_per_s!r}")
    if duration_s is None and limit is None:
        raise ValueError("arrival_offsets_ns needs duration_s or limit")
    end = math.inf if duration_s is None else duration_s * 1e9
    most = MAX_REQUESTS_PER_POINT if limit is None else min(limit, MAX_REQUESTS_PER_POINT)
    gap = 1e9 / rate_per_s
    rng = random.Random(seed)
    out: list[int] = []
    t = 0.0
    while t < end and len(out) < most:
        out.append(round(t))
        if process == "constant":
            t = len(out) * gap
        elif process == "poisson":
            t += rng.expovariate(1.0) * gap
        else:
            t += rng.gammavariate(burstiness, 1.0 / burstiness) * gap
    return out


@dataclass(frozen=True)
class Planned:
    """One request of a load point: its index, its offset on the point's clock, and whether it
    falls in the warm-up or cool-down window (recorded with ``warmup: true``)."""

    index: int
    offset_ns: int
    warmup: bool


def plan_window(
    offsets_ns: Sequence[int], warmup_s: float, cooldown_s: float, end_ns: int | None = None
) -> list[Planned]:
    """The offsets as `Planned` requests: those before ``warmup_s`` or at or after
    ``end − cooldown_s`` are warm-up (``end_ns``: the clock's end, default just past the last
    offset)."""
    end = end_ns if end_ns is not None else (offsets_ns[-1] + 1 if offsets_ns else 0)
    warm, cool = warmup_s * 1e9, end - cooldown_s * 1e9
    return [Planned(i, off, off < warm or off >= cool) for i, off in enumerate(offsets_ns)]


# ------------------------------------------------------------------------------------ sending


class Slots:
    """At most ``cap`` requests in flight. A request that finds none free waits, first come first
    served, and learns the instant the slot it gets was freed."""

    def __init__(self, cap: int) -> None:
        if cap < 1:
            raise ValueError(f"cap must be >= 1, got {cap}")
        self.free = cap
        self._waiters: deque[asyncio.Future] = deque()

    async def acquire(self) -> int | None:
        """None when a slot was free at once; else the `perf_counter_ns` instant it was freed."""
        if self.free > 0 and not self._waiters:
            self.free -= 1
            return None
        fut = asyncio.get_running_loop().create_future()
        self._waiters.append(fut)
        try:
            return await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():
                self.release(fut.result())  # handed a slot while being cancelled: pass it on
            elif fut in self._waiters:  # (a release may have dropped it already)
                self._waiters.remove(fut)
            raise

    def release(self, at_ns: int) -> None:
        """Free a slot at ``at_ns``: the next waiter gets it, else it is free."""
        while self._waiters:
            fut = self._waiters.popleft()
            if not fut.done():
                fut.set_result(at_ns)
                return
        self.free += 1


@dataclass(frozen=True)
class Outgoing:
    """What one request sends."""

    input_ids: list[int]
    max_new_tokens: int


Build = Callable[[int], Outgoing]  # a load point's index-th request


def freed_at(rec: RequestRecord | None) -> int:
    """When a finished request freed its slot (and its client learnt the answer): its last byte,
    else now."""
    if rec is not None and rec.done_ns is not None:
        return rec.done_ns
    return time.perf_counter_ns()


def record_all(w: WorkloadScope, records: Sequence[RequestRecord]) -> None:
    """Record a load point's requests once it is over. They are sent with ``defer``: recording one
    appends and fsyncs its row on the event loop (1-8 ms on a loaded disk), which would hold up the
    sends due meanwhile — the schedule is kept first, the rows written after."""
    for rec in records:
        w.record(rec)


async def send_on_clock(
    w: WorkloadScope,
    phase: str,
    plan: Sequence[Planned],
    build: Build,
    *,
    cap: int | None = None,
    start_ns: int | None = None,
) -> list[RequestRecord]:
    """Send ``plan`` as phase ``phase``, each request at ``start + offset``
    (`harness.server.schedule.send_schedule`: built `harness.server.schedule.LEAD_NS` before its instant, in
    time order); with ``cap``, at most that many in flight. Returns the records when every
    request sent has finished, and records them then (`record_all`); raises `StopSending` once
    the workload's abort signal fired (nothing more is sent)."""
    slots = Slots(cap) if cap is not None else None
    abort = w.ctx.abort
    # each record as its request finishes, by its place in the plan: a signal (or any error) that
    # ends the schedule early still leaves every answered request to be recorded
    finished: dict[int, RequestRecord] = {}

    async def one(due: int, k: int, p: Planned) -> RequestRecord | None:
        if abort.fired:
            return None
        out = build(p.index)
        rec = None
        if slots is not None:
            await sleep_until_ns(due)  # its turn in the queue comes at its instant
            freed = await slots.acquire()
            due = due if freed is None else max(due, freed)
        try:
            rec = await w.send(
                phase,
                p.index,
                out.input_ids,
                max_new_tokens=out.max_new_tokens,
                ignore_eos=True,
                warmup=p.warmup,
                at_ns=due,
                defer=True,
            )
        except StopSending:
            return None
        finally:
            if slots is not None:
                slots.release(freed_at(rec))
        finished[k] = rec
        return rec

    try:
        await send_schedule(one, [(p.offset_ns, (k, p), {}) for k, p in enumerate(plan)], start_ns=start_ns)
    finally:
        sent = [finished[k] for k in sorted(finished)]
        record_all(w, sent)
    if abort.fired:
        raise StopSending(abort.reason)
    return sent


async def send_closed_loop(
    w: WorkloadScope,
    phase: str,
    concurrency: int,
    duration_s: float | None,
    build: Build,
    *,
    warmup_s: float = 0.0,
    cooldown_s: float = 0.0,
    limit: int | None = None,
    start_ns: int | None = None,
) -> list[RequestRecord]:
    """``concurrency`` senders for ``duration_s``: each sends its next request when its previous
    one finished (due at that one's last byte; the next request is built while the previous is in
    flight), until the duration is over or ``limit`` requests were sent (one of the two must be
    given). Requests due in the first ``warmup_s`` or the last ``cooldown_s`` are warm-up."""
    if duration_s is None and limit is None:
        raise ValueError("a closed loop needs duration_s or a limit")
    start = time.perf_counter_ns() + START_NS if start_ns is None else start_ns
    end = start + round(duration_s * 1e9) if duration_s is not None else math.inf
    warm_end = start + round(warmup_s * 1e9)
    cool_start = end - round(cooldown_s * 1e9) if duration_s is not None else math.inf
    counter = itertools.count()
    sent: list[RequestRecord] = []

    def claim() -> tuple[int, Outgoing] | None:
        i = next(counter)
        return None if limit is not None and i >= limit else (i, build(i))

    async def sender() -> None:
        due, nxt = start, claim()
        while nxt is not None and due < end:
            i, out = nxt
            sending = asyncio.ensure_future(
                w.send(
                    phase,
                    i,
                    out.input_ids,
                    max_new_tokens=out.max_new_tokens,
                    ignore_eos=True,
                    warmup=due < warm_end or due >= cool_start,
                    at_ns=due,
                    defer=True,
                )
            )
            await asyncio.sleep(0)  # the request is written in the sending task's first step
            nxt = claim()
            rec = await sending
            sent.append(rec)
            due = freed_at(rec)

    try:
        await w.gather(sender() for _ in range(concurrency))
    finally:
        record_all(w, sent)
    if w.ctx.abort.fired:
        raise StopSending(w.ctx.abort.reason)
    return sorted(sent, key=lambda r: r.index)


async def run_point(
    w: WorkloadScope,
    load: Load,
    point: Point,
    build: Build,
    *,
    seed: int,
    limit: int | None = None,
    offsets_ns: Sequence[int] | None = None,
) -> list[RequestRecord]:
    """One load point of ``load`` as phase ``point.phase`` (the sampler's phase is set here):
    at ``offsets_ns`` when given (a trace's own clock), else open loop at the point's rate for
    ``duration_s`` (or ``limit`` requests), capped when it has a cap, or closed loop at its
    concurrency. Warns on the console when the phase was client-bound. Returns its records."""
    w.phase(point.phase)
    if offsets_ns is None and point.rate is None:
        if point.cap is None:
            raise ValueError("a closed loop needs max_concurrency")
        sent = await send_closed_loop(
            w,
            point.phase,
            point.cap,
            load.duration_s,
            build,
            warmup_s=load.warmup_s,
            cooldown_s=load.cooldown_s,
            limit=limit,
        )
    else:
        if offsets_ns is None:
            assert point.rate is not None and load.arrivals != "trace"
            offsets_ns = arrival_offsets_ns(
                load.arrivals,
                point.rate,
                seed=seed,
                duration_s=load.duration_s,
                limit=limit,
                burstiness=load.burstiness,
            )
        end = round(load.duration_s * 1e9) if load.duration_s is not None else None
        sent = await send_on_clock(
            w, point.phase, plan_window(offsets_ns, load.warmup_s, load.cooldown_s, end), build, cap=point.cap
        )
    warn_if_client_bound(w.name, point.phase, sent, load.lag_limit_ms)
    return sent


# ------------------------------------------------------------------------------------ figures


def lag_figures(records: Sequence[RequestRecord], limit_ms: float = LAG_LIMIT_MS) -> dict[str, Any]:
    """Schedule lag of a phase's measured requests that carry a schedule (pure): n, p50/p99/max
    ms, the limit and ``client_bound`` (p99 over the limit); the achieved send rate (each
    repeat's sends over its own span, pooled: the time between two repeats is no load)."""
    measured = [r for r in records if not r.warmup]
    lag = schedule_lag(measured, limit_ms=limit_ms)
    gaps = spans = 0.0
    for rep in sorted({r.repeat for r in measured}):
        sent = sorted(r.sent_ns for r in measured if r.scheduled_ns is not None and r.repeat == rep)
        if len(sent) > 1 and sent[-1] > sent[0]:
            gaps, spans = gaps + len(sent) - 1, spans + (sent[-1] - sent[0]) / 1e9
    achieved = gaps / spans if spans else None
    return {
        "lag_n": lag.n,
        "lag_p50_ms": lag.p50_ms,
        "lag_p99_ms": lag.p99_ms,
        "lag_max_ms": lag.max_ms,
        "lag_limit_ms": lag.limit_ms,
        "client_bound": lag.client_bound if lag.n else None,
        "achieved_rps": achieved,
    }


def point_figures(
    cfg: Any, phase: str, records: Sequence[RequestRecord], points: Sequence[Point], window_s: float | None
) -> dict[str, Any]:
    """A load point's ``figures`` (a clocked kind's ``phase_figures``): its sweep axis and value
    (from the phase's name), schedule lag and achieved rate, the offered rate and, with an
    ``slo``, its attainment and goodput over ``window_s`` (one repeat's window: a phase holding
    several repeats' requests is measured over as many windows). ``cfg`` None (a summary made without
    the config): the schedule figures only."""
    out: dict[str, Any] = {}
    parsed = parse_point_phase(phase)
    if parsed is not None:
        out["sweep_axis"], out["sweep_value"] = parsed
    if cfg is None:
        return {**out, **lag_figures(records)}
    out.update(lag_figures(records, cfg.lag_limit_ms))
    out["offered_rps"] = next((p.rate for p in points if p.phase == phase), None)
    repeats = len({r.repeat for r in records if not r.warmup}) or 1  # the phase pools the repeats' windows
    out.update(slo_figures(records, cfg.slo, cfg.slo_percentile, window_s * repeats if window_s else None))
    return out


def warn_if_client_bound(workload: str, phase: str, records: Sequence[RequestRecord], limit_ms: float) -> None:
    """Log (a warning: the console shows it) a phase whose client fell behind its schedule."""
    lag = schedule_lag([r for r in records if not r.warmup], limit_ms=limit_ms)
    if lag.client_bound:
        log.warning(
            "%s/%s is CLIENT-BOUND: %s; the client, not the server, set this phase's load, so its "
            "latency figures are suspect",
            workload,
            phase,
            lag.line(),
        )


def _figures(phases: PhaseSummaries) -> list[dict]:
    return [p["figures"] for p in phases.values() if isinstance((p or {}).get("figures"), dict)]


def worst_lag_p99_ms(phases: PhaseSummaries) -> float | None:
    """The highest p99 schedule lag over the workload's phases."""
    values = [f["lag_p99_ms"] for f in _figures(phases) if f.get("lag_p99_ms") is not None]
    return max(values) if values else None


def any_client_bound(phases: PhaseSummaries) -> float | None:
    """1.0 when a phase was client-bound, 0.0 when none was, None when nothing was scheduled."""
    flags = [f["client_bound"] for f in _figures(phases) if f.get("client_bound") is not None]
    return (1.0 if any(flags) else 0.0) if flags else None


LAG_DERIVED = (
    Derived(
        "schedule_lag_p99_ms",
        "ms",
        False,
        "p99 of sent − scheduled over the measured requests, the worst phase",
        worst_lag_p99_ms,
    ),
    Derived(
        "client_bound",
        "flag",
        False,
        "1 when a phase's p99 schedule lag was over lag_limit_ms: the client set the load, "
        "the latency figures are suspect",
        any_client_bound,
    ),
)
LAG_ROWS = (
    ReportRow(
        "schedule lag p99 ({workload})",
        "ms",
        "schedule_lag_p99_ms",
        False,
        note="sent − scheduled, worst phase; over lag_limit_ms: client-bound",
    ),
)
CLOCK_DERIVED = SLO_DERIVED + LAG_DERIVED  # what a kind with load points and an slo derives
CLOCK_ROWS = SLO_ROWS + LAG_ROWS

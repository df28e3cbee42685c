"""The load shapes of a run: latency and goodput against the offered and achieved load, the
sweep's knee, per-round conversations, and the schedule-lag warnings (plain data; no drawing).

One job: shaping what the report's "load" section and headline show, from a `RunView`'s stored
summaries. Which workloads have which shape is each kind's declaration: ``load_points`` (its
phases are a sweep's load points; their ``figures`` carry ``sweep_axis``/``sweep_value``,
``offered_rps``, ``achieved_rps``, schedule lag and SLO attainment) and ``round_of`` (its phases
are conversation rounds). Percentiles are the phase statistics of the summary (p50, p90, p95,
p99; a run from before p95 has none: shown as missing, never made up).

Schedule lag (`lag_warnings`): a phase whose p99 send lag is over `harness.server.schedule.LAG_LIMIT_MS`
(1 ms) or that its workload flagged client-bound (p99 over its own ``lag_limit_ms``) — the client,
not the server, then set that phase's load, and its latency figures are suspect.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from harness.report.view import RunView
from harness.server.schedule import LAG_LIMIT_MS
from harness.store.stats import PERCENTILES
from harness.store.summary import PhaseSummary, Stats, WorkloadSummary

CURVE_METRICS = (("ttft_ms", "TTFT"), ("itl_ms", "ITL"), ("tpot_ms", "TPOT"))
SLO_LIMITS = ("ttft_ms", "tpot_ms", "e2e_ms")


@dataclass
class CurvePoint:
    """One load point of one variant: where it sat (offered / achieved) and what it measured."""

    phase: str
    axis: str | None  # rate | conc | None (a trace's own clock)
    value: float | None  # the swept value (rate or concurrency)
    offered_rps: float | None
    achieved_rps: float | None
    n: int
    latency: dict[str, dict[str, float | None]]  # metric -> {p50, p90, p95, p99}
    goodput_rps: float | None = None
    slo_met_fraction: float | None = None
    met: dict[str, float | None] = field(default_factory=dict)  # SLO metric -> share meeting it
    slo_percentile_met: bool | None = None
    lag_p99_ms: float | None = None
    client_bound: bool | None = None


@dataclass
class LoadCurves:
    """One workload's sweep: its points per variant (in load order), its knee and SLO."""

    workload: str
    axis: str | None
    points: dict[str, list[CurvePoint]]
    knee: dict[str, float | None]  # variant -> knee (the derived knee_rate / knee_concurrency)
    goodput: dict[str, float | None]  # variant -> best point's goodput
    slo: dict[str, float]  # metric -> limit (ms); {} without an slo
    slo_percentile: int | None


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _workload_entry(view: RunView, workload: str) -> Mapping[str, Any]:
    """The workload's entry of the stored scenario (parsed YAML), {} when absent."""
    for w in view.scenario.get("workloads") or []:
        if isinstance(w, Mapping) and str(w.get("name") or w.get("kind")) == workload:
            return w
    return {}


def slo_of(view: RunView, workload: str) -> tuple[dict[str, float], int | None]:
    """({metric: limit ms}, the knee's percentile) of a workload's ``slo`` in the stored scenario."""
    entry = _workload_entry(view, workload)
    slo = entry.get("slo") if isinstance(entry.get("slo"), Mapping) else {}
    limits = {m: float(slo[m]) for m in SLO_LIMITS if _num(slo.get(m)) is not None}
    pct = entry.get("slo_percentile", 90 if limits else None)
    return limits, int(pct) if isinstance(pct, int) else None


def _percentiles(stats: Stats | None) -> dict[str, float | None]:
    return {p: _num(stats[p]) if stats is not None else None for p in PERCENTILES}


def _point(phase: str, p: PhaseSummary) -> CurvePoint:
    f = p.figures
    metrics = p.metrics
    return CurvePoint(
        phase=phase,
        axis=f.get("sweep_axis"),
        value=_num(f.get("sweep_value")),
        offered_rps=_num(f.get("offered_rps")),
        achieved_rps=_num(f.get("achieved_rps")),
        n=p.n,
        latency={m: _percentiles(metrics.get(m)) for m, _ in CURVE_METRICS},
        goodput_rps=_num(f.get("goodput_rps")),
        slo_met_fraction=_num(f.get("slo_met_fraction")),
        met={m: _num(f.get(f"{m}_slo_met_fraction")) for m in SLO_LIMITS if f.get(f"{m}_slo_met_fraction") is not None},
        slo_percentile_met=f.get("slo_percentile_met"),
        lag_p99_ms=_num(f.get("lag_p99_ms")),
        client_bound=f.get("client_bound"),
    )


def _workload(view: RunView, name: str, workload: str) -> WorkloadSummary | None:
    summary = view.summary(name)
    return summary.workload(workload) if summary is not None else None


def _phases(view: RunView, name: str, workload: str) -> Mapping[str, PhaseSummary]:
    w = _workload(view, name, workload)
    return w.phases if w is not None else {}


def _derived(view: RunView, name: str, workload: str) -> Mapping[str, float | None]:
    w = _workload(view, name, workload)
    return w.derived if w is not None else {}


def load_curves(view: RunView) -> list[LoadCurves]:
    """Every workload whose kind declares ``load_points``: its points per variant that ran ok,
    ordered by the swept value (a trace's one point as it is)."""
    out = []
    for wl in view.workload_names():
        kind = view.kind(wl)
        if kind is None or not kind.load_points:
            continue
        points: dict[str, list[CurvePoint]] = {}
        knees: dict[str, float | None] = {}
        goodput: dict[str, float | None] = {}
        axis = None
        for n in view.names:
            if not view.ok(n):
                continue
            pts = [_point(ph, p) for ph, p in _phases(view, n, wl).items() if p.figures]
            if not pts:
                continue
            pts.sort(key=lambda c: (c.value is None, c.value or 0.0))
            points[n] = pts
            axis = axis or next((c.axis for c in pts if c.axis), None)
            d = _derived(view, n, wl)
            knees[n] = _num(d.get("knee_concurrency" if axis == "conc" else "knee_rate"))
            goodput[n] = _num(d.get("goodput_rps"))
        if points:
            limits, pct = slo_of(view, wl)
            out.append(LoadCurves(wl, axis, points, knees, goodput, limits, pct))
    return out


def headline(curves: list[LoadCurves]) -> list[dict[str, Any]]:
    """The knee and best goodput per sweep and variant, for the top of the page (sweeps with an
    SLO only: without one there is no knee)."""
    rows = []
    for c in curves:
        if not c.slo:
            continue
        unit = "req/s" if c.axis != "conc" else "in flight"
        for n, pts in c.points.items():
            lowest_missed = bool(pts) and pts[0].slo_percentile_met is False
            rows.append(
                {
                    "workload": c.workload,
                    "variant": n,
                    "knee": c.knee.get(n),
                    "unit": unit,
                    "axis": "rate" if c.axis != "conc" else "concurrency",
                    "percentile": c.slo_percentile,
                    "slo": ", ".join(f"{m.removesuffix('_ms').upper()} ≤ {v:g} ms" for m, v in c.slo.items()),
                    "goodput": c.goodput.get(n),
                    "why_none": "the lowest point already misses the SLO" if lowest_missed else "no point was judged",
                    "top": max((p.value for p in pts if p.value is not None), default=None),
                }
            )
    return rows


# ------------------------------------------------------------------------------------- rounds


@dataclass
class RoundSeries:
    """One conversation workload's rounds per variant: TTFT percentiles and cached tokens by tier."""

    workload: str
    rounds: list[int]
    ttft: dict[str, dict[str, list[float | None]]]  # variant -> percentile -> per round
    tiers: dict[str, dict[str, list[float]]]  # variant -> device|host|storage|computed -> per round
    host_share: dict[str, list[float | None]]  # variant -> host-tier share of prompt tokens per round
    first_host_round: dict[str, float | None]


def round_series(view: RunView) -> list[RoundSeries]:
    """Every workload whose kind declares ``round_of``: per round and variant that ran ok."""
    out = []
    for wl in view.workload_names():
        kind = view.kind(wl)
        if kind is None or kind.round_of is None:
            continue
        by_variant: dict[str, dict[int, PhaseSummary]] = {}
        for n in view.names:
            if not view.ok(n):
                continue
            rounds = {k: p for ph, p in _phases(view, n, wl).items() if (k := kind.round_of(ph)) is not None}
            if rounds:
                by_variant[n] = rounds
        if not by_variant:
            continue
        all_rounds = sorted({k for r in by_variant.values() for k in r})
        ttft: dict[str, dict[str, list[float | None]]] = {}
        tiers: dict[str, dict[str, list[float]]] = {}
        share: dict[str, list[float | None]] = {}
        for n, rounds in by_variant.items():
            ttft[n] = {
                p: [_num(rounds[k].stat("ttft_ms", p)) if k in rounds else None for k in all_rounds]
                for p in PERCENTILES
            }
            t: dict[str, list[float]] = {"device": [], "host": [], "storage": [], "computed": []}
            share[n] = []
            for k in all_rounds:
                h = rounds[k].hits if k in rounds else {}
                prompt = float(h.get("prompt_tokens") or 0)
                t["device"].append(float(h.get("device_tokens") or 0))
                t["host"].append(float(h.get("host_tokens") or 0))
                t["storage"].append(float(h.get("storage_tokens") or 0))
                t["computed"].append(max(0.0, prompt - float(h.get("cached_tokens") or 0)))
                share[n].append(float(h.get("host_tokens") or 0) / prompt if prompt else None)
            tiers[n] = t
        first = {n: _num(_derived(view, n, wl).get("first_host_round")) for n in by_variant}
        out.append(RoundSeries(wl, all_rounds, ttft, tiers, share, first))
    return out


# ---------------------------------------------------------------------------------- schedule lag


@dataclass
class LagWarning:
    variant: str
    workload: str
    phase: str
    lag_p99_ms: float | None
    limit_ms: float | None
    client_bound: bool


def _phase_figures(view: RunView, name: str) -> list[tuple[str, str, Mapping[str, Any]]]:
    """(workload, phase, its figures) of a variant's phases whose kind declares phase figures (as
    `harness.compare.curves` reads them: a phase without figures has none to show)."""
    summary = view.summary(name)
    return [
        (wl, ph, p.figures)
        for wl, w in (summary.measured if summary is not None else {}).items()
        for ph, p in w.phases.items()
        if p.figures
    ]


def lag_warnings(view: RunView) -> list[LagWarning]:
    """Phases (of variants that ran) whose p99 schedule lag is over 1 ms or that their workload
    flagged client-bound, in variant and workload order."""
    out = []
    for n in view.names:
        for wl, ph, f in _phase_figures(view, n):
            lag, bound = _num(f.get("lag_p99_ms")), f.get("client_bound") is True
            if bound or (lag is not None and lag > LAG_LIMIT_MS):
                out.append(LagWarning(n, wl, ph, lag, _num(f.get("lag_limit_ms")), bound))
    return out


def lag_series(view: RunView, name: str) -> tuple[list[str], dict[str, list[float | None]]]:
    """(phase labels, {"p50": ..., "p99": ...}) of a variant's scheduled phases' send lag (ms)."""
    labels: list[str] = []
    vals: dict[str, list[float | None]] = {"lag p50": [], "lag p99": []}
    for wl, ph, f in _phase_figures(view, name):
        if f.get("lag_n"):
            labels.append(f"{wl}/{ph}")
            vals["lag p50"].append(_num(f.get("lag_p50_ms")))
            vals["lag p99"].append(_num(f.get("lag_p99_ms")))
    return labels, vals

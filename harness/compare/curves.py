"""A sweep's curve compared point by point: for each workload whose kind declares ``load_points``,
the candidate's load points set against the baseline's at the same rate (or concurrency) —
pairwise only where both runs swept the same grid. Pure: summaries and metric rows in, rows out.

Each point carries both runs' latency percentiles (TTFT, ITL, TPOT at p50/p90/p95/p99), goodput
and achieved rate from the summaries, and a state: the worst state of the point's compared metric
rows (its per-request ``ttft_ms`` / ``tpot_ms`` rows, which `harness.compare.rows` tested
and the gate names as ``<workload>.<phase>.<metric>``). Where the grids differ, no point is
compared: each is ``not_comparable`` ("rate grids differ"), and so are the metric rows of those
phases (a point at 8 req/s against one at 10 is no comparison, and must not pass a gate).
The knee and the best goodput are derived figures (`harness.workloads.slo`), compared per
repeat like every derived figure and gateable as ``<workload>.knee_rate`` / ``.goodput_rps``.
A knee that vanished — no repeat has one because even the sweep's lowest point missed the SLO at
the percentile — is no missing value but a knee below the lowest point tried (`knee_below`):
`harness.compare.rows` judges it against the other run's knee on the same grid.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from harness.store.stats import PERCENTILES
from harness.store.summary import PhaseSummary, Summary
from harness.workloads import kind_of

CURVE_METRICS = ("ttft_ms", "itl_ms", "tpot_ms")
_WORST = ("regression", "not_comparable", "inconclusive", "improved", "unchanged")


@dataclass
class CurvePointRow:
    """One load point of one variant in both runs."""

    variant: str
    workload: str
    phase: str
    axis: str | None
    value: float | None
    baseline: dict[str, dict[str, float | None]] = field(default_factory=dict)  # metric -> percentile -> ms
    candidate: dict[str, dict[str, float | None]] = field(default_factory=dict)
    baseline_goodput: float | None = None
    candidate_goodput: float | None = None
    baseline_achieved: float | None = None
    candidate_achieved: float | None = None
    state: str = "unchanged"
    note: str = ""
    gating: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "variant": self.variant,
            "workload": self.workload,
            "phase": self.phase,
            "axis": self.axis,
            "value": self.value,
            "baseline": self.baseline,
            "candidate": self.candidate,
            "baseline_goodput": self.baseline_goodput,
            "candidate_goodput": self.candidate_goodput,
            "baseline_achieved": self.baseline_achieved,
            "candidate_achieved": self.candidate_achieved,
            "state": self.state,
            "note": self.note,
            "gating": self.gating,
        }


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def load_points(summary: Summary | None, workload: str) -> dict[str, PhaseSummary]:
    """{phase: its summary} of a workload's phases that are load points (figures with a sweep
    axis, or a trace's one point)."""
    phases = summary.phases(workload) if summary is not None else {}
    return {ph: p for ph, p in phases.items() if p.figures}


def grid(points: Mapping[str, PhaseSummary]) -> list[tuple[str, float | None]]:
    """The sweep's (axis, value) points, sorted (a trace's point: (its phase, None))."""
    out = []
    for ph, p in points.items():
        f = p.figures
        axis = f.get("sweep_axis")
        out.append((axis, _num(f.get("sweep_value"))) if axis else (ph, None))
    return sorted(out, key=lambda a: (a[0], a[1] if a[1] is not None else 0.0))


KNEE_AXES = {"knee_rate": "rate", "knee_concurrency": "conc"}  # a knee figure -> its sweep axis
KNEE_BELOW_TEST = "knee_below_lowest"  # the `test` of a knee row judged by `knee_below`, not by statistics


@dataclass(frozen=True)
class KneeBelow:
    """A sweep whose knee is below its lowest point: that point was judged against the SLO at
    ``percentile`` and missed it, and none of the ``repeats`` has a knee."""

    lowest: float  # the lowest rate (or concurrency) tried
    repeats: int
    percentile: float | None


def knee_below(summary: Summary | None, workload: str, figure: str) -> KneeBelow | None:
    """Whether a workload's knee figure (``knee_rate`` / ``knee_concurrency``) is below the lowest
    point of its sweep (see `KneeBelow`); None when it has a knee in some repeat, or its lowest
    point was not judged (no SLO, no requests): then nothing is known about it."""
    w = summary.workload(workload) if summary is not None else None
    if w is None:
        return None
    values = w.derived_by_repeat.get(figure) if w.derived_by_repeat is not None else [w.derived.get(figure)]
    if not values or any(v is not None for v in values):
        return None
    axis = KNEE_AXES[figure]
    points = [f for f in (p.figures for p in load_points(summary, workload).values()) if f.get("sweep_axis") == axis]
    points = [f for f in points if _num(f.get("sweep_value")) is not None]
    if not points:
        return None
    lowest = min(points, key=lambda f: float(f["sweep_value"]))
    if not lowest.get("slo_n") or lowest.get("slo_percentile_met") is not False:
        return None
    return KneeBelow(float(lowest["sweep_value"]), len(values), _num(lowest.get("slo_percentile")))


def _latency(p: PhaseSummary) -> dict[str, dict[str, float | None]]:
    return {m: {pc: _num(p.stat(m, pc)) for pc in PERCENTILES} for m in CURVE_METRICS}


def _grid_text(g: Sequence[tuple[str, float | None]]) -> str:
    return "[" + ", ".join(f"{a}_{v:g}" if v is not None else a for a, v in g) + "]"


def curve_points(
    name: str,
    base_summary: Summary | None,
    cand_summary: Summary | None,
    cand_kinds: Mapping[str, str],
    rows: Sequence[Any],
) -> list[CurvePointRow]:
    """The curve points of one compared variant (``rows``: its `MetricRow`s, whose states the
    points take, and which become not comparable where the grids differ)."""
    out: list[CurvePointRow] = []
    for wl in (cand_summary.workloads if cand_summary is not None else None) or {}:
        kind = kind_of(wl, cand_kinds)
        if kind is None or not kind.load_points:
            continue
        cand, base = load_points(cand_summary, wl), load_points(base_summary, wl)
        if not cand:
            continue
        same = grid(cand) == grid(base)
        note = (
            "" if same else f"rate grids differ: baseline {_grid_text(grid(base))}, candidate {_grid_text(grid(cand))}"
        )
        for ph, p in cand.items():
            f = p.figures
            b = base.get(ph) if same else None
            bf = b.figures if b is not None else {}
            own = [r for r in rows if r.variant == name and r.workload == wl and r.phase == ph]
            if not same:
                for r in own:
                    r.state, r.note = "not_comparable", note
            states = [r.state for r in own]
            state = next((s for s in _WORST if s in states), "not_comparable" if not same or b is None else "unchanged")
            out.append(
                CurvePointRow(
                    variant=name,
                    workload=wl,
                    phase=ph,
                    axis=f.get("sweep_axis"),
                    value=_num(f.get("sweep_value")),
                    baseline=_latency(b) if b else {},
                    candidate=_latency(p),
                    baseline_goodput=_num(bf.get("goodput_rps")),
                    candidate_goodput=_num(f.get("goodput_rps")),
                    baseline_achieved=_num(bf.get("achieved_rps")),
                    candidate_achieved=_num(f.get("achieved_rps")),
                    state=state,
                    note=note or "; ".join(f"{r.metric} {r.state}" for r in own if r.state != "unchanged"),
                    gating=any(r.gating for r in own),
                )
            )
    return out

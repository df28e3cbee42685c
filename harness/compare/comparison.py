"""The comparison itself: the state of each variant, one row per compared metric, which rows
gate, and the outcome (PASS / FAIL / INCONCLUSIVE).

`compare_variant` and `parity_row` are pure (frames, figures and summaries in, rows out);
`compare_runs` reads the two runs through `harness.compare.runs`. What is compared is what the
declarations say: the metrics `harness.measures.metrics` marks ``compared`` (in the phases its
``compared_when`` allows), the derived figures a workload's kind marks ``compared`` (one value
per repeat), and quality parity where the candidate has it; filler phases are the kind's
``filler_phases``. What gates is the candidate scenario's ``gate:`` (none: every row).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import numpy as np
import pandas as pd

from harness.analysis.expectations import evaluate_run_expectations
from harness.analysis.frames import groups_frame
from harness.analysis.summary import by_repeat, unexercised_figures
from harness.analysis.verdict import Outcome, VerdictPolicy, declares_parity_fail
from harness.compare.changes import night_changes
from harness.compare.curves import (
    KNEE_AXES,
    KNEE_BELOW_TEST,
    CurvePointRow,
    curve_points,
    grid,
    knee_below,
    load_points,
)
from harness.compare.power import comparison_advice, next_round, pooled_log_spread, units_needed
from harness.compare.runs import (
    BaselineChoice,
    build_change,
    check_same_scenario,
    config_hashes,
    run_expectations,
    run_info,
    run_policy,
    run_workload_kinds,
    run_workload_specs,
    variant_builds,
    variant_records,
    variant_requests,
)
from harness.compare.startup import host_pool_row
from harness.compare.statistics import ALPHA, decide, finite, holm_rejects, look_alpha, per_unit, threshold_for
from harness.compare.tails import MIN_DRIFT_UNITS, decide_drift, decide_tail, tail_min_values
from harness.measures.metrics import METRICS
from harness.spec.values import Gate
from harness.store import results
from harness.workloads import derived_figures, kind_of

COMPARISON_VERSION = 2
METRIC_STATES = ("regression", "improved", "unchanged", "inconclusive", "not_comparable")
FAILING_VARIANT_STATES = ("introduced_failure", "failed")
UNJUDGED_VARIANT_STATES = ("not_comparable", "fixed")  # in the candidate, but nothing to compare with
DEFAULT_POLICY = VerdictPolicy()
PARITY = ("quality", "*", "parity")  # (workload, phase, metric) of a parity row, as a gate names it

_COMPARED_PER_REQUEST = [m for m in METRICS.values() if m.compared and m.per == "request"]
_COMPARED_PER_GROUP = [m for m in METRICS.values() if m.compared and m.per == "group"]


def _json_number(v: float | None) -> float | None:
    """JSON has no NaN or infinity: NaN → null, ±inf → ±1e308."""
    if isinstance(v, float) and not math.isfinite(v):
        return None if math.isnan(v) else (1e308 if v > 0 else -1e308)
    return v


@dataclass
class MetricRow:
    variant: str
    workload: str
    phase: str
    metric: str
    unit: str
    higher_is_better: bool
    baseline_p50: float | None
    candidate_p50: float | None
    n_baseline: int
    n_candidate: int
    change: float | None
    threshold: float
    threshold_source: str
    test: str
    p_value: float | None
    state: str
    note: str = ""
    ci_low: float | None = None  # 95 % interval of the relative change
    ci_high: float | None = None
    mde: float | None = None  # minimum detectable effect (relative change)
    sample: str = "request"  # the unit n counts (one value each): request | group | repeat | verdict
    gating: bool = True
    baseline_below: float | None = None  # a knee below the lowest point tried: that point (`vanished_knees`)
    candidate_below: float | None = None
    values_baseline: int | None = None  # requests pooled into the n groups (None: one value is one unit)
    values_candidate: int | None = None
    units_needed: int | None = None  # units a side its threshold needs at its measured spread (planning)

    def to_dict(self) -> dict[str, Any]:
        """The row as comparison.json stores it (keys in field order)."""
        return {
            "variant": self.variant,
            "workload": self.workload,
            "phase": self.phase,
            "metric": self.metric,
            "unit": self.unit,
            "higher_is_better": self.higher_is_better,
            "baseline_p50": _json_number(self.baseline_p50),
            "candidate_p50": _json_number(self.candidate_p50),
            "n_baseline": self.n_baseline,
            "n_candidate": self.n_candidate,
            "change": _json_number(self.change),
            "threshold": self.threshold,
            "threshold_source": self.threshold_source,
            "test": self.test,
            "p_value": self.p_value,
            "state": self.state,
            "note": self.note,
            "ci_low": _json_number(self.ci_low),
            "ci_high": _json_number(self.ci_high),
            "mde": _json_number(self.mde),
            "sample": self.sample,
            "gating": self.gating,
            "baseline_below": self.baseline_below,
            "candidate_below": self.candidate_below,
            "values_baseline": self.values_baseline,
            "values_candidate": self.values_candidate,
            "units_needed": self.units_needed,
        }

    @property
    def name(self) -> str:
        """How a gate names the row: ``workload.phase.metric``, ``workload.figure``, ``quality.parity``."""
        return f"{self.workload}.{self.metric}" if self.phase == "*" else f"{self.workload}.{self.phase}.{self.metric}"


@dataclass
class VariantRow:
    variant: str
    baseline_state: str | None
    candidate_state: str | None
    state: str
    note: str = ""
    config_changed: bool | None = None
    gated: bool = True  # a gate applies to it (no gate: every variant)
    candidate_wall_s: float | None = None  # the candidate variant's start to end (JUnit's time)

    def to_dict(self) -> dict[str, Any]:
        """The row as comparison.json stores it (keys in field order)."""
        return {
            "variant": self.variant,
            "baseline_state": self.baseline_state,
            "candidate_state": self.candidate_state,
            "state": self.state,
            "note": self.note,
            "config_changed": self.config_changed,
            "gated": self.gated,
            "candidate_wall_s": self.candidate_wall_s,
        }


@dataclass(frozen=True)
class NextRound:
    """The extra round an INCONCLUSIVE look advises: its number (2 = the first extra round), the
    most the scenario allows, the repeats it adds, the variants it runs, and the inconclusive
    gating rows it is for ("variant workload.phase.metric: why")."""

    number: int
    most: int
    repeats: int
    variants: list[str]
    rows: list[str]


@dataclass
class Comparison:
    outcome: str = Outcome.INCONCLUSIVE.value  # PASS | FAIL | INCONCLUSIVE
    variants: list[VariantRow] = field(default_factory=list)
    metrics: list[MetricRow] = field(default_factory=list)
    expectations: list[dict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)  # why the outcome is what it is
    gate: list[str] = field(default_factory=list)  # the gate's texts ([]: every row gates)
    baseline_choice: list[str] = field(default_factory=list)  # how the baseline was chosen
    curves: list[CurvePointRow] = field(default_factory=list)  # sweeps' load points, pairwise
    advice: str = ""  # INCONCLUSIVE: one line on what would make it decide (harness.compare.planning)
    candidate: dict = field(default_factory=dict)
    baseline: dict | None = None
    changes: list[dict] = field(default_factory=list)  # what differs between the nights (compare.changes)
    # INCONCLUSIVE with a round left (verdict.rounds): the round the advice names (not stored:
    # `harness run --decide` runs it, harness/compare/rounds.py)
    next_round: NextRound | None = None

    @property
    def flagged(self) -> bool:
        """Whether the comparison flags a change: a metric moved, or a variant could not be compared."""
        return any(m.state in ("regression", "improved") for m in self.metrics) or any(
            v.state == "not_comparable" for v in self.variants
        )

    @property
    def verdict(self) -> str:
        return self.outcome

    @property
    def simulated(self) -> bool:
        return bool(self.candidate.get("simulated") or (self.baseline or {}).get("simulated"))

    @property
    def counts(self) -> dict[str, int]:
        out = {s: 0 for s in METRIC_STATES}
        for m in self.metrics:
            out[m.state] = out.get(m.state, 0) + 1
        for v in self.variants:
            if v.state != "compared":
                key = "variant_" + v.state
                out[key] = out.get(key, 0) + 1
        out["expectations_failed"] = sum(1 for e in self.expectations if e.get("failed"))
        return out

    @property
    def failing(self) -> bool:
        return self.outcome == Outcome.FAIL.value

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": results.SCHEMA_VERSION,
            "kind": "comparison",
            "comparison_version": COMPARISON_VERSION,
            "verdict": self.outcome,
            "simulated": self.simulated,
            "reasons": self.reasons,
            "advice": self.advice,
            "gate": self.gate,
            "baseline_choice": self.baseline_choice,
            "candidate": self.candidate,
            "baseline": self.baseline,
            "counts": self.counts,
            "notes": self.notes,
            "variants": [v.to_dict() for v in self.variants],
            "metrics": [m.to_dict() for m in self.metrics],
            "curves": [c.to_dict() for c in self.curves],
            "expectations": self.expectations,
            "changes": self.changes,
        }


# ------------------------------------------------------------------------------------ variants


def status_wall_s(status: dict | None) -> float | None:
    """Seconds from a variant's ``started_at`` to its ``ended_at`` (None: either is missing)."""
    try:
        start = datetime.fromisoformat(str((status or {})["started_at"]))
        end = datetime.fromisoformat(str((status or {})["ended_at"]))
    except (KeyError, ValueError):
        return None
    return round(max(0.0, (end - start).total_seconds()), 3)


def variant_state(base_status: dict | None, cand_status: dict | None, *, complete: bool = True) -> tuple[str, str]:
    """(state, note) of one variant from its two status.json dicts (None: not in that run).
    ``complete``: both runs are COMPLETE, so a variant the manifest lists without a status.json
    (state ``not_run``) lost its folder or file: not comparable, never a pass."""
    if cand_status is None or base_status is None:
        return "not_comparable", "only in the " + ("baseline" if cand_status is None else "candidate")
    cs, bs = cand_status.get("state"), base_status.get("state")
    for side, s in (("candidate", cs), ("baseline", bs)):
        if s in (None, "not_run"):
            where = "in a COMPLETE run: its folder or status.json is missing" if complete else "(not run)"
            return "not_comparable", f"no status in the {side} {where}"
    if cs in ("running", "interrupted"):
        return "not_comparable", f"candidate state {cs}: it did not finish"
    declared = cand_status.get("expect") == "startup_failed"
    if cs != "ok":
        if declared and cand_status.get("expect_met"):
            return "skipped", f"failed as declared ({cand_status.get('cause')})"
        if bs == "ok":
            return "introduced_failure", f"candidate {cs} ({cand_status.get('cause')}); baseline ok"
        return "failed", f"candidate {cs} ({cand_status.get('cause')}); baseline {bs}"
    if declared:  # started although it was expected to fail
        return "failed", "expected startup_failed, but the server started"
    if bs != "ok":
        return "fixed", f"baseline {bs} ({base_status.get('cause')}); candidate ok: nothing to compare with"
    return "compared", ""


# ------------------------------------------------------------------------------------ samples


def _filler_rows(req: pd.DataFrame, names_to_kinds: dict[str, str]) -> pd.Series:
    """True for the rows of a phase its workload's kind declares filler."""
    filler = pd.Series(False, index=req.index)
    for wl in req["workload"].dropna().unique():
        kind = kind_of(wl, names_to_kinds)
        if kind is not None and kind.filler_phases:
            filler |= (req["workload"] == wl) & req["phase"].isin(kind.filler_phases)
    return filler


@dataclass(frozen=True)
class RowSample:
    """A row's values on one side and the independent units they came in: ``units`` one label
    per value (the requests of one concurrency group, a batch or a concurrent pass, are one
    observation), None when every value is its own unit."""

    values: np.ndarray
    units: np.ndarray | None = None
    own_unit: str = "request"  # what one value is when it is its own unit

    @property
    def unit(self) -> str:
        """What the test counts: ``group`` when the values came in concurrency groups."""
        return self.own_unit if self.units is None else "group"

    def evidence(self) -> np.ndarray:
        """One value per independent unit (`harness.compare.statistics.per_unit`)."""
        return per_unit(self.values, None if self.units is None else list(self.units))


def metric_samples(req: pd.DataFrame, names_to_kinds: dict[str, str]) -> dict[tuple[str, str, str], RowSample]:
    """{(workload, phase, metric): its values and units} of one variant's requests frame
    (`harness.analysis.frames`): the compared metrics of its measured phases (warm-ups and filler phases
    left out; errored requests too, and concurrency groups with an error). A per-request metric
    of requests sent in concurrency groups counts one observation per group (`RowSample`).
    ``names_to_kinds``: {workload: kind}."""
    out: dict[tuple[str, str, str], RowSample] = {}
    if req.empty:
        return out
    measured = req[(req["warmup"] != True) & ~_filler_rows(req, names_to_kinds)]
    ok = measured[measured["error"].isna()]
    for (wl, ph), g in ok.groupby(["workload", "phase"], sort=False):
        for m in _COMPARED_PER_REQUEST:
            if m.compared_in(g):
                raw = g[m.name].to_numpy(dtype=float)
                keep = np.isfinite(raw)
                if keep.any():
                    labels = g["concurrency_group"].to_numpy(dtype=object)[keep]
                    grouped = any(isinstance(u, str) for u in labels)
                    out[(wl, ph, m.name)] = RowSample(raw[keep], labels if grouped else None)
    groups = groups_frame(measured)
    groups = groups[groups["n_errors"] == 0]
    for m in _COMPARED_PER_GROUP:
        done = groups[groups[m.name].notna()]
        for (wl, ph), g in done.groupby(["workload", "phase"], sort=False):
            out[(wl, ph, m.name)] = RowSample(g[m.name].to_numpy(dtype=float), None, "group")
    return out


def derived_values(summary: Mapping | None, names_to_kinds: Mapping[str, str]) -> dict[tuple[str, str], list[float]]:
    """{(workload, figure): one value per repeat} of the derived figures a summary holds whose
    declaration (by the workload's kind) says ``compared`` (``derived_by_repeat``; a summary
    written before it existed: its pooled ``derived`` value, one value)."""
    out: dict[tuple[str, str], list[float]] = {}
    for wl, w in ((summary or {}).get("workloads") or {}).items():
        kind = kind_of(wl, names_to_kinds)
        compared = {d.name for d in kind.derived if d.compared} if kind is not None else set()
        per_repeat = w.get("derived_by_repeat")
        source = (
            per_repeat if isinstance(per_repeat, Mapping) else {k: [v] for k, v in (w.get("derived") or {}).items()}
        )
        for k, vs in source.items():
            values = [float(v) for v in (vs or []) if isinstance(v, (int, float))]
            if k in compared and values:
                out[(wl, k)] = values
    return out


def derived_values_from_records(
    variant: results.LoadedVariant, names_to_kinds: Mapping[str, str]
) -> dict[tuple[str, str], list[float]]:
    """`derived_values` of a variant whose summary.json predates ``derived_by_repeat``: the
    figures recomputed per repeat from its requests.jsonl (`harness.analysis.summary.by_repeat`)."""
    summary = variant.summary or {}
    if all(isinstance(w, Mapping) and "derived_by_repeat" in w for w in (summary.get("workloads") or {}).values()):
        return derived_values(summary, names_to_kinds)
    records = variant_records(variant)
    repeats = sorted({r.repeat for r in records})
    per_wl: dict[str, list] = {}
    for r in records:
        per_wl.setdefault(r.workload, []).append(r)
    workloads = {}
    for wl, recs in per_wl.items():
        kind = kind_of(wl, names_to_kinds)
        if kind is None:
            continue
        figures, _ = by_repeat(kind.name, recs, repeats, kind.filler_phases)
        workloads[wl] = {"derived_by_repeat": figures}
    return derived_values({"workloads": workloads}, names_to_kinds)


def _row(
    name: str,
    wl: str,
    ph: str,
    metric: str,
    unit: str,
    hib: bool,
    b: RowSample,
    c: RowSample,
    thresholds: Mapping[str, float],
    alpha: float = ALPHA,
) -> MetricRow:
    """One metric row: the test on one value per independent unit of each side, at ``alpha``."""
    thr, src = threshold_for(dict(thresholds), wl, ph, metric)
    sample = c.unit if c.values.size else b.unit
    be, ce = b.evidence(), c.evidence()
    d = decide(be, ce, hib, thr, unit=sample, alpha=alpha)
    row = MetricRow(
        name,
        wl,
        ph,
        metric,
        unit,
        hib,
        float(np.median(be)) if be.size else None,
        float(np.median(ce)) if ce.size else None,
        int(be.size),
        int(ce.size),
        d.change,
        thr,
        src,
        d.test,
        d.p_value,
        d.state,
        d.note,
        d.ci_low,
        d.ci_high,
        d.mde,
        sample,
    )
    if b.units is not None or c.units is not None:
        row.values_baseline, row.values_candidate = int(b.values.size), int(c.values.size)
    if d.state == "inconclusive":
        sd = pooled_log_spread(be, ce)
        row.units_needed = units_needed(sd, thr) if sd is not None else None
    return row


def compare_variant(
    name: str,
    base_req: pd.DataFrame,
    cand_req: pd.DataFrame,
    base_derived: Mapping[tuple[str, str], Sequence[float]],
    cand_derived: Mapping[tuple[str, str], Sequence[float]],
    thresholds: Mapping[str, float],
    base_kinds: dict[str, str],
    cand_kinds: dict[str, str],
    alpha: float = ALPHA,
) -> list[MetricRow]:
    """Metric rows of one variant that ran ok on both sides: its request and group metrics per
    workload × phase, and its derived figures over the repeats (``*_derived``: `derived_values`;
    ``*_kinds``: {workload: kind} of each run), tested at ``alpha`` (a sequential look's)."""
    rows: list[MetricRow] = []
    bs, cs = metric_samples(base_req, base_kinds), metric_samples(cand_req, cand_kinds)
    for key in list(dict.fromkeys([*cs, *bs])):
        wl, ph, m = key
        info = METRICS[m]
        if info.kept_when is not None and not any(info.kept_when(s[key].values) for s in (bs, cs) if key in s):
            continue  # e.g. host_hit_fraction where neither run hit the host tier
        rows.append(
            _row(
                name,
                wl,
                ph,
                m,
                info.unit,
                info.higher_is_better,
                bs.get(key, RowSample(np.array([]), None, info.per)),
                cs.get(key, RowSample(np.array([]), None, info.per)),
                thresholds,
                alpha,
            )
        )
    for key in list(dict.fromkeys([*cs, *bs])):
        if METRICS[key[2]].kept_when is not None:
            continue  # a share: no tail, no drift
        rows.extend(tail_and_drift_rows(name, key, bs.get(key), cs.get(key), thresholds))
    figures = derived_figures()
    for key in list(dict.fromkeys([*cand_derived, *base_derived])):
        wl, m = key
        info = figures[m]
        rows.append(
            _row(
                name,
                wl,
                "*",
                m,
                info.unit,
                info.higher_is_better,
                RowSample(finite(base_derived.get(key, [])), None, "repeat"),
                RowSample(finite(cand_derived.get(key, [])), None, "repeat"),
                thresholds,
                alpha,
            )
        )
    return rows


def tail_and_drift_rows(
    name: str,
    key: tuple[str, str, str],
    base: RowSample | None,
    cand: RowSample | None,
    thresholds: Mapping[str, float],
) -> list[MetricRow]:
    """The tail row (``<metric>_p<q>``) and the within-run drift row (``<metric>_drift``) that
    the metric's declaration asks for (`harness.measures.metrics.Metric.tail` / ``drift``), on one value
    per independent unit (`harness.compare.tails`). A tail row appears where a side has the values
    its quantile needs, a drift row where the candidate has 3 x 8 units: rows that could never
    decide are left out (a gate naming one then says it has no such row). Pure."""
    wl, ph, m = key
    info = METRICS[m]
    empty = RowSample(np.array([]), None, info.per)
    b, c = (base or empty).evidence(), (cand or empty).evidence()
    unit = (cand or base or empty).unit
    out: list[MetricRow] = []
    if info.tail is not None and not info.higher_is_better and max(b.size, c.size) >= tail_min_values(info.tail):
        metric = str(info.tail_name)
        thr, src = threshold_for(dict(thresholds), wl, ph, metric)
        d = decide_tail(b, c, thr, info.tail)
        qb = float(np.quantile(b, info.tail)) if b.size else None
        qc = float(np.quantile(c, info.tail)) if c.size else None
        out.append(
            MetricRow(
                name, wl, ph, metric, info.unit, False, qb, qc, int(b.size), int(c.size), d.change, thr, src,
                d.test, d.p_value, d.state, d.note, sample=unit,
            )
        )  # fmt: skip
    if info.drift and c.size >= 3 * MIN_DRIFT_UNITS:
        metric = str(info.drift_name)
        thr, src = threshold_for(dict(thresholds), wl, ph, metric)
        d, n_first, n_last = decide_drift(c, info.higher_is_better, thr)
        third = c.size // 3
        out.append(
            MetricRow(
                name, wl, ph, metric, info.unit, info.higher_is_better, float(np.median(c[:third])),
                float(np.median(c[-third:])), n_first, n_last, d.change, thr, src, d.test, d.p_value, d.state,
                d.note, d.ci_low, d.ci_high, d.mde, sample=unit,
            )
        )  # fmt: skip
    return out


def vanished_knees(
    name: str,
    base_summary: Mapping | None,
    cand_summary: Mapping | None,
    cand_kinds: Mapping[str, str],
    rows: list[MetricRow],
    thresholds: Mapping[str, float],
) -> None:
    """Judge the knee rows of one variant where a run has no knee because even its lowest point
    missed the SLO (`harness.compare.curves.knee_below`), on the same grid in both runs: the
    candidate's knee vanished while the baseline had one → the worst regression there is (by
    the figure's declared direction), the reverse → improved, neither run has one → inconclusive
    (both below the lowest point tried: which is lower cannot be told). Rows are changed in
    place (one is added when neither run has a knee). A different grid, or a run whose lowest
    point was not judged, stays as `compare_variant` left it (not comparable). No I/O."""
    figures = derived_figures()
    for wl in (cand_summary or {}).get("workloads") or {}:
        kind = kind_of(wl, cand_kinds)
        if kind is None or not kind.load_points:
            continue
        if grid(load_points(base_summary, wl)) != grid(load_points(cand_summary, wl)):
            continue
        for figure in (d.name for d in kind.derived if d.compared and d.name in KNEE_AXES):
            b, c = knee_below(base_summary, wl, figure), knee_below(cand_summary, wl, figure)
            if b is None and c is None:
                continue
            row = next((r for r in rows if (r.variant, r.workload, r.phase, r.metric) == (name, wl, "*", figure)), None)
            if row is None:
                info = figures[figure]
                thr, src = threshold_for(dict(thresholds), wl, "*", figure)
                row = MetricRow(
                    name,
                    wl,
                    "*",
                    figure,
                    info.unit,
                    info.higher_is_better,
                    None,
                    None,
                    0,
                    0,
                    None,
                    thr,
                    src,
                    "none",
                    None,
                    "not_comparable",
                    sample="repeat",
                )
                rows.append(row)
            below = b or c
            axis = "rate" if KNEE_AXES[figure] == "rate" else "concurrency"
            missed = f"missed the SLO at p{below.percentile:g}" if below.percentile is not None else "missed the SLO"
            if b is not None and c is not None:
                state = "inconclusive"
                note = f"no knee in either run: even the lowest {axis} tried ({below.lowest:g}) {missed} in both"
            elif c is not None and row.n_baseline:
                state = "improved" if not row.higher_is_better else "regression"
                note = (
                    f"the candidate's knee vanished: even the lowest {axis} tried ({c.lowest:g}) {missed}; "
                    f"the baseline's knee was {row.baseline_p50:g}"
                )
            elif b is not None and row.n_candidate:
                state = "regression" if not row.higher_is_better else "improved"
                note = (
                    f"the baseline had no knee (even the lowest {axis} tried, {b.lowest:g}, {missed}); "
                    f"the candidate's knee is {row.candidate_p50:g}"
                )
            else:  # the other side's knee is unknown (not judged): nothing to set it against
                continue
            row.state, row.note, row.test, row.p_value = state, note, KNEE_BELOW_TEST, None
            row.change = row.ci_low = row.ci_high = row.mde = None
            if b is not None:
                row.baseline_below, row.n_baseline = b.lowest, b.repeats
            if c is not None:
                row.candidate_below, row.n_candidate = c.lowest, c.repeats


def unexercised_rows(base_summary: Mapping | None, cand_summary: Mapping | None, rows: list[MetricRow]) -> None:
    """A derived figure that either run measured on a cache phase without a hit of the tier it
    exists to measure (summary ``unexercised``) compares recompute: inconclusive, never a silent
    pass or fail of a gate on it. Rows are changed in place. No I/O."""
    cand, base = unexercised_figures(cand_summary), unexercised_figures(base_summary)
    for r in rows:
        key = (r.workload, r.metric)
        if r.phase != "*" or (key not in cand and key not in base):
            continue
        side = "candidate" if key in cand else "baseline"
        r.state, r.note = "inconclusive", f"{side} measured recompute: {cand.get(key) or base.get(key)}"


def client_bound_rows(base_summary: Mapping | None, cand_summary: Mapping | None, rows: list[MetricRow]) -> None:
    """A timing row of a phase that either run flagged CLIENT-BOUND (its p99 schedule lag over
    ``lag_limit_ms``: the client, not the server, set the load) is inconclusive with that reason,
    whatever its test said: the run's warning and the comparison never contradict each other.
    Rows are changed in place. No I/O."""

    def flagged(summary: Mapping | None) -> dict[tuple[str, str], str]:
        out = {}
        for wl, w in ((summary or {}).get("workloads") or {}).items():
            for ph, p in ((w or {}).get("phases") or {}).items() if isinstance(w, Mapping) else ():
                f = p.get("figures") if isinstance(p, Mapping) else None
                if isinstance(f, Mapping) and f.get("client_bound") is True:
                    lag, limit = f.get("lag_p99_ms"), f.get("lag_limit_ms")
                    out[(wl, ph)] = f"schedule lag p99 {lag:.3g} ms over {limit:g} ms" if lag and limit else "flagged"
        return out

    cand, base = flagged(cand_summary), flagged(base_summary)
    for r in rows:
        key = (r.workload, r.phase)
        if r.phase == "*" or r.state == "not_comparable" or (key not in cand and key not in base):
            continue
        side = "candidate" if key in cand else "baseline"
        r.state = "inconclusive"
        r.note = (
            f"the {side}'s phase was CLIENT-BOUND ({cand.get(key) or base.get(key)}): the client, not the "
            "server, set its load, so its latency cannot judge the server"
        )


def parity_row(
    name: str,
    base_summary: Mapping | None,
    cand_summary: Mapping | None,
    policy: VerdictPolicy = DEFAULT_POLICY,
    cand_checks: Sequence[Mapping] = (),
) -> MetricRow | None:
    """The quality-parity row of a variant whose candidate summary has a parity verdict (None
    otherwise): FAIL → regression (whatever the baseline had) unless the variant's own checks
    declare it (``quality.parity == FAIL``: a negative control, `harness.analysis.verdict.declares_parity_fail`)
    → unchanged, PASS/WARN → unchanged, NOT_EXERCISED/NOT_COMPARABLE → inconclusive unless the
    scenario's ``verdict:`` allows it for this variant, INCONCLUSIVE → inconclusive.
    ``cand_checks``: the candidate's expectation rows of this variant. Pure."""

    def verdict_of(s: Mapping | None) -> str | None:
        p = (s or {}).get("quality") or {}
        p = p.get("parity") if isinstance(p, Mapping) else None
        return p.get("verdict") if isinstance(p, Mapping) else None

    cv, bv = verdict_of(cand_summary), verdict_of(base_summary)
    if cv is None:
        return None
    was = f"baseline {bv or 'none'}, candidate {cv}"
    if cv == "FAIL" and declares_parity_fail(cand_checks):
        state, note = "unchanged", was + " (declared by its check: a negative control)"
    elif cv == "FAIL":
        state, note = "regression", was + ("" if bv != "FAIL" else " (a persisting failure)")
    elif cv in ("PASS", "WARN"):
        state, note = "unchanged", was
    elif cv in ("NOT_EXERCISED", "NOT_COMPARABLE") and policy.not_exercised_allowed(name):
        state, note = "unchanged", was + " (allowed by the scenario's verdict.allow_not_exercised)"
    else:
        state, note = "inconclusive", was + ": parity could not be judged"
    return MetricRow(
        name,
        *PARITY,
        "",
        True,
        None,
        None,
        0 if bv is None else 1,
        1,
        None,
        0.0,
        "none",
        "parity_verdict",
        None,
        state,
        note,
        sample="verdict",
    )


# ------------------------------------------------------------------------------------ gating


def gate_matches(gate: Gate, row: MetricRow) -> bool:
    """Whether ``gate`` (``[variant:] workload[.phase].metric`` or ``quality.parity``) names ``row``."""
    return gate.names(row.variant, row.workload, row.phase, row.metric)


def gate_targets(gate: Gate, variants: Sequence[VariantRow], quality_baseline: str | None) -> list[str]:
    """The variants a gate applies to: the one it names, else every variant the candidate ran
    except those that failed to start as declared (and, for parity, the quality baseline)."""
    if gate.variant is not None:
        return [gate.variant]
    return [
        v.variant
        for v in variants
        if v.candidate_state is not None
        and v.state != "skipped"
        and not (gate.metric == "quality.parity" and v.variant == quality_baseline)
    ]


def family_correction(rows: Sequence[MetricRow], alpha: float = ALPHA) -> None:
    """The gating rows are one family: a night FAILs when any of them regresses, so each row's
    test at 5 % would make a healthy night with m gating rows fail up to m × 5 % of the time. A
    gating regression stands only if Holm's procedure over every gating row's p-value keeps it
    (family-wise false alarm <= `ALPHA`); otherwise it is inconclusive and says why. Rows are
    changed in place. Pure."""
    tested = [r for r in rows if r.p_value is not None and math.isfinite(r.p_value)]
    if len(tested) < 2:
        return
    keep = holm_rejects([float(r.p_value) for r in tested], alpha)  # type: ignore[arg-type]
    for r, ok in zip(tested, keep):
        if r.state == "regression" and not ok:
            r.state = "inconclusive"
            r.note = (
                f"beyond the threshold and p={r.p_value:.2g} alone, but not significant among the "
                f"{len(tested)} gating rows tested together (Holm, family-wise {alpha * 100:.3g}%)"
            )


def judge(comp: Comparison, gates: Sequence[Gate], quality_baseline: str | None, alpha: float = ALPHA) -> None:
    """Mark the gating rows and variants, then set the outcome and its reasons:
    FAIL      an introduced or persisting variant failure, a failed expectation, or a regression
              in a gating row;
    INCONCLUSIVE  otherwise, when there is no baseline, the candidate is not COMPLETE, a gated
              variant cannot be compared (config changed, missing, fixed), a gating row is
              inconclusive or not comparable, or a gate names a metric no row has;
    PASS      otherwise."""
    fail: list[str] = []
    unsure: list[str] = []
    by_variant = {v.variant: v for v in comp.variants}
    for m in comp.metrics:
        m.gating = not gates or any(gate_matches(g, m) for g in gates)
    family_correction([m for m in comp.metrics if m.gating], alpha)
    gated: set[str] = set()
    if gates:
        for g in gates:
            for target in gate_targets(g, comp.variants, quality_baseline):
                gated.add(target)
                v = by_variant.get(target)
                if v is None:
                    unsure.append(f"gate {g.text}: variant {target} is in neither run")
                elif v.state == "compared" and not any(gate_matches(g, m) for m in comp.metrics if m.variant == target):
                    unsure.append(f"gate {g.text}: {target} has no such compared metric")
    else:
        gated = {v.variant for v in comp.variants}
    for v in comp.variants:
        v.gated = v.variant in gated
        if v.state in FAILING_VARIANT_STATES:
            fail.append(f"{v.variant}: {v.state.replace('_', ' ')} ({v.note})")
        elif v.state in UNJUDGED_VARIANT_STATES and v.gated:
            unsure.append(f"{v.variant}: not compared: {v.note}")
    for m in comp.metrics:
        if not m.gating:
            continue
        if m.state == "regression":
            fail.append(f"{m.variant} {m.name}: regression {_pct(m.change)} ({m.note or m.test})")
        elif m.state in ("inconclusive", "not_comparable"):
            unsure.append(f"{m.variant} {m.name}: {m.state} ({m.note})")
    fail += [
        f"expectation {e.get('check')} on {e.get('variant')}: {e.get('outcome')}"
        for e in comp.expectations
        if e.get("failed")
    ]
    if comp.baseline is None:
        unsure.insert(0, "no baseline: nothing was compared")
    if not comp.candidate.get("complete", True):
        unsure.insert(0, "the candidate run is not COMPLETE")
    if fail:
        comp.outcome, comp.reasons = Outcome.FAIL.value, fail + unsure
    elif unsure:
        comp.outcome, comp.reasons = Outcome.INCONCLUSIVE.value, unsure
    else:
        comp.outcome, comp.reasons = Outcome.PASS.value, []


def _pct(v: float | None) -> str:
    return "—" if v is None or not math.isfinite(v) else f"{v * 100:+.1f}%"


# ------------------------------------------------------------------------------------ two runs


def _round_why(run: results.LoadedRun) -> str:
    """What an extra round ran: its repeats and workloads (its stored scenario)."""
    specs = run_workload_specs(run.manifest)
    return f"repeats {run.manifest.get('repeats')} of {', '.join(specs) or 'its workloads'}"


def pooled_baseline(
    sides: Sequence[tuple[str, results.LoadedVariant]], names_to_kinds: Mapping[str, str]
) -> tuple[pd.DataFrame, dict[tuple[str, str], list[float]]]:
    """One variant's requests frame and derived values over the nights of a baseline pool
    ((run id, variant) each, newest first): the frames concatenated with each concurrency group
    named by its night (a group of one night is never merged with another's), the per-repeat
    derived values of every night one list."""
    frames, derived = [], {}
    for run_id, v in sides:
        req = variant_requests(v)
        if len(sides) > 1 and len(req):
            req = req.copy()
            req["concurrency_group"] = [
                f"{run_id}/{g}" if isinstance(g, str) else None for g in req["concurrency_group"]
            ]
        frames.append(req)
        for key, vs in derived_values_from_records(v, names_to_kinds).items():
            derived.setdefault(key, []).extend(vs)
    return (frames[0] if len(frames) == 1 else pd.concat(frames, ignore_index=True)), derived


def pool_drift(
    name: str,
    nights: Sequence[tuple[str, results.LoadedVariant]],
    kinds: Mapping[str, str],
    rows: Sequence[MetricRow],
) -> list[str]:
    """Drift inside a baseline pool: for each gating row of variant ``name`` measured per request
    or group, its nights' medians (``nights`` newest first); a note when they moved by at least
    the row's threshold from the oldest night to the newest. The pool's spread includes that
    drift; the note says it is there."""
    if len(nights) < 3:
        return []
    per_night = [metric_samples(variant_requests(v), dict(kinds)) for _, v in nights]
    out = []
    for r in rows:
        if not r.gating or r.phase == "*" or r.variant != name:
            continue
        key = (r.workload, r.phase, r.metric)
        meds = [float(np.median(s[key].evidence())) for s in reversed(per_night) if key in s and s[key].values.size]
        if len(meds) < 3 or meds[0] == 0:
            continue
        moved = (meds[-1] - meds[0]) / abs(meds[0])
        if abs(moved) >= r.threshold:
            shown = ", ".join(f"{m:.4g}" for m in meds)
            out.append(
                f"baseline pool drifts: {name} {r.name} night medians {shown} (oldest to newest), "
                f"{moved * 100:+.1f}% over {len(meds)} nights"
            )
    return out


def _same_variant(
    runs: Sequence[results.LoadedRun], name: str, config_hash: str | None = None
) -> list[tuple[str, results.LoadedVariant]]:
    """(run id, variant) of each run that has variant ``name`` finished ok (and, when given,
    with that config hash)."""
    out = []
    for r in runs:
        v = next((x for x in r.variants if x.name == name), None)
        if v is None or (v.status or {}).get("state") != "ok":
            continue
        if config_hash is not None and config_hashes(r).get(name) != config_hash:
            continue
        out.append((r.run_id, v))
    return out


def compare_runs(
    base: results.LoadedRun | None,
    cand: results.LoadedRun,
    choice: BaselineChoice | None = None,
    rounds: Sequence[results.LoadedRun] = (),
) -> Comparison:
    """Compare the candidate with ``base`` (None: no baseline; expectations only, INCONCLUSIVE).
    Raises `harness.compare.runs.BaselineMismatch` for a baseline of another scenario. Variants
    whose config hash differs are not compared (``not_comparable: config changed``), nor are
    the workloads whose definition in the stored scenario text differs. ``rounds``: extra rounds
    of the candidate's night (runs of the same scenario and config, e.g. more repeats of the
    workloads an inconclusive row needs), pooled with it; every look is tested at the alpha the
    scenario's ``verdict.rounds`` spends on it (`harness.compare.statistics.look_alpha`)."""
    exp = run_expectations(cand.manifest)
    thresholds = {k: t.fraction for k, t in exp.thresholds.items()}
    comp = Comparison(candidate=run_info(cand), gate=[g.text for g in exp.gate])
    allowed = run_policy(cand.manifest).rounds
    alpha = look_alpha(allowed) if allowed else ALPHA
    for r in rounds:
        check_same_scenario(r, cand)
    if len(rounds) > allowed:
        raise results.ResultsError(
            f"{len(rounds)} extra rounds given, but the scenario's verdict.rounds allows {allowed}: "
            "a look the alpha spending did not plan for would not keep the false-alarm rate"
        )
    if allowed:
        comp.notes.append(
            f"sequential: look {1 + len(rounds)} of at most {1 + allowed}, every look tested at alpha "
            f"{alpha:.3g} (alpha {ALPHA:g} spent equally over the looks)"
        )
    for i, r in enumerate(rounds, 1):
        comp.notes.append(f"round {i + 1}: {r.run_id} pooled with the candidate ({_round_why(r)})")
    if rounds:
        comp.candidate["rounds"] = [r.run_id for r in rounds]
    if exp.problem is not None:
        comp.notes.append(f"scenario re-read from its raw YAML only ({exp.problem})")
    if choice is not None:
        comp.baseline_choice = choice.lines()
    comp.expectations = evaluate_run_expectations(cand.paths.root)
    if not cand.complete:
        comp.notes.append("the candidate run is not COMPLETE (interrupted or still running)")
    if base is None:
        judge(comp, exp.gate, exp.quality_baseline, alpha)
        return comp
    check_same_scenario(base, cand)
    comp.baseline = run_info(base)
    comp.changes = [
        c.to_json()
        for c in night_changes(
            base.manifest,
            cand.manifest,
            {v.name: v.status for v in base.variants},
            {v.name: v.status for v in cand.variants},
        )
    ]
    pool = list(choice.pool) if choice is not None else []
    if pool:
        comp.baseline["pool"] = [r.run_id for r in pool]
        comp.notes.append(
            f"baseline pooled over {1 + len(pool)} nights ({base.run_id}, " + ", ".join(r.run_id for r in pool) + ")"
        )
    policy = run_policy(cand.manifest)
    changed_workloads: set[str] = set()
    if comp.baseline["scenario_hash"] != comp.candidate["scenario_hash"]:
        specs_b, specs_c = run_workload_specs(base.manifest), run_workload_specs(cand.manifest)
        changed_workloads = {w for w in specs_c if specs_b.get(w) != specs_c[w]}
        comp.notes.append(
            "the scenario text differs between the two runs: only variants with the same config "
            "hash are compared"
            + (
                ", and not the workloads whose definition changed: " + ", ".join(sorted(changed_workloads))
                if changed_workloads
                else ""
            )
        )
    base_kinds, cand_kinds = run_workload_kinds(base.manifest), run_workload_kinds(cand.manifest)
    base_v = {v.name: v for v in base.variants}
    cand_v = {v.name: v for v in cand.variants}
    hashes_b, hashes_c = config_hashes(base), config_hashes(cand)
    builds_b, builds_c = variant_builds(base), variant_builds(cand)
    complete = base.complete and cand.complete
    for name in list(dict.fromkeys([*cand_v, *base_v])):
        bv, cv = base_v.get(name), cand_v.get(name)
        state, note = variant_state(bv.status if bv else None, cv.status if cv else None, complete=complete)
        changed = None if (bv is None or cv is None) else hashes_b.get(name) != hashes_c.get(name)
        if changed and state not in FAILING_VARIANT_STATES and state != "skipped":
            state, note = "not_comparable", "config changed (variant config hash differs)"
        build_note = build_change(builds_b.get(name), builds_c.get(name))
        if build_note:  # compared all the same: the build is what a nightly comparison judges
            note = f"{note}; {build_note}" if note else build_note
            comp.notes.append(f"{name}: {build_note}")
        comp.variants.append(
            VariantRow(
                name,
                bv.status.get("state") if bv else None,
                cv.status.get("state") if cv else None,
                state,
                note,
                changed,
                candidate_wall_s=status_wall_s(cv.status) if cv else None,
            )
        )
        if state == "compared":
            base_req, base_derived = pooled_baseline([(base.run_id, bv), *_same_variant(pool, name)], base_kinds)
            cand_req, cand_derived = pooled_baseline(
                [(cand.run_id, cv), *_same_variant(rounds, name, hashes_c.get(name))], cand_kinds
            )
            rows = compare_variant(
                name,
                base_req,
                cand_req,
                base_derived,
                cand_derived,
                thresholds,
                base_kinds,
                cand_kinds,
                alpha,
            )
            vanished_knees(name, bv.summary, cv.summary, cand_kinds, rows, thresholds)
            unexercised_rows(bv.summary, cv.summary, rows)
            client_bound_rows(bv.summary, cv.summary, rows)
            host_pool = host_pool_row(name, bv.status, cv.status, thresholds)  # the start's host-pool setup
            if host_pool is not None:
                rows.append(MetricRow(**host_pool))
            for r in rows:
                if r.workload in changed_workloads:
                    r.state, r.note = "not_comparable", "workload definition changed"
            comp.curves.extend(curve_points(name, bv.summary, cv.summary, cand_kinds, rows))
            comp.metrics.extend(rows)
        if cv is not None and cv.status.get("state") == "ok":  # parity is the candidate's own: judged
            checks = [e for e in comp.expectations if e.get("variant") == name]
            row = parity_row(name, bv.summary if bv else None, cv.summary, policy, checks)  # even when not comparable
            if row is not None:
                row.threshold_source = "parity verdict"
                comp.metrics.append(row)
    judge(comp, exp.gate, exp.quality_baseline, alpha)
    if pool:
        for v in comp.variants:
            if v.state == "compared" and v.variant in base_v:
                nights = [(base.run_id, base_v[v.variant]), *_same_variant(pool, v.variant)]
                comp.notes += pool_drift(v.variant, nights, base_kinds, comp.metrics)
    if comp.outcome == Outcome.INCONCLUSIVE.value:
        done = sum(int(r.manifest.get("repeats") or 1) for r in (cand, *rounds))
        comp.advice = comparison_advice(comp.metrics, done, bool(exp.gate))
        more = next_round(comp.metrics, done)
        if more is not None and allowed > len(rounds) and more[0] > done:
            rows = [
                f"{r.variant} {r.workload}.{r.phase}.{r.metric}: {r.note or 'inconclusive'}"
                for r in comp.metrics
                if r.gating and r.state == "inconclusive" and r.variant in more[1]
            ]
            comp.next_round = NextRound(len(rounds) + 2, allowed + 1, more[0] - done, more[1], rows)
            scenario_path = (cand.manifest.get("scenario") or {}).get("path") or "SCENARIO"
            only = " ".join(f"--only {v}" for v in more[1])
            added = " ".join(f"--round {r.paths.root}" for r in rounds)
            comp.advice += (
                f"; round {len(rounds) + 2} of at most {allowed + 1} (verdict.rounds): harness run {scenario_path} "
                f"--repeats {more[0] - done} --no-quality {only}, then harness compare {cand.paths.root} "
                f"--baseline {(comp.baseline or {}).get('path', 'latest')} {added} --round NEW_RUN".replace("  ", " ")
            )
    for c in comp.curves:  # a point gates when one of its metric rows does
        c.gating = any(
            m.gating for m in comp.metrics if (m.variant, m.workload, m.phase) == (c.variant, c.workload, c.phase)
        )
    return comp

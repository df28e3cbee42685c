"""The metric rows of one variant that ran ok on both sides: each compared metric's values and
independent units on a side (`RowSample`), one row per compared metric tested at the look's alpha,
the tail and drift rows a metric's declaration asks for, the knees below the lowest point tried,
the rows that measured recompute or a client-bound phase (inconclusive), and the quality-parity
row. Pure: frames, figures and summaries in, rows out (`harness.compare.two_runs` reads the runs).

What is compared is what the declarations say: the metrics `harness.measures.metrics` marks
``compared`` (in the phases its ``compared_when`` allows), the derived figures a workload's kind
marks ``compared`` (one value per repeat), and quality parity where the candidate has it; filler
phases are the kind's ``filler_phases``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from harness.analysis.figures import variant_figures
from harness.analysis.frames import groups_frame
from harness.analysis.summary import unexercised_figures
from harness.analysis.verdict import VerdictPolicy, declares_parity_fail
from harness.compare.comparison import MetricRow
from harness.compare.curves import KNEE_AXES, KNEE_BELOW_TEST, grid, knee_below, load_points
from harness.compare.power import pooled_log_spread, units_needed
from harness.compare.statistics import ALPHA, decide, finite, per_unit, threshold_for
from harness.compare.tails import (
    MIN_DRIFT_UNITS,
    MIN_TAIL_SHARE_UNITS,
    decide_drift,
    decide_tail,
    decide_tail_share,
    tail_min_values,
    tail_share,
)
from harness.measures.metrics import METRICS
from harness.store import run_folder
from harness.store.summary import Summary
from harness.workloads import derived_figures, kind_of

DEFAULT_POLICY = VerdictPolicy()
PARITY = ("quality", "*", "parity")  # (workload, phase, metric) of a parity row, as a gate names it

_COMPARED_PER_REQUEST = [m for m in METRICS.values() if m.compared and m.per == "request"]
_COMPARED_PER_GROUP = [m for m in METRICS.values() if m.compared and m.per == "group"]


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


def derived_values(summary: Summary | None, names_to_kinds: Mapping[str, str]) -> dict[tuple[str, str], list[float]]:
    """{(workload, figure): one value per repeat} of the derived figures a summary holds whose
    declaration (by the workload's kind) says ``compared`` (``derived_by_repeat``; without it:
    its pooled ``derived`` value, one value)."""
    out: dict[tuple[str, str], list[float]] = {}
    for wl, w in ((summary.workloads if summary is not None else None) or {}).items():
        kind = kind_of(wl, names_to_kinds)
        compared = {d.name for d in kind.derived if d.compared} if kind is not None else set()
        source = w.derived_by_repeat if w.derived_by_repeat is not None else {k: [v] for k, v in w.derived.items()}
        for k, vs in source.items():
            values = [float(v) for v in (vs or []) if isinstance(v, (int, float))]
            if k in compared and values:
                out[(wl, k)] = values
    return out


def variant_derived_values(
    variant: run_folder.LoadedVariant, names_to_kinds: Mapping[str, str]
) -> dict[tuple[str, str], list[float]]:
    """`derived_values` of a variant's figures (`harness.analysis.figures`: a summary that predates
    ``derived_by_repeat`` gets them from its requests.jsonl), what the report's deltas read too."""
    return derived_values(variant_figures(variant, names_to_kinds), names_to_kinds)


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
    if info.tail is not None and not info.higher_is_better and max(b.size, c.size) >= MIN_TAIL_SHARE_UNITS:
        metric = str(info.tail_share_name)
        thr, src = threshold_for(dict(thresholds), wl, ph, metric)
        d = decide_tail_share(b, c, thr)
        shares = [tail_share(x, thr)[2] if x.size else None for x in (b, c)]
        out.append(
            MetricRow(
                name, wl, ph, metric, "share", False, shares[0], shares[1], int(b.size), int(c.size), d.change, thr,
                src, d.test, d.p_value, d.state, d.note, sample=unit,
            )
        )  # fmt: skip
    if info.drift and max(b.size, c.size) >= MIN_DRIFT_UNITS:
        metric = str(info.drift_name)
        thr, src = threshold_for(dict(thresholds), wl, ph, metric)
        d, drift_b, drift_c = decide_drift(b, c, info.higher_is_better, thr)
        out.append(
            MetricRow(
                name, wl, ph, metric, "ratio", info.higher_is_better,
                None if drift_b is None else 1 + drift_b, None if drift_c is None else 1 + drift_c,
                int(b.size), int(c.size), d.change, thr, src, d.test, d.p_value, d.state,
                d.note, d.ci_low, d.ci_high, d.mde, sample=unit,
            )
        )  # fmt: skip
    return out


def vanished_knees(
    name: str,
    base_summary: Summary | None,
    cand_summary: Summary | None,
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
    for wl in (cand_summary.workloads if cand_summary is not None else None) or {}:
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


def unexercised_rows(base_summary: Summary | None, cand_summary: Summary | None, rows: list[MetricRow]) -> None:
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


def client_bound_rows(base_summary: Summary | None, cand_summary: Summary | None, rows: list[MetricRow]) -> None:
    """A timing row of a phase that either run flagged CLIENT-BOUND (its p99 schedule lag over
    ``lag_limit_ms``: the client, not the server, set the load) is inconclusive with that reason,
    whatever its test said: the run's warning and the comparison never contradict each other.
    Rows are changed in place. No I/O."""

    def flagged(summary: Summary | None) -> dict[tuple[str, str], str]:
        out = {}
        for wl, w in ((summary.workloads if summary is not None else None) or {}).items():
            for ph, p in w.phases.items():
                f = p.figures
                if f.get("client_bound") is True:
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
    base_summary: Summary | None,
    cand_summary: Summary | None,
    policy: VerdictPolicy = DEFAULT_POLICY,
    cand_checks: Sequence[Mapping] = (),
) -> MetricRow | None:
    """The quality-parity row of a variant whose candidate summary has a parity verdict (None
    otherwise): FAIL → regression (whatever the baseline had) unless the variant's own checks
    declare it (``quality.parity == FAIL``: a negative control, `harness.analysis.verdict.declares_parity_fail`)
    → unchanged, PASS/WARN → unchanged, NOT_EXERCISED/NOT_COMPARABLE → inconclusive unless the
    scenario's ``verdict:`` allows it for this variant, INCONCLUSIVE → inconclusive.
    ``cand_checks``: the candidate's expectation rows of this variant. Pure."""

    def verdict_of(s: Summary | None) -> str | None:
        return s.parity.get("verdict") if s is not None else None

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

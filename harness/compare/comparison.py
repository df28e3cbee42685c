"""The comparison itself: the state of each variant, one row per compared metric, the verdict.

`compare_variant` is pure (frames and summaries in, rows out); `compare_runs` reads the two runs'
rows through `harness.compare.runs`. What is compared is what the declarations say: the metrics
`harness.metrics` marks ``compared`` (in the phases its ``compared_when`` allows), and the derived
figures a workload's kind marks ``compared``; filler phases are the kind's ``filler_phases``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from harness import results
from harness.compare.runs import run_info, run_thresholds, run_workload_kinds, variant_requests
from harness.compare.statistics import decide, finite, threshold_for
from harness.expectations import evaluate_run_expectations
from harness.frames import groups_frame
from harness.metrics import METRICS
from harness.workloads import derived_figures, kind_of

COMPARISON_VERSION = 1
METRIC_STATES = ("regression", "improved", "unchanged", "insufficient_data", "not_comparable")
FAILING_VARIANT_STATES = ("introduced_failure", "failed")

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

    def to_dict(self) -> dict[str, Any]:
        """The row as comparison.json stores it (keys in field order)."""
        return {"variant": self.variant, "workload": self.workload, "phase": self.phase,
                "metric": self.metric, "unit": self.unit, "higher_is_better": self.higher_is_better,
                "baseline_p50": _json_number(self.baseline_p50), "candidate_p50": _json_number(self.candidate_p50),
                "n_baseline": self.n_baseline, "n_candidate": self.n_candidate,
                "change": _json_number(self.change), "threshold": self.threshold,
                "threshold_source": self.threshold_source, "test": self.test, "p_value": self.p_value,
                "state": self.state, "note": self.note}


@dataclass
class VariantRow:
    variant: str
    baseline_state: str | None
    candidate_state: str | None
    state: str
    note: str = ""
    config_changed: bool | None = None

    def to_dict(self) -> dict[str, Any]:
        """The row as comparison.json stores it (keys in field order)."""
        return {"variant": self.variant, "baseline_state": self.baseline_state,
                "candidate_state": self.candidate_state, "state": self.state, "note": self.note,
                "config_changed": self.config_changed}


@dataclass
class Comparison:
    verdict: str  # pass | regression | no_baseline
    variants: list[VariantRow] = field(default_factory=list)
    metrics: list[MetricRow] = field(default_factory=list)
    expectations: list[dict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    candidate: dict = field(default_factory=dict)
    baseline: dict | None = None

    @property
    def counts(self) -> dict[str, int]:
        out = {s: 0 for s in METRIC_STATES}
        for m in self.metrics:
            out[m.state] = out.get(m.state, 0) + 1
        for v in self.variants:
            if v.state != "compared":
                out[v.state] = out.get(v.state, 0) + 1
        out["expectations_failed"] = sum(1 for e in self.expectations if e.get("failed"))
        return out

    @property
    def failing(self) -> bool:
        return (any(m.state == "regression" for m in self.metrics)
                or any(v.state in FAILING_VARIANT_STATES for v in self.variants)
                or any(e.get("failed") for e in self.expectations))

    def to_dict(self) -> dict[str, Any]:
        return {"schema_version": results.SCHEMA_VERSION, "kind": "comparison",
                "comparison_version": COMPARISON_VERSION, "verdict": self.verdict,
                "candidate": self.candidate, "baseline": self.baseline, "counts": self.counts,
                "notes": self.notes, "variants": [v.to_dict() for v in self.variants],
                "metrics": [m.to_dict() for m in self.metrics], "expectations": self.expectations}


def variant_state(base_status: dict | None, cand_status: dict | None) -> tuple[str, str]:
    """(state, note) of one variant from its two status.json dicts (None: not in that run)."""
    if cand_status is None or base_status is None:
        return "not_comparable", "only in the " + ("baseline" if cand_status is None else "candidate")
    cs, bs = cand_status.get("state"), base_status.get("state")
    if cs in (None, "not_run", "skipped"):
        return "skipped", f"candidate state {cs or 'missing'}"
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
        return "fixed", f"baseline {bs} ({base_status.get('cause')}); candidate ok"
    return "compared", ""


def _filler_rows(req: pd.DataFrame, names_to_kinds: dict[str, str]) -> pd.Series:
    """True for the rows of a phase its workload's kind declares filler."""
    filler = pd.Series(False, index=req.index)
    for wl in req["workload"].dropna().unique():
        kind = kind_of(wl, names_to_kinds)
        if kind is not None and kind.filler_phases:
            filler |= (req["workload"] == wl) & req["phase"].isin(kind.filler_phases)
    return filler


def metric_samples(req: pd.DataFrame, names_to_kinds: dict[str, str]) -> dict[tuple[str, str, str], np.ndarray]:
    """{(workload, phase, metric): values} of one variant's requests frame (`harness.frames`):
    the compared metrics of its measured phases (warm-ups and filler phases left out; errored
    requests too, and concurrency groups with an error). ``names_to_kinds``: {workload: kind}."""
    out: dict[tuple[str, str, str], np.ndarray] = {}
    if req.empty:
        return out
    measured = req[(req["warmup"] != True) & ~_filler_rows(req, names_to_kinds)]
    ok = measured[measured["error"].isna()]
    for (wl, ph), g in ok.groupby(["workload", "phase"], sort=False):
        for m in _COMPARED_PER_REQUEST:
            if m.compared_in(g):
                v = finite(g[m.name].to_numpy())
                if v.size:
                    out[(wl, ph, m.name)] = v
    groups = groups_frame(measured)
    groups = groups[groups["n_errors"] == 0]
    for m in _COMPARED_PER_GROUP:
        done = groups[groups[m.name].notna()]
        for (wl, ph), g in done.groupby(["workload", "phase"], sort=False):
            out[(wl, ph, m.name)] = g[m.name].to_numpy(dtype=float)
    return out


def derived_values(summary: dict | None, names_to_kinds: dict[str, str]) -> dict[tuple[str, str], float]:
    """{(workload, figure): value} of the derived figures a summary holds whose declaration (by
    the workload's kind) says ``compared``."""
    out = {}
    for wl, w in ((summary or {}).get("workloads") or {}).items():
        kind = kind_of(wl, names_to_kinds)
        compared = {d.name for d in kind.derived if d.compared} if kind is not None else set()
        for k, v in (w.get("derived") or {}).items():
            if k in compared and v is not None:
                out[(wl, k)] = float(v)
    return out


def compare_variant(name: str, base_req: pd.DataFrame, cand_req: pd.DataFrame,
                    base_summary: dict | None, cand_summary: dict | None, thresholds: dict[str, float],
                    base_kinds: dict[str, str], cand_kinds: dict[str, str]) -> list[MetricRow]:
    """Metric rows of one variant that ran ok on both sides (``*_kinds``: {workload: kind} of each run)."""
    rows: list[MetricRow] = []
    bs, cs = metric_samples(base_req, base_kinds), metric_samples(cand_req, cand_kinds)
    for key in list(dict.fromkeys([*cs, *bs])):
        wl, ph, m = key
        info = METRICS[m]
        thr, src = threshold_for(thresholds, wl, ph, m)
        b, c = bs.get(key, np.array([])), cs.get(key, np.array([]))
        d = decide(b, c, info.higher_is_better, thr)
        rows.append(MetricRow(name, wl, ph, m, info.unit, info.higher_is_better,
                              float(np.median(b)) if b.size else None, float(np.median(c)) if c.size else None,
                              int(b.size), int(c.size), d.change, thr, src, d.test, d.p_value, d.state, d.note))
    bd, cd = derived_values(base_summary, base_kinds), derived_values(cand_summary, cand_kinds)
    figures = derived_figures()
    for key in list(dict.fromkeys([*cd, *bd])):
        wl, m = key
        info = figures[m]
        thr, src = threshold_for(thresholds, wl, "*", m)
        b = [bd[key]] if key in bd else []
        c = [cd[key]] if key in cd else []
        d = decide(b, c, info.higher_is_better, thr)
        rows.append(MetricRow(name, wl, "*", m, info.unit, info.higher_is_better, b[0] if b else None,
                              c[0] if c else None, len(b), len(c), d.change, thr, src, d.test, d.p_value,
                              d.state, d.note or "one value per run"))
    return rows


def compare_runs(base: results.LoadedRun | None, cand: results.LoadedRun) -> Comparison:
    """Load both runs' rows and compare them (``base`` None: no baseline; expectations only)."""
    thresholds, notes = run_thresholds(cand.manifest)
    comp = Comparison("pass", notes=notes, candidate=run_info(cand))
    comp.expectations = evaluate_run_expectations(cand.paths.root)
    if not cand.complete:
        comp.notes.append("the candidate run is not COMPLETE (interrupted or still running)")
    if base is None:
        comp.verdict = "regression" if comp.failing else "no_baseline"
        comp.notes.append("no baseline run: only the candidate's expectations were evaluated")
        return comp
    comp.baseline = run_info(base)
    if comp.baseline["scenario_hash"] != comp.candidate["scenario_hash"]:
        comp.notes.append("the scenario text differs between the two runs")
    if base.scenario_name != cand.scenario_name:
        comp.notes.append(f"different scenarios: {base.scenario_name} vs {cand.scenario_name}")
    base_kinds, cand_kinds = run_workload_kinds(base.manifest), run_workload_kinds(cand.manifest)
    base_v = {v.name: v for v in base.variants}
    cand_v = {v.name: v for v in cand.variants}
    hashes_b = {e["name"]: e.get("config_hash") for e in base.manifest.get("variants", [])}
    hashes_c = {e["name"]: e.get("config_hash") for e in cand.manifest.get("variants", [])}
    for name in list(dict.fromkeys([*cand_v, *base_v])):
        bv, cv = base_v.get(name), cand_v.get(name)
        state, note = variant_state(bv.status if bv else None, cv.status if cv else None)
        changed = None if (bv is None or cv is None) else hashes_b.get(name) != hashes_c.get(name)
        comp.variants.append(VariantRow(name, bv.status.get("state") if bv else None,
                                        cv.status.get("state") if cv else None, state, note, changed))
        if state == "compared":
            comp.metrics.extend(compare_variant(name, variant_requests(bv), variant_requests(cv),
                                                bv.summary, cv.summary, thresholds, base_kinds, cand_kinds))
    comp.verdict = "regression" if comp.failing else "pass"
    return comp

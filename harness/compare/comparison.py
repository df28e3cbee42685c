"""The comparison as stored: its rows (`MetricRow` per compared metric, `VariantRow` per variant),
the round an INCONCLUSIVE look advises (`NextRound`), the `Comparison` with its outcome (PASS /
FAIL / INCONCLUSIVE) and comparison.json's shape, and the state of each variant from its two
status.json files. The rows are built in `harness.compare.rows`, gated and judged in
`harness.compare.gating`, from two runs in `harness.compare.two_runs`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from harness.analysis.verdict import Outcome
from harness.compare.curves import (
    CurvePointRow,
)
from harness.store import results
from harness.store.variant_status import VariantStatus

COMPARISON_VERSION = 2
METRIC_STATES = ("regression", "improved", "unchanged", "inconclusive", "not_comparable")
FAILING_VARIANT_STATES = ("introduced_failure", "failed")
UNJUDGED_VARIANT_STATES = ("not_comparable", "fixed")  # in the candidate, but nothing to compare with


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
    most the scenario allows, the repeats it adds, the variants it runs, the inconclusive
    gating rows it is for ("variant workload.phase.metric: why") and the workloads those rows
    are of (the round runs only them)."""

    number: int
    most: int
    repeats: int
    variants: list[str]
    rows: list[str]
    workloads: list[str] = field(default_factory=list)


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


def status_wall_s(status: VariantStatus | None) -> float | None:
    """Seconds from a variant's ``started_at`` to its ``ended_at`` (None: either is missing)."""
    if status is None or status.started_at is None or status.ended_at is None:
        return None
    try:
        start = datetime.fromisoformat(str(status.started_at))
        end = datetime.fromisoformat(str(status.ended_at))
    except ValueError:
        return None
    return round(max(0.0, (end - start).total_seconds()), 3)


def variant_state(
    base_status: VariantStatus | None, cand_status: VariantStatus | None, *, complete: bool = True
) -> tuple[str, str]:
    """(state, note) of one variant from its two status.json dicts (None: not in that run).
    ``complete``: both runs are COMPLETE, so a variant the manifest lists without a status.json
    (state ``not_run``) lost its folder or file: not comparable, never a pass."""
    if cand_status is None or base_status is None:
        return "not_comparable", "only in the " + ("baseline" if cand_status is None else "candidate")
    cs, bs = cand_status.state, base_status.state
    for side, s in (("candidate", cs), ("baseline", bs)):
        if s in (None, "not_run"):
            where = "in a COMPLETE run: its folder or status.json is missing" if complete else "(not run)"
            return "not_comparable", f"no status in the {side} {where}"
    if cs in ("running", "interrupted"):
        return "not_comparable", f"candidate state {cs}: it did not finish"
    declared = cand_status.expect == "startup_failed"
    if cs != "ok":
        if declared and cand_status.expect_met:
            return "skipped", f"failed as declared ({cand_status.cause})"
        if bs == "ok":
            return "introduced_failure", f"candidate {cs} ({cand_status.cause}); baseline ok"
        return "failed", f"candidate {cs} ({cand_status.cause}); baseline {bs}"
    if declared:  # started although it was expected to fail
        return "failed", "expected startup_failed, but the server started"
    if bs != "ok":
        return "fixed", f"baseline {bs} ({base_status.cause}); candidate ok: nothing to compare with"
    return "compared", ""

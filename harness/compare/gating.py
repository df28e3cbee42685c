"""Which rows gate and the comparison's outcome: a gate (the candidate scenario's ``gate:``; none:
every row) marks its rows and variants, Holm's procedure over the gating rows keeps the family-wise
false alarm at alpha, and `judge` sets PASS / FAIL / INCONCLUSIVE with its reasons. Pure.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from harness.analysis.verdict import Outcome
from harness.compare.comparison import (
    FAILING_VARIANT_STATES,
    UNJUDGED_VARIANT_STATES,
    Comparison,
    MetricRow,
    VariantRow,
)
from harness.compare.statistics import ALPHA, holm_rejects
from harness.compare.tails import TAIL_SHARE_TEST
from harness.spec.values import Gate

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
            fail.append(f"{m.variant} {m.name}: regression {_change(m)} ({m.note or m.test})")
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


def _change(m: MetricRow) -> str:
    """A relative change in %, a tail share's rise in points of the units."""
    if m.test == TAIL_SHARE_TEST and m.change is not None:
        return f"{m.change * 100:+.1f} points"
    return _pct(m.change)


def _pct(v: float | None) -> str:
    return "—" if v is None or not math.isfinite(v) else f"{v * 100:+.1f}%"

"""Rows a median cannot see: a metric's tail, and its drift within one run. Pure (arrays in,
`Decision` out), beside `harness.compare.statistics`, whose `Decision` and alpha they share.

Tail (`decide_tail`, rows ``<metric>_p<q>``, e.g. ``ttft_ms_p99``): one value per independent
unit a side (lower-is-better metrics). The change is that of the q-quantiles. The test counts the
values beyond the *baseline's* q-quantile widened by the threshold, T = q_b x (1 + threshold):
a one-sided Fisher exact test of "the candidate has more values beyond T than the baseline"
(regression; the mirror image, beyond T' = q_c x (1 + threshold), for an improvement). It asks
what a user meets -- more requests slower than the old tail -- and it is exact at any n. One
request in 20 stalling 2x moves the median nowhere and p99 by 2x: 5 of 100 values beyond T
against 1 is p = 0.11, 10 of 200 against 2 is 0.018, 15 of 300 against 3 is 0.0034: a tail row
needs a few hundred units a side to see a 5 % tail.
A q-quantile needs 1 / (1 - q) values a side to be more than the maximum (100 for p99); fewer is
inconclusive, and the row says so.

Drift (`decide_drift`, rows ``<metric>_drift``): within the candidate run only -- its last third
of a phase's units (in the order sent) against its first third, with the same test and
threshold as any row (`harness.compare.statistics.decide`): a server that slows down over its
life shows it on one night, whatever the baseline did. It needs 3 x ``MIN_DRIFT_UNITS`` units.
"""

from __future__ import annotations

import math

import numpy as np

from harness.compare.statistics import ALPHA, Decision, decide, finite, relative_change

TAIL_TEST = "tail_exceedance_fisher"
MIN_DRIFT_UNITS = 8  # a third: the rank test's smallest sample (`statistics.MIN_MANN_WHITNEY`)


def tail_min_values(q: float) -> int:
    """The fewest values a side whose q-quantile is more than the maximum: ceil(1 / (1 - q))."""
    return math.ceil(1.0 / (1.0 - q) - 1e-9)


def _beyond_p(k_a: int, n_a: int, k_b: int, n_b: int) -> float:
    """One-sided Fisher exact p that side a has a larger share beyond the line than side b."""
    from scipy.stats import hypergeom

    if k_a + k_b == 0:
        return 1.0
    return float(hypergeom.sf(k_a - 1, n_a + n_b, k_a + k_b, n_a))


def decide_tail(base_values, cand_values, threshold: float, q: float = 0.99) -> Decision:
    """The state of a tail row (a lower-is-better metric's q-quantile): see the module docstring."""
    base, cand = finite(base_values), finite(cand_values)
    if base.size == 0 or cand.size == 0:
        side = "baseline" if base.size == 0 else "candidate"
        return Decision("not_comparable", None, "none", None, f"no values in the {side}")
    need = tail_min_values(q)
    qb, qc = float(np.quantile(base, q)), float(np.quantile(cand, q))
    change = relative_change(qb, qc)
    pct = f"p{round(q * 100):d}"
    if min(base.size, cand.size) < need:
        return Decision(
            "inconclusive",
            change,
            "none",
            None,
            f"{base.size} vs {cand.size} values: a {pct} needs {need}+ a side to be more than the maximum",
        )
    line_b, line_c = qb * (1 + threshold), qc * (1 + threshold)
    k_c, k_b = int((cand > line_b).sum()), int((base > line_b).sum())
    p_worse = _beyond_p(k_c, cand.size, k_b, base.size)
    j_b, j_c = int((base > line_c).sum()), int((cand > line_c).sum())
    p_better = _beyond_p(j_b, base.size, j_c, cand.size)
    worse = p_worse <= p_better
    p = p_worse if worse else p_better
    counts = (
        f"{k_c}/{cand.size} candidate vs {k_b}/{base.size} baseline values beyond the baseline's {pct} "
        f"+ {threshold:.0%} ({line_b:.4g})"
        if worse
        else f"{j_b}/{base.size} baseline vs {j_c}/{cand.size} candidate values beyond the candidate's {pct} "
        f"+ {threshold:.0%} ({line_c:.4g})"
    )
    clears = abs(change) >= threshold
    if p < ALPHA and clears and (change > 0) == worse:
        return Decision("regression" if worse else "improved", change, TAIL_TEST, p, counts)
    if clears:
        return Decision("inconclusive", change, TAIL_TEST, p, f"beyond the threshold but not significant: {counts}")
    return Decision("unchanged", change, TAIL_TEST, p, f"within the threshold: {counts}")


def decide_drift(ordered_values, higher_is_better: bool, threshold: float) -> tuple[Decision, int, int]:
    """The drift row of one phase of the candidate run: its last third of units against its first
    third (values in the order sent). Returns (decision, units in the first third, in the last)."""
    v = finite(ordered_values)
    third = v.size // 3
    if third < MIN_DRIFT_UNITS:
        note = (
            f"{v.size} units in the run: a drift check compares the first and last third, "
            f"{MIN_DRIFT_UNITS}+ units each ({3 * MIN_DRIFT_UNITS}+ in all)"
        )
        return Decision("inconclusive", None, "none", None, note), third, third
    first, last = v[:third], v[-third:]
    d = decide(first, last, higher_is_better, threshold)
    note = "last third of the candidate run vs its first third" + (f"; {d.note}" if d.note else "")
    return Decision(d.state, d.change, d.test, d.p_value, note, d.ci_low, d.ci_high, d.mde), third, third

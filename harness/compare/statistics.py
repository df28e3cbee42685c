"""The statistics of a comparison: the state of one metric from its two samples, the significance
test, and which threshold applies. Pure (no files, no runs); see `harness.compare` for the rule."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

DEFAULT_THRESHOLD = 0.05
ALPHA = 0.05
MIN_MANN_WHITNEY = 6
MIN_CI = 3


@dataclass(frozen=True)
class Decision:
    state: str
    change: float | None  # relative change of the median, candidate vs baseline
    test: str  # mann_whitney | ci_overlap | none
    p_value: float | None
    note: str = ""


def finite(values: Sequence[float] | np.ndarray) -> np.ndarray:
    """The finite values as a float array (NaN and ±inf dropped)."""
    a = np.asarray(values, dtype=float)
    return a[np.isfinite(a)]


def _ci95(a: np.ndarray) -> tuple[float, float]:
    from scipy import stats

    m = float(a.mean())
    half = float(stats.t.ppf(0.975, a.size - 1) * a.std(ddof=1) / math.sqrt(a.size))
    return m - half, m + half


def significance(base: np.ndarray, cand: np.ndarray) -> tuple[str, bool | None, float | None]:
    """(test, differs, p): Mann-Whitney U with ≥ 6 a side, CI overlap with ≥ 3, else (none, None)."""
    if base.size >= MIN_MANN_WHITNEY and cand.size >= MIN_MANN_WHITNEY:
        from scipy.stats import mannwhitneyu

        if np.ptp(np.concatenate([base, cand])) == 0:
            return "mann_whitney", False, 1.0
        p = float(mannwhitneyu(base, cand, alternative="two-sided").pvalue)
        return "mann_whitney", p < ALPHA, p
    if base.size >= MIN_CI and cand.size >= MIN_CI:
        lo_b, hi_b = _ci95(base)
        lo_c, hi_c = _ci95(cand)
        return "ci_overlap", hi_b < lo_c or hi_c < lo_b, None
    return "none", None, None


def decide(base_values: Sequence[float], cand_values: Sequence[float], higher_is_better: bool,
           threshold: float) -> Decision:
    """The state of one metric from its two samples. Pure; see `harness.compare`."""
    base, cand = finite(base_values), finite(cand_values)
    if base.size == 0 or cand.size == 0:
        side = "baseline" if base.size == 0 else "candidate"
        return Decision("not_comparable", None, "none", None, f"no values in the {side}")
    b, c = float(np.median(base)), float(np.median(cand))
    if b == 0:
        change = 0.0 if c == 0 else math.copysign(math.inf, c)
    else:
        change = (c - b) / abs(b)
    better = change > 0 if higher_is_better else change < 0
    clears = abs(change) >= threshold
    test, differs, p = significance(base, cand)
    if not clears:
        return Decision("unchanged", change, test, p, "within the threshold")
    if differs is None:
        return Decision("insufficient_data", change, test, p,
                        f"{base.size} vs {cand.size} values: too few for a test (need {MIN_CI}+ a side)")
    if not differs:
        return Decision("unchanged", change, test, p, "beyond the threshold but not significant")
    return Decision("improved" if better else "regression", change, test, p)


def threshold_for(thresholds: dict[str, float], workload: str, phase: str, metric: str) -> tuple[float, str]:
    """(fraction, key it came from) for one metric; see `harness.compare` for the order."""
    short = metric
    for suffix in ("_ms", "_s"):
        if metric.endswith(suffix) and not metric.endswith("tok_s"):
            short = metric[: -len(suffix)]
            break
    for key in (f"{workload}.{phase}.{metric}", f"{workload}.{metric}", metric, f"{short}_p50",
                f"{metric}_p50", "default"):
        if key in thresholds:
            return thresholds[key], key
    return DEFAULT_THRESHOLD, "harness default"

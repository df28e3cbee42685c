"""The statistics of a comparison: the state of one metric from its two samples, the test behind
it, its minimum detectable effect, and which threshold applies. Pure (no files, no runs); see
`harness.compare` for the rule and docs/reports.md for why each test is used where it is.

Which test, by the smaller side's sample size n:

  n < 2      none: one value a side has no spread to judge a change against → inconclusive
  2 ≤ n < 8  Yuen's trimmed t-test on log values: Welch's t on 20 % trimmed means (a test of a
             ratio; raw values when a value is ≤ 0), plain Welch below 5 values where nothing is
             trimmed. Its interval widens honestly with few values, and trimming keeps one slow
             request of six from deciding it; Mann-Whitney cannot reach p < 0.05 below 4 a side,
             and a bootstrap at this n sees less spread than there is (at 2 a side any
             non-overlap looks certain).
  n ≥ 8      Mann-Whitney U, two-sided (rank based: robust to the outliers request latencies
             have), with a seeded percentile bootstrap (``BOOTSTRAP_RESAMPLES`` resamples) of
             the ratio of the medians for the interval and the minimum detectable effect (above
             ``BOOTSTRAP_MAX_N`` values a side: the medians' distribution-free order-statistic
             intervals, combined on the log scale).

The minimum detectable effect (``mde``, a relative change) is the half-width of that interval
on the log scale: a change of the median smaller than it could not have been told from the
observed spread at this n.

The unit of evidence. The values a test counts must be independent: requests of one batch or
one concurrent pass share that pass's scheduling and are one observation, not k. `per_unit`
reduces a row's values to one per independent unit (the median of each unit's values), and
`decide` is given those; its notes name the unit (``request``, ``group``, ``repeat``) and n is
the number of units.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

DEFAULT_THRESHOLD = 0.05
ALPHA = 0.05
MIN_VALUES = 2  # a side: fewer has no spread
MIN_MANN_WHITNEY = 8  # a side: from here on Mann-Whitney + bootstrap, below it Yuen/Welch on logs
TRIM = 0.2  # Yuen's trimming: floor(0.2 n) values cut from each end (none below 5 values)
BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_SEED = 20260101
BOOTSTRAP_MAX_N = 500  # a side: above it, order-statistic intervals of the medians instead
Z95 = 1.959964

STATES = ("regression", "improved", "unchanged", "inconclusive", "not_comparable")


@dataclass(frozen=True)
class Decision:
    state: str  # one of STATES
    change: float | None  # relative change of the median, candidate vs baseline
    test: str  # welch_t_log | yuen_t_log | welch_t | yuen_t | mann_whitney | none
    p_value: float | None
    note: str = ""
    ci_low: float | None = None  # 95 % interval of the relative change
    ci_high: float | None = None
    mde: float | None = None  # minimum detectable effect (relative); None: nothing can be detected


@dataclass(frozen=True)
class Significance:
    test: str
    p_value: float | None
    ci_low: float | None
    ci_high: float | None
    mde: float | None


def finite(values: Sequence[float] | np.ndarray) -> np.ndarray:
    """The finite values as a float array (NaN and ±inf dropped)."""
    a = np.asarray(values, dtype=float)
    return a[np.isfinite(a)]


def per_unit(values: Sequence[float] | np.ndarray, units: Sequence[object] | None) -> np.ndarray:
    """One value per independent unit: the median of the finite values sharing a unit label, in
    order of the units' first appearance. A label of None (or NaN) is a unit of its own value;
    ``units`` None: every value is its own unit. Pure."""
    a = np.asarray(values, dtype=float)
    if units is None:
        return a[np.isfinite(a)]
    if len(units) != a.size:
        raise ValueError(f"{a.size} values but {len(units)} unit labels")
    groups: dict[object, list[float]] = {}
    for i, (v, u) in enumerate(zip(a, units)):
        if not math.isfinite(v):
            continue
        alone = u is None or (isinstance(u, float) and math.isnan(u))
        groups.setdefault(("value", i) if alone else ("unit", u), []).append(float(v))
    return np.array([float(np.median(g)) for g in groups.values()], dtype=float)


def relative_change(base: float, cand: float) -> float:
    """(cand - base) / |base|; ±inf (or 0) when the base is 0."""
    if base == 0:
        return 0.0 if cand == 0 else math.copysign(math.inf, cand)
    return (cand - base) / abs(base)


def _welch(base: np.ndarray, cand: np.ndarray, alpha: float = ALPHA) -> Significance:
    """Yuen's trimmed t-test (Welch's t on 20 % trimmed means, g = floor(0.2 n) values cut from
    each end; plain Welch below 5 values: ``scipy.stats.ttest_ind(equal_var=False, trim=0.2)``) on
    log values (raw values when one is ≤ 0): p, the 95 % interval of the relative change and the
    minimum detectable effect. Trimming keeps one slow request of six from deciding the test."""
    from scipy import stats

    logs = bool((base > 0).all() and (cand > 0).all())
    b, c = (np.log(base), np.log(cand)) if logs else (base, cand)
    trimmed = int(TRIM * b.size) > 0 or int(TRIM * c.size) > 0
    test = ("yuen_t" if trimmed else "welch_t") + ("_log" if logs else "")
    mb = float(stats.trim_mean(b, TRIM))
    with warnings.catch_warnings():  # nearly equal values: scipy warns of precision loss; the
        warnings.simplefilter("ignore", RuntimeWarning)  # constant case is handled below
        r = stats.ttest_ind(c, b, equal_var=False, trim=TRIM)
    if not math.isfinite(r.statistic):  # both sides constant: the difference is exact
        diff = float(stats.trim_mean(c, TRIM)) - mb
        p = 1.0 if diff == 0 else 0.0
        lo = hi = diff
        half = 0.0
    else:
        ci = r.confidence_interval(1 - alpha)
        p, lo, hi = float(r.pvalue), float(ci.low), float(ci.high)
        half = (hi - lo) / 2
    if logs:
        return Significance(test, p, math.expm1(lo), math.expm1(hi), math.expm1(half))
    scale = abs(mb) or math.nan
    return Significance(test, p, lo / scale, hi / scale, half / scale if math.isfinite(scale) else None)


def _median_log_se(a: np.ndarray) -> float | None:
    """Standard error of log(median) from the distribution-free 95 % order-statistic interval of
    the median (for large samples); None when a bound is ≤ 0."""
    a = np.sort(a)
    k = max(0, math.floor(a.size / 2 - Z95 * math.sqrt(a.size) / 2))
    lo, hi = a[k], a[a.size - 1 - k]
    return None if lo <= 0 else float(math.log(hi) - math.log(lo)) / (2 * Z95)


def _bootstrap_ratio(
    base: np.ndarray, cand: np.ndarray, seed: int, alpha: float = ALPHA
) -> tuple[float, float, float] | None:
    """(low, high, half-width) of the 95 % interval of log(median ratio): a percentile bootstrap;
    above ``BOOTSTRAP_MAX_N`` values a side (a resample matrix that big would not fit in memory)
    the order-statistic intervals of the two medians combined on the log scale. None when a
    median can be ≤ 0."""
    if max(base.size, cand.size) > BOOTSTRAP_MAX_N:
        sb, sc = _median_log_se(base), _median_log_se(cand)
        mb, mc = float(np.median(base)), float(np.median(cand))
        if sb is None or sc is None or mb <= 0 or mc <= 0:
            return None
        d, half = math.log(mc) - math.log(mb), Z95 * math.sqrt(sb**2 + sc**2)
        return d - half, d + half, half
    rng = np.random.default_rng(seed)
    mb = np.median(base[rng.integers(0, base.size, (BOOTSTRAP_RESAMPLES, base.size))], axis=1)
    mc = np.median(cand[rng.integers(0, cand.size, (BOOTSTRAP_RESAMPLES, cand.size))], axis=1)
    if (mb <= 0).any() or (mc <= 0).any():
        return None
    lo, hi = np.percentile(np.log(mc) - np.log(mb), [100 * alpha / 2, 100 * (1 - alpha / 2)])
    return float(lo), float(hi), float(hi - lo) / 2


def significance(base: np.ndarray, cand: np.ndarray, seed: int = BOOTSTRAP_SEED, alpha: float = ALPHA) -> Significance:
    """The test the sample sizes allow (see the module docstring), its p-value, the 1 - alpha
    interval of the relative change and the minimum detectable effect."""
    n = min(base.size, cand.size)
    if n < MIN_VALUES:
        return Significance("none", None, None, None, None)
    if n < MIN_MANN_WHITNEY:
        return _welch(base, cand, alpha)
    from scipy.stats import mannwhitneyu

    p = (
        1.0
        if np.ptp(np.concatenate([base, cand])) == 0
        else float(mannwhitneyu(base, cand, alternative="two-sided").pvalue)
    )
    boot = _bootstrap_ratio(base, cand, seed, alpha)
    if boot is None:  # a median ≤ 0: the interval of a ratio means nothing; Welch's on raw values
        w = _welch(base, cand, alpha)
        return Significance("mann_whitney", p, w.ci_low, w.ci_high, w.mde)
    lo, hi, half = boot
    return Significance("mann_whitney", p, math.expm1(lo), math.expm1(hi), math.expm1(half))


def decide(
    base_values: Sequence[float],
    cand_values: Sequence[float],
    higher_is_better: bool,
    threshold: float,
    seed: int = BOOTSTRAP_SEED,
    unit: str = "value",
    alpha: float = ALPHA,
) -> Decision:
    """The state of one metric from its two samples, one value per independent unit (`per_unit`;
    ``unit`` names it in the notes). Pure (the bootstrap is seeded).

    regression / improved  worse / better by at least ``threshold`` and significant (p < ALPHA)
    unchanged              significant but within the threshold, or not significant while the
                           minimum detectable effect is within the threshold (a change of the
                           threshold's size would have been seen)
    inconclusive           fewer than 2 values a side, or not significant while the change or
                           the minimum detectable effect exceeds the threshold
    not_comparable         no value on one side
    """
    base, cand = finite(base_values), finite(cand_values)
    if base.size == 0 or cand.size == 0:
        side = "baseline" if base.size == 0 else "candidate"
        return Decision("not_comparable", None, "none", None, f"no values in the {side}")
    change = relative_change(float(np.median(base)), float(np.median(cand)))
    s = significance(base, cand, seed, alpha)
    common = {
        "change": change,
        "test": s.test,
        "p_value": s.p_value,
        "ci_low": s.ci_low,
        "ci_high": s.ci_high,
        "mde": s.mde,
    }
    if s.p_value is None:
        return Decision(
            "inconclusive",
            note=f"{base.size} vs {cand.size} {unit}s: a side needs {MIN_VALUES}+ to have a spread to judge against"
            + (" (the requests of one concurrent group are one observation: add repeats)" if unit == "group" else ""),
            **common,
        )
    clears = abs(change) >= threshold
    if s.p_value < alpha:
        if not clears:
            return Decision("unchanged", note="significant but within the threshold", **common)
        better = change > 0 if higher_is_better else change < 0
        return Decision("improved" if better else "regression", **common)
    if clears:
        return Decision("inconclusive", note="beyond the threshold but not significant", **common)
    if s.mde is None or not math.isfinite(s.mde) or s.mde > threshold:
        mde = "unknown" if s.mde is None or not math.isfinite(s.mde) else f"{s.mde * 100:.1f}%"
        return Decision(
            "inconclusive",
            note=f"minimum detectable effect {mde} exceeds the threshold "
            f"{threshold * 100:.0f}%: a change of the threshold's size could hide in this spread",
            **common,
        )
    return Decision("unchanged", note="within the threshold", **common)


def look_alpha(rounds: int, alpha: float = ALPHA) -> float:
    """The significance each look of a sequential comparison gets when up to ``rounds`` extra
    rounds may follow the first look: alpha spent equally over the 1 + rounds looks (Bonferroni
    over the looks, a Pocock-shaped spending), so the chance of any false alarm over every look
    an operator may take stays <= alpha whatever the stopping rule. Pure."""
    return alpha / (1 + max(0, int(rounds)))


def holm_rejects(p_values: Sequence[float], alpha: float = ALPHA) -> list[bool]:
    """Holm's step-down procedure: which of ``p_values`` are significant with the family-wise
    false-alarm rate at most ``alpha`` (the i-th smallest against alpha / (m - i), stopping at
    the first that is not). Pure."""
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    out = [False] * m
    for rank, i in enumerate(order):
        if p_values[i] >= alpha / (m - rank):
            break
        out[i] = True
    return out


def threshold_for(thresholds: dict[str, float], workload: str, phase: str, metric: str) -> tuple[float, str]:
    """(fraction, key it came from) for one metric; see `harness.compare` for the order."""
    short = metric
    for suffix in ("_ms", "_s"):
        if metric.endswith(suffix) and not metric.endswith("tok_s"):
            short = metric[: -len(suffix)]
            break
    for key in (
        f"{workload}.{phase}.{metric}",
        f"{workload}.{metric}",
        metric,
        f"{short}_p50",
        f"{metric}_p50",
        "default",
    ):
        if key in thresholds:
            return thresholds[key], key
    return DEFAULT_THRESHOLD, "harness default"

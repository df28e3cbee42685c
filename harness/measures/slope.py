"""Pure: is a series drifting? A Theil–Sen slope with a bootstrap interval, and the verdict on it.

A soak (`harness.workloads.kinds` declares which series and how each is reduced to one point per
time slice) asks of every series whether it grows (or shrinks, for free memory) by more than a
tolerance per hour. The points are the slices' reductions (a slice's median RSS, its page-cache
minimum), not the raw samples: samples half a second apart are not independent, slices of tens of
seconds nearly are, and the interval is only honest over nearly independent points.

* ``theil_sen(x, y)``: the median of the pairwise slopes (robust to a few outlying slices: a
  spike of one slice moves it little, unlike least squares);
* ``bootstrap_interval``: the slope re-estimated on ``n_boot`` resamples of the points (pairs
  drawn with replacement, seeded: the same points give the same interval), its ``level`` central
  percentile interval;
* ``judge_trend``: LEAK when the whole interval lies above the tolerance in the series' bad
  direction, STABLE when the whole interval lies below it, INCONCLUSIVE otherwise or when there
  are fewer than ``min_points`` points (too short a soak, or too noisy a series, says which).

Slopes and intervals are per hour of the points' time axis (seconds in, per hour out).
"""

from __future__ import annotations

import math
import typing
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np

Verdict = typing.Literal["LEAK", "STABLE", "INCONCLUSIVE"]
LEAK: Verdict = "LEAK"
STABLE: Verdict = "STABLE"
INCONCLUSIVE: Verdict = "INCONCLUSIVE"

DEFAULT_BOOTSTRAP = 1000
DEFAULT_LEVEL = 0.95
MIN_POINTS = 5  # below this, no verdict: a slope of four points says little whatever its interval


def theil_sen(x: Sequence[float], y: Sequence[float]) -> float:
    """The median of the slopes of every pair of points with distinct x; nan when there is none."""
    xa, ya = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    i, j = np.triu_indices(xa.size, k=1)
    dx = xa[j] - xa[i]
    keep = dx != 0
    if not keep.any():
        return math.nan
    return float(np.median((ya[j] - ya[i])[keep] / dx[keep]))


def bootstrap_interval(
    x: Sequence[float],
    y: Sequence[float],
    *,
    n_boot: int = DEFAULT_BOOTSTRAP,
    level: float = DEFAULT_LEVEL,
    seed: int = 0,
) -> tuple[float, float]:
    """The ``level`` percentile interval of the Theil–Sen slope over ``n_boot`` pair resamples
    (seeded); resamples whose points share one x are dropped. (nan, nan) with fewer than 3 points."""
    xa, ya = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if xa.size < 3:
        return math.nan, math.nan
    rng = np.random.default_rng(seed)
    slopes = []
    for _ in range(n_boot):
        pick = rng.integers(0, xa.size, xa.size)
        s = theil_sen(xa[pick], ya[pick])
        if not math.isnan(s):
            slopes.append(s)
    if not slopes:
        return math.nan, math.nan
    tail = (1.0 - level) / 2.0 * 100.0
    lo, hi = np.percentile(slopes, [tail, 100.0 - tail])
    return float(lo), float(hi)


@dataclass(frozen=True)
class Trend:
    """One series' slope per hour, its interval, and the verdict on it. ``slope_per_h`` and the
    interval are in the series' own direction (a falling MemAvailable is negative); ``rising_is_bad``
    says which way is a leak; ``tolerance_per_h`` is the drift in the bad direction that is
    accepted."""

    verdict: Verdict
    slope_per_h: float | None
    lo_per_h: float | None
    hi_per_h: float | None
    tolerance_per_h: float
    rising_is_bad: bool
    n_points: int
    span_h: float
    level: float
    reason: str

    def to_json(self) -> dict:
        return asdict(self)


def _finite(v: float) -> float | None:
    return None if math.isnan(v) else v


def judge_trend(
    t_s: Sequence[float],
    values: Sequence[float],
    *,
    tolerance_per_h: float,
    rising_is_bad: bool = True,
    min_points: int = MIN_POINTS,
    n_boot: int = DEFAULT_BOOTSTRAP,
    level: float = DEFAULT_LEVEL,
    seed: int = 0,
) -> Trend:
    """The verdict on one series of points (``t_s`` seconds, ``values`` in the series' unit):
    LEAK when the interval's bound nearest zero is beyond ``tolerance_per_h`` in the bad
    direction, STABLE when its far bound is within it, else INCONCLUSIVE (module docstring).
    Points whose value is None or not finite are left out."""
    if not tolerance_per_h > 0:
        raise ValueError(f"tolerance_per_h must be > 0, got {tolerance_per_h}")
    pts = [
        (float(t), float(v))
        for t, v in zip(t_s, values)
        if v is not None and t is not None and math.isfinite(float(v)) and math.isfinite(float(t))
    ]
    n = len(pts)
    span_h = (max(p[0] for p in pts) - min(p[0] for p in pts)) / 3600.0 if pts else 0.0
    if n < max(min_points, 3):
        return Trend(
            INCONCLUSIVE,
            None,
            None,
            None,
            tolerance_per_h,
            rising_is_bad,
            n,
            span_h,
            level,
            f"{n} points, fewer than the {max(min_points, 3)} a verdict needs: too short a soak",
        )
    x = [p[0] / 3600.0 for p in pts]
    y = [p[1] for p in pts]
    slope = theil_sen(x, y)
    lo, hi = bootstrap_interval(x, y, n_boot=n_boot, level=level, seed=seed)
    if math.isnan(slope) or math.isnan(lo):
        return Trend(
            INCONCLUSIVE, None, None, None, tolerance_per_h, rising_is_bad, n, span_h, level, "no two distinct times"
        )
    sign = 1.0 if rising_is_bad else -1.0
    near, far = sorted((sign * lo, sign * hi))  # the interval in the bad direction
    way = "growth" if rising_is_bad else "fall"
    if near > tolerance_per_h:
        verdict, reason = LEAK, f"{way} of at least {near:.4g}/h, beyond the tolerance of {tolerance_per_h:.4g}/h"
    elif far < tolerance_per_h:
        verdict, reason = STABLE, f"{way} of at most {far:.4g}/h, within the tolerance of {tolerance_per_h:.4g}/h"
    else:
        verdict = INCONCLUSIVE
        reason = (
            f"the interval of {way} [{near:.4g}, {far:.4g}]/h straddles the tolerance of {tolerance_per_h:.4g}/h: "
            "too noisy or too short a soak to tell"
        )
    return Trend(verdict, slope, _finite(lo), _finite(hi), tolerance_per_h, rising_is_bad, n, span_h, level, reason)

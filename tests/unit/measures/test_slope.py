"""The slope test a soak judges each series with: Theil–Sen, its bootstrap interval, the verdict."""

from __future__ import annotations

import math
import random

import pytest

from harness.measures.slope import INCONCLUSIVE, LEAK, STABLE, bootstrap_interval, judge_trend, theil_sen


def _line(n: int, per_h: float, noise: float, seed: int = 0, step_s: float = 30.0):
    rng = random.Random(seed)
    t = [i * step_s for i in range(n)]
    return t, [1000.0 + per_h * ti / 3600.0 + rng.gauss(0, noise) for ti in t]


def test_theil_sen_is_the_median_pairwise_slope_and_shrugs_off_one_spike():
    x = [0, 1, 2, 3, 4, 5, 6]
    y = [2 * xi for xi in x]
    assert theil_sen(x, y) == pytest.approx(2.0)
    y[3] = 1000.0  # one slice's spike: least squares would be dragged far off
    assert theil_sen(x, y) == pytest.approx(2.0)
    assert math.isnan(theil_sen([1, 1, 1], [1, 2, 3]))  # no two distinct times


def test_the_interval_is_seeded_and_covers_the_true_slope():
    t, v = _line(20, 3600.0, 5.0)  # 1 unit/s = 3600 units/h, in hours below
    x = [ti / 3600.0 for ti in t]
    lo, hi = bootstrap_interval(x, v, seed=1)
    assert lo < 3600.0 < hi
    assert bootstrap_interval(x, v, seed=1) == (lo, hi)  # the same points, the same interval
    assert all(math.isnan(b) for b in bootstrap_interval(x[:2], v[:2]))  # two points: no interval


def test_growth_beyond_the_tolerance_is_a_leak():
    t, v = _line(16, 2000.0, 2.0)
    trend = judge_trend(t, v, tolerance_per_h=256.0)
    assert trend.verdict == LEAK
    assert trend.lo_per_h > 256.0 and trend.slope_per_h == pytest.approx(2000.0, rel=0.1)
    assert trend.n_points == 16 and trend.span_h == pytest.approx(15 * 30 / 3600)


def test_a_flat_noisy_series_is_stable_when_the_interval_is_within_the_tolerance():
    t, v = _line(16, 0.0, 2.0)
    trend = judge_trend(t, v, tolerance_per_h=256.0)
    assert trend.verdict == STABLE and trend.hi_per_h < 256.0


def test_a_series_of_zeros_is_stable():
    trend = judge_trend([i * 10.0 for i in range(8)], [0.0] * 8, tolerance_per_h=1.0)
    assert trend.verdict == STABLE and (trend.lo_per_h, trend.hi_per_h) == (0.0, 0.0)


def test_too_few_points_or_too_much_noise_is_inconclusive():
    t, v = _line(4, 5000.0, 1.0)
    short = judge_trend(t, v, tolerance_per_h=256.0)
    assert short.verdict == INCONCLUSIVE and short.slope_per_h is None and "too short" in short.reason
    t, v = _line(8, 0.0, 300.0, step_s=10.0)  # noise of 300 over 70 s: the interval spans the tolerance
    noisy = judge_trend(t, v, tolerance_per_h=256.0)
    assert noisy.verdict == INCONCLUSIVE and noisy.lo_per_h < 256.0 < noisy.hi_per_h


def test_for_free_memory_falling_is_the_leak_and_rising_is_not():
    t, v = _line(16, -4000.0, 2.0)
    assert judge_trend(t, v, tolerance_per_h=512.0, rising_is_bad=False).verdict == LEAK
    assert judge_trend(t, v, tolerance_per_h=512.0, rising_is_bad=True).verdict == STABLE
    t, v = _line(16, 4000.0, 2.0)
    assert judge_trend(t, v, tolerance_per_h=512.0, rising_is_bad=False).verdict == STABLE


def test_missing_values_are_left_out_and_a_tolerance_must_be_positive():
    t, v = _line(10, 2000.0, 1.0)
    v[2] = None  # type: ignore[call-overload]
    v[5] = math.nan
    assert judge_trend(t, v, tolerance_per_h=100.0).n_points == 8
    with pytest.raises(ValueError):
        judge_trend(t, v, tolerance_per_h=0.0)

"""The power arithmetic of a comparison (pure): how many independent units a side a test needs
to find a threshold-sized change at a measured spread (`units_needed`), the spread itself
(`log_spread`, `pooled_log_spread`), the host-hit re-asks the parity test needs
(`parity_keys_needed`), and the one line an INCONCLUSIVE comparison ends with
(`comparison_advice`). `harness.compare.planning` plans a scenario with them; docs/reports.md
("Plan for a verdict") says how each is checked."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from harness.compare.statistics import ALPHA, MIN_MANN_WHITNEY, MIN_VALUES
from harness.core.optional import require

POWER = 0.95
MW_EFFICIENCY = 3 / math.pi  # Mann-Whitney's asymptotic relative efficiency to the t-test (normal data)
MAX_UNITS = 100_000


def units_needed(sd_log: float, threshold: float, alpha: float = ALPHA, power: float = POWER) -> int | None:
    """The fewest units a side for a two-sided test at ``alpha`` to find a change of
    ``threshold`` (relative) with ``power``, when one unit's log value has standard deviation
    ``sd_log``: the noncentral t power of Welch's t (equal n) at the n compare's test at that n is
    worth (`_effective_n`: Yuen's trimming keeps fewer values, Mann-Whitney is 3/π as efficient
    on normal data). None when it exceeds ``MAX_UNITS`` or the threshold is 0. Pure."""
    stats = require("scipy.stats", "stats", "the plan for a verdict")

    if threshold <= 0 or not math.isfinite(sd_log):
        return None
    delta = math.log1p(threshold)
    if sd_log <= 0:
        return MIN_VALUES
    z = float(stats.norm.ppf(1 - alpha / 2) + stats.norm.ppf(power))
    approx = 2 * (z * sd_log / delta) ** 2  # the normal approximation: the t-test needs a little more
    if approx > MAX_UNITS:
        return None
    for n in range(max(MIN_VALUES, math.floor(approx)), MAX_UNITS + 1):
        eff = _effective_n(n)
        df = 2 * eff - 2
        ncp = delta / (sd_log * math.sqrt(2 / eff))
        t_crit = float(stats.t.ppf(1 - alpha / 2, df))
        if float(stats.nct.sf(t_crit, df, ncp)) >= power:
            return n
    return None


def power_at(n: int, sd_log: float, threshold: float, alpha: float = ALPHA) -> float:
    """The power of compare's test at ``n`` units a side to find a change of ``threshold`` when
    one unit's log value has standard deviation ``sd_log`` (the arithmetic of `units_needed`);
    0 below 2 units. Pure."""
    stats = require("scipy.stats", "stats", "the plan for a verdict")

    if n < MIN_VALUES or threshold <= 0:
        return 0.0
    if sd_log <= 0:
        return 1.0
    eff = _effective_n(n)
    df = 2 * eff - 2
    t_crit = float(stats.t.ppf(1 - alpha / 2, df))
    return float(stats.nct.sf(t_crit, df, math.log1p(threshold) / (sd_log * math.sqrt(2 / eff))))


def max_spread(n: int, threshold: float, power: float = POWER) -> float | None:
    """The largest spread (sd of one unit's log value) at which ``n`` units a side still find a
    threshold-sized change with ``power`` (bisection on `power_at`); None below 2 units. Pure."""
    if n < MIN_VALUES:
        return None
    lo, hi = 0.0, 5.0
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if power_at(n, mid, threshold) >= power else (lo, mid)
    return lo


def _effective_n(n: int) -> float:
    """The t-test's n that compare's test at ``n`` a side is worth: n for Welch (below 5), the
    values Yuen's 20 % trimming keeps (5 to 7), Mann-Whitney's n × 3/π from 8 on."""
    if n < 5:
        return float(n)
    if n < MIN_MANN_WHITNEY:
        return float(n - 2 * int(0.2 * n))
    return n * MW_EFFICIENCY


def log_spread(values: Sequence[float] | np.ndarray) -> float | None:
    """Standard deviation of the log values (ddof 1; None below 2 positive values). Pure."""
    a = np.asarray(values, dtype=float)
    a = a[np.isfinite(a) & (a > 0)]
    return float(np.std(np.log(a), ddof=1)) if a.size >= MIN_VALUES else None


ROBUST_FROM = 5  # values a side from which compare's tests (Yuen's trimmed t, Mann-Whitney) shrug off a stray value
MAD_TO_SD = 1.482602218505602  # the MAD of normal data x this = its standard deviation


def within_log_spread(samples: Sequence[np.ndarray]) -> float | None:
    """The spread of one unit's log value within ``samples`` (each centred on its own), for the
    plan: when every sample has ``ROBUST_FROM`` values or more, the normal-consistent MAD of the
    deviations from each sample's median — compare's tests at those sizes are not moved by one
    stray value, so the plan is not either (one stalled request a night made the plan say "CANNOT
    DECIDE, spread +-46.6 %" for a host-hit row that compare decided at an MDE of 3.7 %); else (or
    when the MAD is 0) the pooled standard deviation about each sample's mean. None below one
    degree of freedom. Pure."""
    logs = [np.log(np.asarray(a, dtype=float)) for a in samples if len(a)]
    dof = sum(x.size for x in logs) - len(logs)
    if dof <= 0:
        return None
    if all(x.size >= ROBUST_FROM for x in logs):
        mad = float(np.median(np.abs(np.concatenate([x - np.median(x) for x in logs]))))
        if mad > 0:
            return MAD_TO_SD * mad
    return _pooled_sd(logs)


def pooled_log_spread(base: np.ndarray, cand: np.ndarray) -> float | None:
    """The within-side standard deviation of the log values of two samples (each centred on its
    own mean; None below 3 values in all, or a value <= 0). Pure."""
    sides = [np.log(a[np.isfinite(a)]) for a in (np.asarray(base, float), np.asarray(cand, float)) if a.size]
    if any((np.exp(x) <= 0).any() for x in sides):
        return None
    return _pooled_sd([x for x in sides if x.size])


def _pooled_sd(logs: Sequence[np.ndarray]) -> float | None:
    """The standard deviation of values about their own sample's mean, pooled over the samples
    (None below one degree of freedom)."""
    dof = sum(x.size for x in logs) - len(logs)
    if dof <= 0:
        return None
    dev = np.concatenate([x - x.mean() for x in logs])
    return float(math.sqrt(np.sum(dev**2) / dof))


def next_round(rows: Sequence[Any], repeats: int) -> tuple[int, list[str]] | None:
    """(the repeats a night needs in all, the variants) for its inconclusive gating rows to
    decide at the spread measured — the row that needs the most decides the count — or None
    when no such row has a plan. ``repeats``: what the night (with its rounds) has. Pure."""
    stuck = [r for r in rows if r.gating and r.state == "inconclusive" and r.units_needed is not None]
    plans = [(math.ceil(r.units_needed / (r.n_candidate / repeats)), r) for r in stuck if r.n_candidate]
    if not plans:
        return None
    return max(n for n, _ in plans), sorted({r.variant for _, r in plans})


def comparison_advice(rows: Sequence[Any], repeats: Any, gated: bool) -> str:
    """One line for an INCONCLUSIVE comparison: the repeats its gating rows need to decide at the
    spread this comparison measured (the worst row named), or that a side needs a second unit
    to have a spread at all; and a gate when there is none. Pure."""
    stuck = [r for r in rows if r.gating and r.state == "inconclusive" and r.sample != "verdict"]
    reps = repeats if isinstance(repeats, int) and repeats > 0 else 1
    parts = []
    plans = []
    for r in stuck:
        per = (r.n_candidate or 0) / reps
        if r.units_needed is not None and per > 0:
            plans.append((math.ceil(r.units_needed / per), r))
    single = [r for r in stuck if min(r.n_baseline, r.n_candidate) < MIN_VALUES]
    if plans:
        need, worst = max(plans, key=lambda x: x[0])
        parts.append(
            f"repeats: {need} (or repeats: auto) — {worst.variant} {worst.name} needs {worst.units_needed} "
            f"{worst.sample}s a side for its {worst.threshold * 100:.0f}% threshold at the spread measured here"
        )
    elif single:
        parts.append(
            f"repeats: {max(MIN_VALUES, reps + 1)} at least — {len(single)} gating rows have one "
            f"{single[0].sample} a side, no spread to judge against (e.g. {single[0].variant} {single[0].name})"
        )
    if not gated:
        parts.append("a gate: on the rows that matter (every row gates now)")
    return ("to decide, add: " + "; ".join(parts)) if parts else ""


def parity_keys_needed(alpha: float, exact_control: bool) -> int:
    """Host-hit re-asks the parity test needs before any outcome can reach ``alpha``: 1 when the
    OFF-vs-OFF control is exact (a deterministic server: any real divergence fails), else the
    fewest n with every ON re-ask diverging against a clean control of n significant in the
    one-sided Fisher exact test (1 / C(2n, n) < alpha: 5 at 0.01). Pure."""
    if exact_control:
        return 1
    n = 1
    while 1 / math.comb(2 * n, n) >= alpha:
        n += 1
    return n

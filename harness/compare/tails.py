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

Tail share (`decide_tail_share`, rows ``<metric>_tail``): what share of a night's units are
slower than (1 + threshold) x *that night's own* median, tested between nights as a proportion.
Each side is measured against its own median, so a night on a busier box (every value slower)
moves neither share, while one request in 20 stalling 2x puts 5 % of the units past 1.5x the
median whatever the level. The unit of evidence is a block of ``TAIL_BLOCK`` consecutive units
(in the order sent): a block counts when any of its units is beyond the line, and the blocks'
counts are compared with a one-sided Fisher exact test -- a burst of the box's load that slows
several requests in a row is one block, not several independent tail events. A regression needs
p < alpha and at least ``TAIL_MIN_RISE`` more of the candidate's units beyond its line than the
baseline's; ``MIN_TAIL_BLOCKS`` blocks a side or the row is inconclusive. The change shown is that
difference of shares (points of the units, not a relative change).

Drift (`decide_drift`, rows ``<metric>_drift``): a phase's last third of units (in the order sent)
against its first third, in the candidate run *compared with the same ratio in the baseline run*:
a server that slows down over its life drifts more than the baseline did, while a box whose load
changes during both nights drifts in both. Units are blocks of ``DRIFT_BLOCK`` consecutive units
(their medians: neighbouring requests share the box's moment); the change is
(last / first)_candidate / (last / first)_baseline - 1, and its 1 - alpha interval comes from a
bootstrap of each third's blocks. A regression needs the interval to exclude 0 and the change to
clear the threshold; ``MIN_DRIFT_BLOCKS`` blocks a third on both sides, or the row is
inconclusive.
"""

from __future__ import annotations

import math

import numpy as np

from harness.compare.statistics import ALPHA, BOOTSTRAP_RESAMPLES, BOOTSTRAP_SEED, Decision, finite, relative_change

TAIL_TEST = "tail_exceedance_fisher"
TAIL_SHARE_TEST = "tail_share_blocks_fisher"
DRIFT_TEST = "drift_vs_baseline_block_bootstrap"
TAIL_BLOCK = 10  # consecutive units one tail-share block holds
MIN_TAIL_BLOCKS = 10  # a side
TAIL_MIN_RISE = 0.02  # of the units: the least rise of the tail share that is a regression
DRIFT_BLOCK = 10  # consecutive units one drift block holds (their median is its value)
MIN_DRIFT_BLOCKS = 5  # a third, on each side
MIN_DRIFT_UNITS = 3 * MIN_DRIFT_BLOCKS * DRIFT_BLOCK  # a side: where a drift row appears
MIN_TAIL_SHARE_UNITS = MIN_TAIL_BLOCKS * TAIL_BLOCK  # a side: where a tail-share row appears


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


def _blocks(values: np.ndarray, size: int) -> np.ndarray:
    """The values in blocks of ``size`` consecutive ones (a last, shorter block dropped)."""
    n = values.size // size
    return values[: n * size].reshape(n, size)


def tail_share(values, threshold: float) -> tuple[int, int, float, float]:
    """(blocks with a unit beyond the line, blocks, share of units beyond it, the line) of one
    side, the line being (1 + threshold) x the side's own median."""
    v = finite(values)
    if v.size == 0:
        return 0, 0, 0.0, math.nan
    line = float(np.median(v)) * (1 + threshold)
    blocks = _blocks(v, TAIL_BLOCK)
    return int((blocks > line).any(axis=1).sum()), int(blocks.shape[0]), float((v > line).mean()), line


def decide_tail_share(base_values, cand_values, threshold: float) -> Decision:
    """The state of a tail-share row (a lower-is-better metric): see the module docstring."""
    kb, nb, sb, _ = tail_share(base_values, threshold)
    kc, nc, sc, _ = tail_share(cand_values, threshold)
    change = sc - sb
    beyond = f"beyond {1 + threshold:.3g}x its own median"
    if min(nb, nc) < MIN_TAIL_BLOCKS:
        note = (
            f"{nb} vs {nc} blocks of {TAIL_BLOCK} units: a tail share needs {MIN_TAIL_BLOCKS}+ a side "
            f"({MIN_TAIL_BLOCKS * TAIL_BLOCK}+ units)"
        )
        return Decision("inconclusive", None if min(nb, nc) == 0 else change, "none", None, note)
    counts = (
        f"{sc:.1%} of the candidate's units vs {sb:.1%} of the baseline's {beyond}; blocks of "
        f"{TAIL_BLOCK} with one: {kc}/{nc} vs {kb}/{nb}"
    )
    p_worse, p_better = _beyond_p(kc, nc, kb, nb), _beyond_p(kb, nb, kc, nc)
    worse = p_worse <= p_better
    p = p_worse if worse else p_better
    clears = abs(change) >= TAIL_MIN_RISE
    if p < ALPHA and clears and (change > 0) == worse:
        return Decision("regression" if worse else "improved", change, TAIL_SHARE_TEST, p, counts)
    if clears and (change > 0) == worse:
        return Decision("inconclusive", change, TAIL_SHARE_TEST, p, f"beyond the rise of {TAIL_MIN_RISE:.0%} "
                        f"but not significant: {counts}")  # fmt: skip
    return Decision("unchanged", change, TAIL_SHARE_TEST, p, f"within the rise of {TAIL_MIN_RISE:.0%}: {counts}")


def _drift_thirds(values) -> tuple[np.ndarray, np.ndarray]:
    """(block medians of the first third, of the last third) of one side's ordered values."""
    v = finite(values)
    med = np.median(_blocks(v, DRIFT_BLOCK), axis=1) if v.size >= DRIFT_BLOCK else np.array([])
    third = med.size // 3
    return med[:third], med[med.size - third :]


def decide_drift(
    base_ordered, cand_ordered, higher_is_better: bool, threshold: float, seed: int = BOOTSTRAP_SEED
) -> tuple[Decision, float | None, float | None]:
    """The drift row of one phase: the candidate's last-third / first-third ratio against the
    baseline's (values in the order sent; see the module docstring). Returns (decision, the
    baseline's drift, the candidate's drift) -- each a relative change, None where not measured."""
    fb, lb = _drift_thirds(base_ordered)
    fc, lc = _drift_thirds(cand_ordered)
    side_drift = [
        None if f.size == 0 or np.median(f) <= 0 or np.median(last) <= 0 else float(np.median(last) / np.median(f)) - 1
        for f, last in ((fb, lb), (fc, lc))
    ]
    db, dc = side_drift
    if min(fb.size, fc.size) < MIN_DRIFT_BLOCKS or db is None or dc is None:
        note = (
            f"{fb.size} vs {fc.size} blocks of {DRIFT_BLOCK} units a third: a drift needs {MIN_DRIFT_BLOCKS}+ "
            f"a third on both sides ({3 * MIN_DRIFT_BLOCKS * DRIFT_BLOCK}+ units)"
        )
        return Decision("inconclusive", None, "none", None, note), db, dc
    change = (1 + dc) / (1 + db) - 1
    rng = np.random.default_rng(seed)

    def resampled(a: np.ndarray) -> np.ndarray:
        return np.median(a[rng.integers(0, a.size, (BOOTSTRAP_RESAMPLES, a.size))], axis=1)

    logs = [np.log(np.maximum(resampled(a), 1e-300)) for a in (fb, lb, fc, lc)]
    d = (logs[3] - logs[2]) - (logs[1] - logs[0])
    lo, hi = np.percentile(d, [100 * ALPHA / 2, 100 * (1 - ALPHA / 2)])
    tail = float(min((d <= 0).mean(), (d >= 0).mean()))
    p = min(1.0, 2 * max(tail, 1.0 / BOOTSTRAP_RESAMPLES))
    ci_low, ci_high = math.expm1(float(lo)), math.expm1(float(hi))
    note = (
        f"last third vs first third: candidate {dc:+.1%}, baseline {db:+.1%} "
        f"(medians of blocks of {DRIFT_BLOCK}, {fc.size} and {fb.size} a third)"
    )
    worse = change < 0 if higher_is_better else change > 0
    clears = abs(change) >= threshold
    significant = ci_low > 0 or ci_high < 0
    mde = math.expm1(float(hi - lo) / 2)
    if significant and clears:
        state = "regression" if worse else "improved"
    elif clears:
        state, note = "inconclusive", f"beyond the threshold but not significant: {note}"
    else:
        state = "unchanged"
    return Decision(state, change, DRIFT_TEST, p, note, ci_low, ci_high, mde), db, dc

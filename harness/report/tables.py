"""The rows of the report's tables, one cell per variant, and their deltas: a `Cell` (text, value,
delta against the HiCache-off baseline, colour by the figure's direction) and a `Row`; a variant
that did not run ok shows its state (e.g. ``startup_failed: host_memory``) in every cell, never
a number. The tables themselves: `harness.report.hicache_table` and `harness.report.memory_table`.

A delta is coloured only when it is significant (`delta_test`, pure): a phase statistic is judged
on the phase's per-request values (per concurrency group for a group metric such as a pass wall)
of both variants — Mann-Whitney U when both sides have ≥ 6 values, else a bootstrap 95 % CI of the
median difference with ≥ 3 a side, else no test; a derived figure (one value per run) on its
per-repeat values (summary ``derived_by_repeat``) when both sides have ≥ 3 repeats, else never
coloured. A significant change under 1 % is not coloured either. Every cell says n per side.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from harness.report.formatting import VERDICT_CSS, failure_text, fmt_num
from harness.report.view import RunView
from harness.store.phase_samples import PhaseSamples
from harness.store.status_view import StatusView

ALPHA = 0.05
MIN_DELTA = 0.01  # a significant change smaller than this is not coloured
MIN_MANN_WHITNEY = 6  # values a side for Mann-Whitney U
MIN_BOOTSTRAP = 3  # values a side for the bootstrap CI (fewer: no test)
BOOTSTRAP_RESAMPLES = 4000


@dataclass
class Cell:
    """One table cell: a number (or a failure/missing text), its delta against the baseline, the
    colour, a tooltip and a short line under the value (n per side, n.s.)."""

    text: str
    value: float | str | None = None
    delta: str = ""
    css: str = ""  # good | bad | ns | warn | unknown | fail | na | ""
    title: str = ""
    sub: str = ""


@dataclass
class Row:
    label: str
    unit: str
    cells: list[Cell]
    note: str = ""


@dataclass(frozen=True)
class DeltaTest:
    """Whether a variant's values differ from the baseline's: the test, n per side, p or CI."""

    test: str  # mann_whitney | bootstrap | none
    n_base: int
    n: int
    significant: bool | None  # None: too few values for a test
    p_value: float | None = None
    ci: tuple[float, float] | None = None  # bootstrap CI of median(values) - median(base)
    direction: int = 0  # sign of median(values) - median(base)

    def words(self) -> str:
        if self.test == "mann_whitney":
            return f"Mann-Whitney U, two-sided p={self.p_value:.3g} (alpha {ALPHA})"
        if self.test == "bootstrap":
            lo, hi = self.ci or (math.nan, math.nan)
            return (
                f"bootstrap {1 - ALPHA:.0%} CI of the median difference [{fmt_num(lo)}, {fmt_num(hi)}]"
                f" ({'excludes' if self.significant else 'includes'} 0)"
            )
        return f"no test: {self.n_base} vs {self.n} values (needs {MIN_BOOTSTRAP}+ a side)"


def finite_values(values: Sequence[float] | np.ndarray) -> np.ndarray:
    a = np.asarray(values, dtype=float)
    return a[np.isfinite(a)]


def mann_whitney_p(b: np.ndarray, c: np.ndarray) -> float:
    """Two-sided Mann-Whitney U p-value: scipy's (the [stats] extra) when installed, else the
    normal approximation with tie correction and continuity correction (what scipy uses for
    samples this size when ties are present)."""
    try:
        from scipy.stats import mannwhitneyu
    except ImportError:  # a report-only install: the same test, approximated
        pass
    else:
        return float(mannwhitneyu(c, b, alternative="two-sided").pvalue)
    x = np.concatenate([c, b])
    n1, n2, n = c.size, b.size, x.size
    order = np.argsort(x, kind="mergesort")
    ranks = np.empty(n)
    sx = x[order]
    _, first, counts = np.unique(sx, return_index=True, return_counts=True)
    avg = first + (counts + 1) / 2.0  # 1-based average rank of each tie group
    ranks[order] = np.repeat(avg, counts)
    u = ranks[:n1].sum() - n1 * (n1 + 1) / 2.0
    mu = n1 * n2 / 2.0
    sigma = math.sqrt(n1 * n2 / 12.0 * ((n + 1) - (counts**3 - counts).sum() / (n * (n - 1))))
    if sigma == 0:
        return 1.0
    z = (abs(u - mu) - 0.5) / sigma
    return float(min(1.0, math.erfc(max(z, 0.0) / math.sqrt(2.0))))


def delta_test(
    base_values: Sequence[float] | np.ndarray, values: Sequence[float] | np.ndarray, seed: int = 0
) -> DeltaTest:
    """Pure: Mann-Whitney U (two-sided) when both sides have ≥ 6 finite values; else, with ≥ 3 a
    side, a percentile bootstrap CI (1 − ALPHA) of median(values) − median(base), significant when
    it excludes 0 (seeded: the same page every time); else no test."""
    b, c = finite_values(base_values), finite_values(values)
    direction = int(np.sign(np.median(c) - np.median(b))) if b.size and c.size else 0
    if b.size >= MIN_MANN_WHITNEY and c.size >= MIN_MANN_WHITNEY:
        if np.ptp(np.concatenate([b, c])) == 0:
            return DeltaTest("mann_whitney", b.size, c.size, False, 1.0)
        p = mann_whitney_p(b, c)
        return DeltaTest("mann_whitney", b.size, c.size, p < ALPHA, p, direction=direction)
    if b.size >= MIN_BOOTSTRAP and c.size >= MIN_BOOTSTRAP:
        rng = np.random.default_rng(seed)
        mb = np.median(rng.choice(b, (BOOTSTRAP_RESAMPLES, b.size)), axis=1)
        mc = np.median(rng.choice(c, (BOOTSTRAP_RESAMPLES, c.size)), axis=1)
        lo, hi = (float(x) for x in np.quantile(mc - mb, [ALPHA / 2, 1 - ALPHA / 2]))
        return DeltaTest("bootstrap", b.size, c.size, lo > 0 or hi < 0, None, (lo, hi), direction)
    return DeltaTest("none", b.size, c.size, None, direction=direction)


def delta(
    value: float | None, base: float | None, higher_is_better: bool | None, significant: bool | None = True
) -> tuple[str, str]:
    """(``+12.3%``, good | bad | ns | "") of a value against the baseline's: coloured only when
    ``significant`` and the change is ≥ 1 % in a figure with a direction; ``ns`` (grey) when the
    test found no difference; "" when there was no test or the change is under 1 %."""
    if value is None or base is None or not isinstance(value, (int, float)) or base == 0:
        return "", ""
    if not (math.isfinite(value) and math.isfinite(base)):
        return "", ""
    d = (value - base) / abs(base)
    text = f"{d * 100:+.1f}%"
    if higher_is_better is None or significant is None or abs(d) < MIN_DELTA:
        return text, ""
    if not significant:
        return text, "ns"
    good = d > 0 if higher_is_better else d < 0
    return text, "good" if good else "bad"


@dataclass(frozen=True)
class Samples:
    """The values a figure's delta is tested on, and what one value is (request, pass, repeat)."""

    values: np.ndarray
    unit: str  # "req" | "group" | "repeat"


# What would test a delta that has too few values for a test: more repeats (each repeat adds the
# phase's requests and one value of each derived figure), or a gate (an expectations check or a
# compare threshold on the figure judges it in every run, whatever n).
UNTESTED_HINT = (
    f"more repeats would test it (--repeats {MIN_BOOTSTRAP}: {MIN_BOOTSTRAP}+ values a side), or a gate on "
    "the figure (an expectations check) judges it in every run"
)
_NO_TEST = f" · no test (--repeats {MIN_BOOTSTRAP})"


def _n(k: int, unit: str) -> str:
    return f"{k} {unit}{'s' if k != 1 and unit != 'req' else ''}"


def table_row(
    view: RunView,
    label: str,
    unit: str,
    get: Callable[[str], Any],
    higher_is_better: bool | None,
    base: str | None,
    digits: int = 3,
    note: str = "",
    samples: Callable[[str], Samples | None] | None = None,
    baseline_note: str = "",
) -> Row:
    """One row, one cell per variant. With ``samples``, each delta is tested (`delta_test`) and
    coloured only when significant; every cell of the row says its n. ``baseline_note``: a label
    for the baseline's cell (e.g. it is the no-HiCache reference)."""
    cells = []
    base_val = get(base) if base is not None else None
    base_s = samples(base) if samples is not None and base is not None else None
    for n in view.names:
        st = view.status(n)
        if not st.ok:
            cells.append(failed_cell(st))
            continue
        v = get(n)
        if v is None:
            cells.append(Cell("n/a", None, css="na", title="not measured in this variant"))
            continue
        if isinstance(v, str):
            css = VERDICT_CSS.get(v, "na")
            cells.append(Cell(v, v, css=css, sub="cannot tell" if css == "unknown" else ""))
            continue
        if samples is None:
            d, css = ("", "") if n == base else delta(v, base_val, higher_is_better)
            cells.append(Cell(fmt_num(v, digits), v, d, css))
            continue
        s = samples(n)
        k = s.values.size if s is not None else 0
        what = s.unit if s is not None else "value"
        if n == base:
            sub = f"n={k} · " + ("no HiCache: baseline" if baseline_note else "baseline")
            title = f"the baseline: {_n(k, what)}" + (f"; {baseline_note}" if baseline_note else "")
            cells.append(Cell(fmt_num(v, digits), v, "", "", title, sub))
            continue
        test = delta_test(base_s.values if base_s is not None else [], s.values if s is not None else [])
        significant = test.significant
        if significant and test.direction * _rel(v, base_val) < 0:
            significant = None  # the tested values point the other way than the summary's figures
        d, css = delta(v, base_val, higher_is_better, significant)
        if not d:
            cells.append(Cell(fmt_num(v, digits), v, "", "", f"n={k}", f"n={k}"))
            continue
        k_b = base_s.values.size if base_s is not None else 0
        verdict = {True: "significant", False: "not significant", None: "not tested"}[test.significant]
        if test.significant and significant is None:
            verdict = "not coloured: the tested values differ in the other direction than the figures shown"
        if test.significant and abs(_rel(v, base_val)) < MIN_DELTA:
            verdict += f", under {MIN_DELTA:.0%}"
        title = f"{verdict}: {test.words()}; n {base}={_n(k_b, what)}, {n}={_n(k, what)}"
        if test.significant is None:
            title += f"; {UNTESTED_HINT}"
        sub = f"n={k_b}/{k}" + ("" if test.significant else " · n.s." if test.significant is False else _NO_TEST)
        cells.append(Cell(fmt_num(v, digits), v, d, css, title, sub))
    return Row(label, unit, cells, note)


def failed_cell(status: StatusView) -> Cell:
    """The cell of a variant that did not run ok: its state and cause, red unless it failed as
    its scenario declared (then neutral: an expected failure is never red)."""
    expected = bool(status.expect_met) and status.expect not in (None, "ok")
    return Cell(
        failure_text(status),
        None,
        css="expected" if expected else "fail",
        title="failed as the scenario declared" if expected else "",
    )


def _rel(v: float, base: float | None) -> float:
    return (v - base) / abs(base) if base else math.nan


def sampling_phases(view: RunView, name: str) -> Mapping[str, PhaseSamples]:
    """A variant's per-phase sampling summaries (summary ``sampling.phases``, typed)."""
    summary = view.summary(name)
    return summary.samples.phases if summary is not None else {}

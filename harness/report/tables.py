"""The report's two tables, one column per variant: the HiCache table and the host-memory table.

One job: turning a `RunView`'s stored figures into rows of cells (text, value, delta against the
HiCache-off baseline, colour by the figure's direction). The HiCache table's workload rows are
the ones each workload's kind declares (`WorkloadKind.report_rows`), in scenario order. A variant
that did not run ok shows its state (e.g. ``startup_failed: host_memory``) in every cell, never
a number.

A delta is coloured only when it is significant (`delta_test`, pure): a phase statistic is judged
on the phase's per-request values (per concurrency group for a group metric such as a pass wall)
of both variants — Mann-Whitney U when both sides have ≥ 6 values, else a bootstrap 95 % CI of the
median difference with ≥ 3 a side, else no test; a derived figure (one value per run) on its
per-repeat values (summary ``derived_by_repeat``) when both sides have ≥ 3 repeats, else never
coloured. A significant change under 1 % is not coloured either. Every cell says n per side.
The baseline's cell of a figure read from phases where a HiCache variant got host-tier hits is
labelled as the no-HiCache baseline: OFF recomputes there what ON loads back, so its figure is the
reference, not a competitor.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from harness.analysis.bandwidth import load_back_fraction, storage_fraction
from harness.analysis.frames import groups_frame
from harness.analysis.summary import unexercised_figures
from harness.measures.metrics import METRICS
from harness.report.formatting import KIB_PER_GIB, VERDICT_CSS, failure_text, fmt_num
from harness.report.view import RunView, baseline_variant
from harness.store.variant_status import ATTACHED, LAUNCHED
from harness.workloads.kind import PhaseStat, ReportRow

# Sampler phases the runner sets around the workloads (not load); the quality arm's phases
# start with "quality".
NON_LOAD_PHASES = frozenset(
    {LAUNCHED.first_sample_phase, ATTACHED.first_sample_phase, "idle", "cooldown", "final_check"}
)

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


def _finite(values: Sequence[float] | np.ndarray) -> np.ndarray:
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
    b, c = _finite(base_values), _finite(values)
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


def _row(
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
        if st.get("state") != "ok":
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


def failed_cell(status: dict) -> Cell:
    """The cell of a variant that did not run ok: its state and cause, red unless it failed as
    its scenario declared (then neutral: an expected failure is never red)."""
    expected = bool(status.get("expect_met")) and status.get("expect") not in (None, "ok")
    return Cell(
        failure_text(status),
        None,
        css="expected" if expected else "fail",
        title="failed as the scenario declared" if expected else "",
    )


def _rel(v: float, base: float | None) -> float:
    return (v - base) / abs(base) if base else math.nan


def report_value(summary: dict, workload: str, value: str | PhaseStat) -> float | None:
    """A report row's figure from a variant summary: a phase statistic, or a derived figure."""
    w = (summary.get("workloads") or {}).get(workload) or {}
    if isinstance(value, PhaseStat):
        return value.of(w.get("phases") or {})
    return (w.get("derived") or {}).get(value)


def _phase_values(view: RunView, name: str, workload: str, stat: PhaseStat, groups: dict[str, pd.DataFrame]) -> Samples:
    """The per-request values of a phase statistic's metric (per concurrency group for a group
    metric), measured and error-free, all repeats pooled (what the summary's statistic covers)."""
    df = view.requests.get(name)
    metric = METRICS.get(stat.metric)
    if df is None or df.empty or metric is None:
        return Samples(np.array([], float), "req")
    if metric.per == "group":
        if name not in groups:
            groups[name] = groups_frame(df)
        g = groups[name]
        sel = g[(g["workload"] == workload) & (g["phase"] == stat.phase)] if not g.empty else g
        return Samples(_finite(sel[stat.metric].to_numpy(dtype=float)) if stat.metric in sel else np.array([]), "group")
    sel = df[(df["workload"] == workload) & (df["phase"] == stat.phase) & (df["warmup"] != True) & df["error"].isna()]
    return Samples(_finite(sel[stat.metric].to_numpy(dtype=float)) if stat.metric in sel else np.array([]), "req")


def repeat_values(summary: Mapping, workload: str, derived: str) -> list[float]:
    """A derived figure's per-repeat values from summary ``workloads[wl].derived_by_repeat``
    ({figure: [values]} or {figure: {repeat: value}}, or per repeat {repeat: {figure: value}} /
    [{figure: value}]); [] when the summary has none."""
    w = (summary.get("workloads") or {}).get(workload) or {}
    by = w.get("derived_by_repeat")
    vals: list[Any] = []
    if isinstance(by, Mapping):
        own = by.get(derived)
        if isinstance(own, Mapping):
            vals = list(own.values())
        elif isinstance(own, (list, tuple)):
            vals = list(own)
        else:
            vals = [r.get(derived) for r in by.values() if isinstance(r, Mapping)]
    elif isinstance(by, (list, tuple)):
        vals = [r.get(derived) for r in by if isinstance(r, Mapping)]
    return [float(v) for v in vals if isinstance(v, (int, float)) and math.isfinite(v)]


def _derived_values(summary: Mapping, workload: str, derived: str) -> Samples:
    """A derived figure's per-repeat values; without them, its one value for the run (no test)."""
    per_repeat = repeat_values(summary, workload, derived)
    if per_repeat:
        return Samples(np.asarray(per_repeat), "repeat")
    v = report_value(summary, workload, derived)
    return Samples(np.asarray([v] if isinstance(v, (int, float)) else [], float), "run")


def host_hit_phases(view: RunView, workload: str, base: str | None) -> set[str]:
    """Phases of a workload where a variant other than the baseline got host-tier hits."""
    out: set[str] = set()
    for n in view.names:
        if n == base or not view.ok(n):
            continue
        w = (view.summary(n).get("workloads") or {}).get(workload) or {}
        for ph, d in (w.get("phases") or {}).items():
            if ((d or {}).get("hits") or {}).get("host_tokens"):
                out.add(ph)
    return out


def _reads_phases(view: RunView, workload: str, r: ReportRow) -> tuple[str, ...]:
    if isinstance(r.value, PhaseStat):
        return (r.value.phase,)
    kind = view.kind(workload)
    return next((d.needs for d in (kind.derived if kind else ()) if d.name == r.value), ())


def workload_rows(view: RunView, workload: str, declared: tuple[ReportRow, ...], base: str | None) -> list[Row]:
    """The HiCache-table rows a workload's kind declares, ``{workload}`` filled in; each delta
    tested on the phase's per-request values or the derived figure's per-repeat values."""
    groups: dict[str, pd.DataFrame] = {}
    host = host_hit_phases(view, workload, base)
    rows = []
    for r in declared:
        if isinstance(r.value, PhaseStat):
            samples = lambda n, r=r: _phase_values(view, n, workload, r.value, groups)
        else:
            samples = lambda n, r=r: _derived_values(view.summary(n), workload, r.value)
        hit = sorted(host.intersection(_reads_phases(view, workload, r)))
        baseline_note = (
            f"no HiCache: the no-cache baseline — it recomputed in {', '.join(hit)} what "
            f"the HiCache variants loaded back from the host tier"
            if hit
            else ""
        )
        rows.append(
            _row(
                view,
                r.label.replace("{workload}", workload),
                r.unit,
                lambda n, r=r: report_value(view.summary(n), workload, r.value),
                r.higher_is_better,
                base,
                note=r.note.replace("{workload}", workload),
                samples=samples,
                baseline_note=baseline_note,
            )
        )
        if not isinstance(r.value, PhaseStat):
            mark_unexercised(view, workload, r.value, rows[-1])
    return rows


def mark_unexercised(view: RunView, workload: str, figure: str, row: Row) -> None:
    """Mark the cells of a derived figure that a variant measured on a cache phase without a hit
    of the tier it exists to measure (summary ``unexercised``): the number is recompute's."""
    for n, cell in zip(view.names, row.cells):
        why = unexercised_figures(view.summary(n)).get((workload, figure))
        if why is not None:
            cell.css, cell.sub, cell.title = "warn", "⚠ no tier hit: measured recompute", why


def load_back(view: RunView, name: str) -> dict[str, Any]:
    """Load-back bytes and seconds over the workload phases (sampling counter deltas) and the
    fraction of the probed pinned H2D bandwidth. Bytes come from ``load_back_bytes_total``,
    else ``load_back_tokens_total`` × the preflight's KV bytes per token."""
    b = s = tok = 0.0
    have_b = have_s = have_t = False
    for d in _phases(view, name).values():
        for k, v in (d.get("counter_deltas") or {}).items():
            if k.startswith("sglang:load_back_bytes_total"):
                b += v
                have_b = True
            elif k.startswith("sglang:load_back_duration_seconds_sum"):
                s += v
                have_s = True
            elif k.startswith("sglang:load_back_tokens_total"):
                tok += v
                have_t = True
    source = "bytes counter"
    if not have_b and have_t:
        pred = (view.status(name).get("preflight") or {}).get("prediction") or {}
        per_tok = pred.get("kv_bytes_per_token")
        if per_tok:
            b, have_b, source = tok * float(per_tok), True, "tokens × KV bytes/token"
    bw = None
    if view.probe:
        bw = (view.probe.get("bandwidth_gbs") or {}).get("pinned_h2d")
    frac = load_back_fraction(b if have_b else None, s if have_s else None, bw)
    return {
        "bytes": b if have_b else None,
        "seconds": s if have_s else None,
        "tokens": tok if have_t else None,
        "pinned_h2d_gbs": bw,
        "fraction": frac,
        "source": source,
        "gbs": (b / s / 1e9) if have_b and have_s and s > 0 else None,
    }


def roofline_rows(view: RunView, name: str) -> list[dict[str, Any]]:
    """Each hit phase's roofline (summary ``phases.<phase>.roofline``, `harness.measures.roofline`): the
    floor its KV bytes and uncached suffix allow, what it took, and recomputing it; with its
    attribution (summary ``attribution``, `harness.analysis.attribution`) under ``split``."""
    summary = view.summary(name)
    split = {(a.get("workload"), a.get("phase")): a for a in summary.get("attribution") or []}
    out = []
    for wl, w in (summary.get("workloads") or {}).items():
        for phase, p in (w.get("phases") or {}).items():
            roof = p.get("roofline")
            if roof:
                out.append({"variant": name, "workload": wl, "phase": phase, **roof, "split": split.get((wl, phase))})
    return out


def tier_prediction_rows(view: RunView, name: str) -> list[dict[str, Any]]:
    """Each phase's predicted vs achieved tier tokens (summary ``tier_prediction``,
    `harness.measures.tier_model`), where either is nonzero."""
    tp = view.summary(name).get("tier_prediction") or {}
    short = {(s.get("workload"), s.get("phase")) for s in tp.get("shortfalls") or []}
    out = []
    for wl, phases in (tp.get("phases") or {}).items():
        for phase, p in phases.items():
            if p.get("predicted_total") or p.get("achieved_cached"):
                out.append({"variant": name, "workload": wl, "phase": phase, "short": (wl, phase) in short, **p})
    return out


def storage_bandwidth(view: RunView, name: str) -> dict[str, Any]:
    """The storage tier's (L3) I/O over a variant's phases (sampling's ``storage``): prefetch and
    backup GB/s (sglang's per-operation bandwidth histograms, mean over operations) and each as a
    fraction of the probed disk's read / write bandwidth (``probe.disk``)."""
    acc = {"prefetch": [0.0, 0.0], "backup": [0.0, 0.0]}  # [sum of GB/s over ops, ops]
    for d in _phases(view, name).values():
        st = d.get("storage") or {}
        for op, tot in acc.items():
            ops, gbs = st.get(f"{op}_ops") or 0.0, st.get(f"{op}_gbs")
            if ops > 0 and gbs is not None:
                tot[0] += gbs * ops
                tot[1] += ops
    disk = (view.probe or {}).get("disk") or {}
    out: dict[str, Any] = {"disk_read_gbs": disk.get("read_gbs"), "disk_write_gbs": disk.get("write_gbs")}
    for op, disk_key in (("prefetch", "disk_read_gbs"), ("backup", "disk_write_gbs")):
        total, ops = acc[op]
        gbs = total / ops if ops > 0 else None
        out[f"{op}_gbs"] = gbs
        out[f"{op}_fraction"] = storage_fraction(gbs, out[disk_key])
    return out


def hicache_table(view: RunView) -> tuple[list[Row], str | None]:
    """Seed 000's HiCache table: the rows each workload's kind declares (workloads in scenario
    order), then quality parity and load-back; ON-vs-OFF deltas against the baseline."""
    base = baseline_variant(view)
    rows: list[Row] = []
    for wl in view.workload_names():
        kind = view.kind(wl)
        if kind is not None:
            rows += workload_rows(view, wl, kind.report_rows, base)
    has_parity = any((view.summary(n).get("quality") or {}).get("parity") for n in view.names)
    rows.append(
        _row(
            view,
            "quality parity",
            "",
            lambda n: (
                "reference"
                if n == base and has_parity
                else ((view.summary(n).get("quality") or {}).get("parity") or {}).get("verdict")
            ),
            None,
            base,
            note="ON vs OFF against OFF vs OFF (see Quality)",
        )
    )
    rows.append(
        _row(
            view,
            "load-back, fraction of pinned H2D",
            "",
            lambda n: load_back(view, n)["fraction"],
            True,
            None,
            note="needs probe results and load-back counters",
        )
    )
    for op, label, disk in (("prefetch", "storage prefetch", "read"), ("backup", "storage backup", "write")):
        rows.append(
            _row(view, f"{label} GB/s", "GB/s", lambda n, op=op: storage_bandwidth(view, n)[f"{op}_gbs"], True, None)
        )
        rows.append(
            _row(
                view,
                f"{label}, fraction of disk {disk}",
                "",
                lambda n, op=op: storage_bandwidth(view, n)[f"{op}_fraction"],
                True,
                None,
                note=f"sglang's {op} bandwidth / the probed disk's sequential {disk} (harness probe)",
            )
        )
    # drop rows where no variant has a number (e.g. a phase the workload's config left out)
    rows = [r for r in rows if any(c.value is not None for c in r.cells) or r.label == "quality parity"]
    return rows, base


def _phases(view: RunView, name: str) -> dict[str, dict]:
    return ((view.summary(name).get("sampling") or {}).get("phases")) or {}


def _agg(phases: dict[str, dict], key: str, how, which=None) -> float | None:
    vals = [d.get(key) for ph, d in phases.items() if (which is None or which(ph)) and d.get(key) is not None]
    return how(vals) if vals else None


def _gpu_peak(phases: dict[str, dict]) -> dict[str, float]:
    out: dict[str, float] = {}
    for d in phases.values():
        for idx, v in (d.get("peak_gpu_mem_used_mib") or {}).items():
            out[idx] = max(out.get(idx, -1.0), v)
    return out


def _idx(i: str) -> tuple[int, str]:
    return (int(i), "") if str(i).isdigit() else (1 << 30, str(i))


def gpus_sampled(phases: Mapping[str, Mapping]) -> list[str]:
    """The GPU indices a variant's samples read (phase summaries' ``gpus_sampled``; for a run
    recorded before that field, the GPUs its peaks name)."""
    seen: set[str] = set()
    for d in phases.values():
        seen.update(str(i) for i in (d.get("gpus_sampled") or d.get("peak_gpu_mem_used_mib") or {}))
    return sorted(seen, key=_idx)


def gpu_selection_words(phases: Mapping[str, Mapping]) -> str:
    """How the sampled GPUs were chosen (the last ``gpu_selection`` recorded), or why unknown."""
    sel = next((d.get("gpu_selection") for d in reversed(list(phases.values())) if d.get("gpu_selection")), None)
    if isinstance(sel, Mapping) and sel.get("how"):
        return str(sel["how"])
    return "how the GPUs were chosen is not recorded (a run from before per-variant GPU selection read every GPU)"


def memory_table(view: RunView) -> list[Row]:
    """Seed 000's ratio table: pools, MemAvailable, page cache, pinned, swap-in, GPU memory,
    preflight prediction vs outcome."""
    rows: list[Row] = []
    pools = lambda n, k: (view.status(n).get("pools") or {}).get(k)
    gib = lambda v: None if v is None else v / KIB_PER_GIB
    load = lambda ph: ph not in NON_LOAD_PHASES and not ph.startswith("quality")

    def plain(label, unit, get, digits=3, note=""):
        cells = []
        for n in view.names:
            v = get(n)
            if isinstance(v, Cell):
                cells.append(v)
            elif v is None:
                cells.append(Cell("n/a", None, css="na"))
            elif isinstance(v, str):
                cells.append(Cell(v, v))
            else:
                cells.append(Cell(fmt_num(v, digits), v))
        rows.append(Row(label, unit, cells, note))

    plain("device pool", "tokens", lambda n: pools(n, "max_total_num_tokens"))
    plain("host pool", "tokens", lambda n: pools(n, "host_pool_tokens") if view.hicache(n) else "off")
    plain(
        "host pool (pinned)",
        "GB",
        lambda n: pools(n, "host_pool_gb") if view.hicache(n) else "off",
        note="per rank, from the server log",
    )

    def mamba(n):
        p = view.status(n).get("pools") or {}
        dev, host = p.get("mamba_device_slots"), p.get("mamba_host_slots")
        if dev is None and host is None:
            return None
        refused_pool = p.get("refused_pool") or {}
        if host is None and refused_pool.get("kind") == "mamba":
            host = refused_pool.get("tokens")
        refused = host is not None and p.get("mamba_host_slots") is None
        text = f"{'?' if dev is None else dev} / {'?' if host is None else host}" + (" refused" if refused else "")
        pred = (((view.status(n).get("preflight") or {}).get("prediction")) or {}).get("mamba_host_slots")
        off = pred is not None and host is not None and pred != host
        text += f" (preflight: {pred})" if off else ""
        return Cell(text, host, css="bad" if off or refused else "")

    plain(
        "mamba slots (device / host)",
        "slots",
        mamba,
        note="hybrid models, from the server log; host slots from its GB and the model's bytes per slot",
    )
    sampling = {n: view.summary(n).get("sampling") or {} for n in view.names}
    if any(s.get("host") for s in sampling.values()):  # external servers: whose host the rows below show
        plain(
            "host memory sampled on",
            "",
            lambda n: (
                Cell(sampling[n]["host"], None, css="bad")
                if sampling[n].get("server_host_sampled") is False
                else sampling[n].get("host")
            ),
            note="a remote server: MemAvailable, swap and page cache are this machine's, not the server's host",
        )
    plain("MemAvailable min", "GiB", lambda n: gib(_agg(_phases(view, n), "min_mem_available_kib", min)))
    plain(
        "MemAvailable min while idle",
        "GiB",
        lambda n: gib(_agg(_phases(view, n), "min_mem_available_kib", min, lambda p: p == "idle")),
    )
    plain("page cache (Cached) min", "GiB", lambda n: gib(_agg(_phases(view, n), "min_cached_kib", min)))
    plain("Mlocked max", "GiB", lambda n: gib(_agg(_phases(view, n), "max_mlocked_kib", max)))
    for label, which in (("idle", lambda p: p == "idle"), ("under load", load)):

        def swap(n, which=which):
            ph = _phases(view, n)
            mean = _agg(ph, "mean_pswpin_kib_s", max, which)
            mx = _agg(ph, "max_pswpin_kib_s", max, which)
            if mean is None and mx is None:
                return None
            css = "bad" if (mx or 0) > 0 else ""
            return Cell(f"{fmt_num(mean)} / {fmt_num(mx)}", mx, css=css)

        plain(f"swap-in (si) {label}, mean / max", "KB/s", swap, note="pswpin, per phase")
    plain("server RSS max", "GiB", lambda n: gib(_agg(_phases(view, n), "max_server_rss_kib", max)))

    def gpu(n):
        peak = _gpu_peak(_phases(view, n))
        if not peak:
            return None
        return Cell(
            ", ".join(f"GPU{i}: {v / 1024:.1f}" for i, v in sorted(peak.items(), key=lambda kv: _idx(kv[0]))),
            max(peak.values()),
            title=gpu_selection_words(_phases(view, n)),
        )

    plain("GPU memory peak", "GiB", gpu, note="the GPUs the variant's server uses (hover: how they were chosen)")

    def predicted(n):
        pf = view.status(n).get("preflight") or {}
        if not pf:
            return None
        fits = pf.get("fits")
        req = pf.get("requested_gb")
        budget = pf.get("budget_gb")
        if fits is None:
            return Cell("not predicted", None, css="na", title=str(pf.get("reason") or ""))
        text = f"{fmt_num(req)} of {fmt_num(budget)} GB: {'fits' if fits else 'does not fit'}"
        return Cell(text, req, title=str(pf.get("reason") or ""))

    plain("preflight prediction", "", predicted, note="host pool per rank vs (MemAvailable − reserve) / ranks")

    def outcome(n):
        st = view.status(n)
        pf = st.get("preflight") or {}
        fits = pf.get("fits")
        state, cause = st.get("state"), st.get("cause")
        if fits is None:
            return Cell(failure_text(st), state)
        host_refused = state == "startup_failed" and cause in ("host_memory", "preflight")
        if fits and state == "ok" or (not fits and host_refused):
            return Cell(f"{failure_text(st)} — as predicted", state, css="good")
        if fits and host_refused:
            return Cell(f"{failure_text(st)} — predicted to fit", state, css="bad")
        if not fits and state == "ok":
            return Cell("started — predicted not to fit", state, css="bad")
        return Cell(f"{failure_text(st)} (not a host-memory cause)", state)

    plain("outcome", "", outcome)
    return rows

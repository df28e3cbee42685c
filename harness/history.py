"""Each headline metric over a scenario's runs, with change points.

One job: runs of one scenario → per metric × variant series → `detect_change` → a `History`.
(The page is `harness.report.history_page`; the ``harness history`` command is
`harness.commands.history`.)

Headline metrics are what each workload's kind declares (`harness.workloads`), named as
expectations name them (`harness.expectations`): its derived figures, ``<workload>.<derived>``
(prefill_total_tok_s, decode_tok_s, second_pass_speedup, host_speedup, interference, ...), and
its ``history_stats``, ``<workload>.<phase>.<metric>_<stat>`` (e.g. a short_ttft workload's
``alone.ttft_ms_p50`` and ``during_long.ttft_ms_p50``). A workload's kind comes from the
scenario stored in the run (a workload without one is named after its kind). A run where the
variant failed has no value (a cross on the plot, never 0).

Change-point rule (`detect_change`, pure). For each night i (oldest first) with at least
``min_before`` (3) finite nights before it: ``before`` = the up to ``window`` (5) finite values
before i, ``after`` = the up to ``window`` finite values from i on. A step at i is flagged when

  - at least ``persist`` (2) consecutive nights from i on (up to ``window``) differ from
    median(before) in the same direction by at least the threshold (relative; the scenario's
    threshold for the metric, `harness.compare.statistics.threshold_for`, default 5 %) AND by more than ``k`` (3) ×
    the noise of ``before`` (1.4826 × MAD). So a one-night spike that reverts is never a step,
    noise is not either, and a change seen on the last night only waits for a second night;
    a step that lasted two nights or more is flagged even if it was fixed later.

After a flagged step the search continues ``window`` nights later. Fewer than
``min_before + persist`` finite nights → ``insufficient_history``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from harness import results
from harness.compare.runs import run_workload_kinds
from harness.compare.statistics import threshold_for
from harness.expectations import scenario_expectations
from harness.metrics import METRICS
from harness.workloads import derived_figures, kind_of

MIN_BEFORE = 3
PERSIST = 2
WINDOW = 5
NOISE_K = 3.0
MAD_SCALE = 1.4826


@dataclass(frozen=True)
class ChangePoint:
    index: int  # position in the series (first night of the new level)
    before: float  # median before
    after: float  # median after
    change: float  # relative change (after - before) / |before|
    direction: str  # regression | improvement


@dataclass
class ChangeDecision:
    state: str  # insufficient_history | stable | change
    change_points: list[ChangePoint] = field(default_factory=list)
    n: int = 0
    reason: str = ""


def detect_change(values: Sequence[float | None], threshold: float, higher_is_better: bool,
                  min_before: int = MIN_BEFORE, persist: int = PERSIST, window: int = WINDOW,
                  k: float = NOISE_K) -> ChangeDecision:
    """Sustained steps in a nightly series (None/NaN = a failed or missing night, skipped)."""
    idx = [i for i, v in enumerate(values) if v is not None and math.isfinite(v)]
    vals = np.asarray([values[i] for i in idx], dtype=float)
    n = vals.size
    if n < min_before + persist:
        return ChangeDecision("insufficient_history", [], n,
                              f"{n} nights with a value; need {min_before + persist} ({min_before} before a step, "
                              f"{persist} to confirm it)")
    points: list[ChangePoint] = []
    j = min_before
    while j <= n - persist:
        before = vals[max(0, j - window):j]
        m = float(np.median(before))
        noise = MAD_SCALE * float(np.median(np.abs(before - m)))
        need = max(threshold * abs(m), k * noise)
        d = vals[j:j + window] - m
        sign = 1.0 if d[0] > 0 else -1.0
        run = 0
        while run < d.size and sign * d[run] > need:
            run += 1
        if need > 0 and run >= persist:
            up = sign > 0
            down = not up
            ma = float(np.median(vals[j:j + run]))
            change = (ma - m) / abs(m) if m else math.inf
            worse = down if higher_is_better else up
            points.append(ChangePoint(idx[j], m, ma, change, "regression" if worse else "improvement"))
            j += window
            continue
        j += 1
    if points:
        return ChangeDecision("change", points, n, "; ".join(
            f"{p.direction} of {p.change * 100:+.1f}% at night {p.index + 1}" for p in points))
    return ChangeDecision("stable", [], n, "no sustained step beyond the threshold and the noise")


# ------------------------------------------------------------------------------------ collecting


def headline_values(summary: dict | None, names_to_kinds: Mapping[str, str]) -> dict[str, float | None]:
    """{metric name: value} of one variant's summary: what each workload's kind declares
    (derived figures the summary holds, history stats of the phases it has); nothing for a
    workload of a kind this harness does not know. ``names_to_kinds``: {workload: kind}."""
    out: dict[str, float | None] = {}
    for wl, w in ((summary or {}).get("workloads") or {}).items():
        kind = kind_of(wl, names_to_kinds)
        if kind is None:
            continue
        recorded = w.get("derived") or {}
        for d in kind.derived:
            if d.name in recorded:
                out[f"{wl}.{d.name}"] = recorded[d.name]
        phases = w.get("phases") or {}
        for s in kind.history_stats:
            if s.phase in phases:
                out[f"{wl}.{s.phase}.{s.metric}_{s.stat}"] = s.of(phases)
    return out


def _parse_name(name: str) -> tuple[str, str, str]:
    """(workload, phase or "*", metric) of a headline name: ``<workload>.<derived>`` or
    ``<workload>.<phase>.<metric>_<stat>``."""
    wl, _, rest = name.partition(".")
    phase, _, last = rest.rpartition(".")
    if not phase:
        return wl, "*", last
    return wl, phase, last.rpartition("_")[0]


def metric_direction(name: str) -> tuple[bool, str]:
    """(higher_is_better, unit) of a headline metric name, from the metric's or the derived
    figure's declaration; (True, "") for a name nothing declares."""
    _, phase, metric = _parse_name(name)
    info = METRICS.get(metric) if phase != "*" else derived_figures().get(metric)
    return (True, "") if info is None else (info.higher_is_better, info.unit)


@dataclass
class History:
    scenario: str
    runs: list[dict]  # run_id, created_at, path
    series: dict[str, dict[str, list[float | None]]]  # metric -> variant -> values per run
    failed: dict[str, list[int]]  # variant -> run indices where it failed
    decisions: dict[str, dict[str, ChangeDecision]]
    thresholds: dict[str, float]


def collect(results_dir: Path, scenario: str) -> History:
    """Load every complete run of a scenario (oldest first) and decide change points."""
    runs = []
    per_run: list[dict[str, dict[str, float | None]]] = []
    failed: dict[str, list[int]] = {}
    thresholds: dict[str, float] = {}
    for p in results.list_runs(results_dir, scenario):
        try:
            run = results.load_run(p)
        except results.ResultsError:
            continue
        if not run.complete:
            continue
        if run.manifest.get("shard"):
            continue  # one shard of a night: its merged run (if written here) stands for the night
        i = len(runs)
        runs.append({"run_id": run.run_id, "created_at": run.manifest.get("created_at"), "path": str(p)})
        thresholds = {k: t.fraction for k, t in scenario_expectations(run.manifest).thresholds.items()}
        names_to_kinds = run_workload_kinds(run.manifest)
        vals: dict[str, dict[str, float | None]] = {}
        for v in run.variants:
            if v.status.get("state") != "ok":
                if v.status.get("expect") != "startup_failed":
                    failed.setdefault(v.name, []).append(i)
                continue
            vals[v.name] = headline_values(v.summary, names_to_kinds)
        per_run.append(vals)
    metrics = sorted({m for r in per_run for vs in r.values() for m in vs})
    variants = list(dict.fromkeys(v for r in per_run for v in r))
    series: dict[str, dict[str, list[float | None]]] = {}
    decisions: dict[str, dict[str, ChangeDecision]] = {}
    for m in metrics:
        hib, _ = metric_direction(m)
        thr, _ = threshold_for(thresholds, *_parse_name(m))
        for v in variants:
            ys = [r.get(v, {}).get(m) for r in per_run]
            if all(y is None for y in ys):
                continue
            series.setdefault(m, {})[v] = ys
            decisions.setdefault(m, {})[v] = detect_change(ys, thr, hib)
    return History(scenario, runs, series, failed, decisions, thresholds)

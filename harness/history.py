"""``harness history SCENARIO``: each headline metric over a scenario's runs, change points marked.

One job: runs of one scenario → per metric × variant series → `detect_change` → history.html.

Headline metrics use the expectation names (`harness.expectations`): every
``<workload>.<derived>`` of the summaries (prefill_total_tok_s, decode_tok_s,
second_pass_speedup, device_speedup, host_speedup, interference, ...) and
``<short_ttft workload>.alone.ttft_ms_p50`` / ``.during_long.ttft_ms_p50``. A run where the
variant failed has no value (a cross on the plot, never 0).

Change-point rule (`detect_change`, pure). For each night i (oldest first) with at least
``min_before`` (3) finite nights before it: ``before`` = the up to ``window`` (5) finite values
before i, ``after`` = the up to ``window`` finite values from i on. A step at i is flagged when

  - at least ``persist`` (2) consecutive nights from i on (up to ``window``) differ from
    median(before) in the same direction by at least the threshold (relative; the scenario's
    threshold for the metric, `compare.threshold_for`, default 5 %) AND by more than ``k`` (3) ×
    the noise of ``before`` (1.4826 × MAD). So a one-night spike that reverts is never a step,
    noise is not either, and a change seen on the last night only waits for a second night;
    a step that lasted two nights or more is flagged even if it was fixed later.

After a flagged step the search continues ``window`` nights later. Fewer than
``min_before + persist`` finite nights → ``insufficient_history``.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from harness import metrics as M
from harness import results

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


def headline_values(summary: dict | None) -> dict[str, float | None]:
    """{metric name: value} of one variant's summary (names as in harness.expectations)."""
    out: dict[str, float | None] = {}
    for wl, w in ((summary or {}).get("workloads") or {}).items():
        for k, v in (w.get("derived") or {}).items():
            out[f"{wl}.{k}"] = v
        phases = w.get("phases") or {}
        if "alone" in phases and "during_long" in phases:
            for ph in ("alone", "during_long"):
                s = (phases[ph].get("metrics") or {}).get("ttft_ms")
                out[f"{wl}.{ph}.ttft_ms_p50"] = s.get("p50") if s else None
    return out


def metric_direction(name: str) -> tuple[bool, str]:
    """(higher_is_better, unit) of a headline metric name."""
    last = name.split(".")[-1]
    base = last[:-4] if last.endswith("_p50") else last
    try:
        info = M.metric_info(base)
        return info.higher_is_better, info.unit
    except KeyError:
        return True, ""


@dataclass
class History:
    scenario: str
    runs: list[dict]  # run_id, created_at, complete, good
    series: dict[str, dict[str, list[float | None]]]  # metric -> variant -> values per run
    failed: dict[str, list[int]]  # variant -> run indices where it failed
    decisions: dict[str, dict[str, ChangeDecision]]
    thresholds: dict[str, float]


def collect(results_dir: Path, scenario: str) -> History:
    """Load every run of a scenario (oldest first) and decide change points."""
    from harness.compare import threshold_for
    from harness.expectations import scenario_expectations

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
        vals: dict[str, dict[str, float | None]] = {}
        for v in run.variants:
            if v.status.get("state") != "ok":
                if v.status.get("expect") != "startup_failed":
                    failed.setdefault(v.name, []).append(i)
                continue
            vals[v.name] = headline_values(v.summary)
        per_run.append(vals)
    metrics = sorted({m for r in per_run for vs in r.values() for m in vs})
    variants = list(dict.fromkeys(v for r in per_run for v in r))
    series: dict[str, dict[str, list[float | None]]] = {}
    decisions: dict[str, dict[str, ChangeDecision]] = {}
    for m in metrics:
        hib, _ = metric_direction(m)
        wl, _, rest = m.partition(".")
        phase, _, name = rest.rpartition(".")  # "<derived>" or "<phase>.<metric>_p50"
        thr, _ = threshold_for(thresholds, wl, phase or "*", name.removesuffix("_p50"))
        for v in variants:
            ys = [r.get(v, {}).get(m) for r in per_run]
            if all(y is None for y in ys):
                continue
            series.setdefault(m, {})[v] = ys
            decisions.setdefault(m, {})[v] = detect_change(ys, thr, hib)
    return History(scenario, runs, series, failed, decisions, thresholds)


def render(h: History) -> str:
    from jinja2 import Environment, FileSystemLoader

    from harness.report import plots as P
    from harness.report.html import TEMPLATES, figure_png

    labels = [r["run_id"][:15] for r in h.runs]
    figs = []
    for m, by_v in h.series.items():
        _, unit = metric_direction(m)
        cps = {v: [p.index for p in d.change_points] for v, d in h.decisions[m].items()}
        png = figure_png(lambda ax, by_v=by_v, cps=cps, m=m, unit=unit: P.plot_history(
            ax, labels, by_v, cps, {v: h.failed.get(v, []) for v in by_v}, unit, m), size=(10, 2.8))
        figs.append({"metric": m, "png": png, "decisions": [
            {"variant": v, "state": d.state, "reason": d.reason,
             "regression": any(p.direction == "regression" for p in d.change_points)}
            for v, d in h.decisions[m].items()]})
    env = Environment(loader=FileSystemLoader(str(TEMPLATES)), autoescape=True)
    return env.get_template("history.html.j2").render(h=h, figs=figs, n_runs=len(h.runs))


def write_history(results_dir: Path, reports_dir: Path, scenario: str) -> Path:
    h = collect(Path(results_dir), scenario)
    out = Path(reports_dir) / results.safe_name(scenario) / "history.html"
    results.write_text_atomic(out, render(h))
    return out


def _scenario_name(arg: str) -> str:
    p = Path(arg)
    if p.suffix in (".yaml", ".yml") and p.is_file():
        from harness.yaml_lines import load_yaml

        data = load_yaml(p).data
        return str(data.get("name") or p.stem)
    return arg


def cli_main(args) -> int:
    try:
        name = _scenario_name(args.scenario)
    except Exception as exc:  # noqa: BLE001 - a YAML that does not load
        print(f"harness history: {args.scenario}: {exc}", file=sys.stderr)
        return 2
    if not results.list_runs(Path(args.results_dir), name):
        print(f"harness history: no runs of {name} under {args.results_dir}", file=sys.stderr)
        return 2
    out = write_history(Path(args.results_dir), Path(args.reports_dir), name)
    print(f"history: {out}")
    return 0

"""``harness report RUN``: one self-contained HTML page per run.

One job: put the report modules' tables and series (`view`, `header`, `tables`, `series`,
`quality_view`, `failures`) and `harness.report.plots`' figures into the Jinja2 template
(autoescaped: model outputs, log lines, names and YAML strings render as text) and write
``<reports_dir>/<scenario>/<run_id>/index.html``. Figures are inline base64 PNGs (matplotlib
Agg, no pyplot state); the page loads nothing from the network and opens from a file.
"""

from __future__ import annotations

import base64
import functools
import io
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, StrictUndefined

from harness.analysis.verdict import unexercised_warnings
from harness.report import plots as P
from harness.report.cost_view import cost_headline
from harness.report.curves import (
    CURVE_METRICS,
    PERCENTILES,
    LoadCurves,
    RoundSeries,
    headline,
    lag_series,
    lag_warnings,
    load_curves,
    round_series,
)
from harness.report.failures import failures
from harness.report.formatting import failure_text, fmt_num
from harness.report.header import banner, header, hicache_effect, judged_expectations, probe_rows, variant_rows
from harness.report.hicache_table import hicache_table, load_back, roofline_rows, tier_prediction_rows
from harness.report.memory_table import memory_table
from harness.report.quality_view import parity_groups, worst_samples
from harness.report.ratio_view import find_ratio_context
from harness.report.series import pass_walls, tier_hits, timeseries, ttft_groups
from harness.report.soak_view import soak_panels
from harness.report.view import load_view
from harness.server.schedule import LAG_LIMIT_MS
from harness.server.startup_phases import PHASES as STARTUP_PHASES
from harness.store import results
from harness.store.gpu_time import BUCKETS, run_gpu_time
from harness.store.targets import regular_target

TEMPLATES = Path(__file__).parent / "templates"
SECTIONS = (
    "header",
    "hicache",
    "load",
    "memory",
    "slopes",
    "timeseries",
    "latency",
    "quality",
    "failures",
    "comparison",
)


@functools.cache
def _env() -> Environment:
    """One template environment per process: it compiles index.html.j2 once (~0.5 s), not per report."""
    env = Environment(
        loader=FileSystemLoader(str(TEMPLATES)),
        autoescape=True,
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["num"] = fmt_num
    return env


def figure_png(
    draw: Callable[[Any], None] | Callable[..., None],
    size: tuple[float, float] = (10, 3.2),
    nrows: int = 1,
    sharex: bool = False,
    dpi: int = 90,
    ncols: int = 1,
) -> str:
    """Draw with ``draw(ax)`` (``draw(axes)`` when nrows > 1: a list; with ncols > 1: rows of
    axes) on a fresh Agg figure and return the PNG as base64 text for a ``data:`` URI."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=size, dpi=dpi)
    FigureCanvasAgg(fig)
    grid = fig.subplots(nrows, ncols, sharex=sharex, squeeze=False)
    if ncols > 1:
        draw([list(row) for row in grid])
    else:
        axes = grid[:, 0]
        draw(axes[0] if nrows == 1 else list(axes))
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return base64.b64encode(buf.getvalue()).decode("ascii")


def _timeseries_fig(ts: dict, t0: str, small: bool = False) -> str:
    """The variant's memory, swap and GPU panels; ``t0``: what t = 0 is (`ServerOrigin.t0`)."""
    panels = [("memory", "GiB"), ("swap", "KB/s")] + ([("gpu", "GiB")] if ts["has_gpu"] else [])

    def draw(axes):
        for i, (key, unit) in enumerate(panels):
            P.plot_timeseries(axes[i], ts["t"], ts[key], ts["phases"], unit, label_phases=i == 0)
        axes[-1].set_xlabel(f"seconds since {t0}", fontsize=8)

    height = (1.6 if small else 2.4) * len(panels) + 0.6
    return figure_png(draw, size=(12, height), nrows=len(panels), sharex=True)


def _wide(groups) -> bool:
    """Log scale when one workload's TTFTs span more than 20x."""
    import numpy as np

    vals = np.concatenate([np.asarray(v, dtype=float) for _, d in groups for v in d.values()] or [np.array([])])
    vals = vals[np.isfinite(vals) & (vals > 0)]
    return bool(vals.size) and vals.max() / vals.min() > 20


def _x_label(c: LoadCurves) -> str:
    return "max concurrency (requests in flight)" if c.axis == "conc" else "offered rate, req/s"


def _offered(c: LoadCurves, p) -> float | None:
    """A point's x on the offered axis: the swept rate or concurrency (a trace: its achieved rate)."""
    if c.axis == "conc":
        return p.value
    return p.offered_rps if p.offered_rps is not None else p.value if p.axis else p.achieved_rps


def _latency_fig(c: LoadCurves) -> str:
    def draw(rows):
        for r, (m, label) in enumerate(CURVE_METRICS):
            for col, x_of, xlabel in (
                (0, lambda p: _offered(c, p), _x_label(c)),
                (1, lambda p: p.achieved_rps, "achieved send rate, req/s"),
            ):
                series = {
                    n: ([x_of(p) for p in pts], {pc: [p.latency[m][pc] for p in pts] for pc in PERCENTILES})
                    for n, pts in c.points.items()
                }
                P.plot_percentile_lines(
                    rows[r][col],
                    series,
                    f"{label} ms",
                    xlabel if r == len(CURVE_METRICS) - 1 else "",
                    c.slo.get(m),
                    legend=col == 1 and r == 0,  # one legend for the figure
                )

    return figure_png(draw, size=(13, 7.5), nrows=len(CURVE_METRICS), ncols=2)


def _goodput_fig(c: LoadCurves) -> str:
    def draw(row):
        row = row[0]
        series = {
            n: ([_offered(c, p) for p in pts], [p.goodput_rps for p in pts], [p.achieved_rps for p in pts])
            for n, pts in c.points.items()
        }
        P.plot_goodput(row[0], series, c.knee, _x_label(c), c.slo_percentile)
        fractions = {
            n: (
                [_offered(c, p) for p in pts],
                {
                    "all limits": [p.slo_met_fraction for p in pts],
                    **{
                        f"{m.removesuffix('_ms').upper()} ≤ {c.slo[m]:g} ms": [p.met.get(m) for p in pts] for m in c.slo
                    },
                },
            )
            for n, pts in c.points.items()
        }
        P.plot_slo_fractions(row[1], fractions, _x_label(c))

    return figure_png(draw, size=(13, 3.4), nrows=1, ncols=2)


def _curve_rows(c: LoadCurves) -> list[dict[str, Any]]:
    rows = []
    for n, pts in c.points.items():
        for p in pts:
            rows.append(
                {
                    "variant": n,
                    "phase": p.phase,
                    "offered": _offered(c, p),
                    "achieved": p.achieved_rps,
                    "n": p.n,
                    "latency": [[p.latency[m][pc] for pc in PERCENTILES] for m, _ in CURVE_METRICS],
                    "goodput": p.goodput_rps,
                    "met": p.slo_met_fraction,
                    "percentile_met": p.slo_percentile_met,
                    "lag": p.lag_p99_ms,
                    "client_bound": p.client_bound,
                }
            )
    return rows


def _rounds_context(r: RoundSeries) -> dict[str, Any]:
    def draw(axes):
        series = {n: (r.rounds, {pc: by[pc] for pc in ("p50", "p90")}) for n, by in r.ttft.items()}
        P.plot_percentile_lines(axes[0], series, "TTFT ms", "round")
        axes[0].set_xticks(r.rounds)
        P.plot_round_tiers(axes[1], r.rounds, r.tiers)

    rows = []
    for i, k in enumerate(r.rounds):
        for n in r.ttft:
            rows.append(
                {
                    "round": k,
                    "variant": n,
                    "ttft": [r.ttft[n][pc][i] for pc in PERCENTILES],
                    "tiers": [r.tiers[n][t][i] for t in ("device", "host", "storage", "computed")],
                    "host_share": r.host_share[n][i],
                }
            )
    return {
        "workload": r.workload,
        "png": figure_png(draw, size=(12, 6.4), nrows=2),
        "rows": rows,
        "first_host_round": r.first_host_round,
    }


def _lag_fig(labels: list[str], vals: dict[str, list[float | None]]) -> str:
    def draw(ax):
        P.plot_grouped_bars(ax, labels, vals, "schedule lag, ms")
        P.limit_line(ax, LAG_LIMIT_MS, f"{LAG_LIMIT_MS:g} ms")

    return figure_png(draw, size=(10, 2.8))


def _lag_groups(warnings: list) -> list[dict[str, Any]]:
    """The warnings, one line per variant and workload: ``off: open_loop sent late — rate_8 (lag p99
    3.56 ms, flagged client-bound), ...``."""
    groups: dict[tuple[str, str], list[str]] = {}
    for w in warnings:
        lag = "—" if w.lag_p99_ms is None else f"{w.lag_p99_ms:.3g} ms"
        groups.setdefault((w.variant, w.workload), []).append(
            f"{w.phase} (lag p99 {lag}" + (", flagged client-bound)" if w.client_bound else ")")
        )
    return [{"variant": v, "text": f"{v}: {wl} sent late — " + ", ".join(items)} for (v, wl), items in groups.items()]


def load_context(view) -> dict[str, Any]:
    """The load section and the headline: curves, goodput and the knee, rounds, lag warnings."""
    curves = load_curves(view)
    warnings = lag_warnings(view)
    lag_figs = {}
    for n in dict.fromkeys(w.variant for w in warnings):
        labels, vals = lag_series(view, n)
        if labels:
            lag_figs[n] = _lag_fig(labels, vals)
    return {
        "headline": headline(curves),
        "curves": [
            {
                "workload": c.workload,
                "axis": c.axis,
                "slo": c.slo,
                "percentile": c.slo_percentile,
                "latency_png": _latency_fig(c),
                "goodput_png": _goodput_fig(c) if c.slo else None,
                "rows": _curve_rows(c),
            }
            for c in curves
        ],
        "rounds": [_rounds_context(r) for r in round_series(view)],
        "lag_warnings": _lag_groups(warnings),
        "lag_figs": lag_figs,
        "percentiles": PERCENTILES,
        "curve_metrics": [label for _, label in CURVE_METRICS],
    }


def gpu_time_rows(view) -> dict[str, Any] | None:
    """The GPU-time table: `harness.store.gpu_time.run_gpu_time` of the run's status files (None when
    no variant recorded its time: a run from before it was)."""
    timings = {n: view.status(n).timing for n in view.names}
    if not any(t is not None for t in timings.values()):
        return None
    return run_gpu_time(timings)


def startup_rows(view) -> dict[str, dict]:
    """{variant: its start's phases (`harness.server.startup_phases`), reported figures and ready_s}
    for the variants whose status has them."""
    out = {}
    for n in view.names:
        st = view.status(n)
        if st.startup is not None:
            out[n] = {"phases": st.startup.phases, "reported": st.startup.reported, "ready_s": st.ready_s}
    return out


def soak_context(view) -> list[dict[str, Any]]:
    """The soak section: per variant and soak, its series' table rows and one figure a series."""
    panels = soak_panels(view)
    for p in panels:
        for s in p["series"]:
            s["png"] = (
                figure_png(
                    lambda ax, s=s: P.plot_trend(
                        ax, s["t_s"], s["values"], s["slope_per_h"], s["intercept"], s["unit"], s["name"], s["verdict"]
                    ),
                    size=(4.2, 2.6),
                )
                if s["values"]
                else None
            )
    return panels


def build_context(run_dir: Path, reports_dir: Path) -> dict[str, Any]:
    """Everything the template shows, from one run folder."""
    from harness.analysis.expectations import evaluate_run_expectations

    view = load_view(run_dir)
    expectations = judged_expectations(view, evaluate_run_expectations)
    hicache_rows, base = hicache_table(view)
    report_dir = report_dir_of(view.manifest.scenario.name, view.root, reports_dir)

    figures_ts = []
    for n in view.names:
        ts = timeseries(view, n)
        origin = view.status(n).origin
        figures_ts.append(
            {
                "variant": n,
                "state": failure_text(view.status(n)),
                "png": _timeseries_fig(ts, origin.t0, small=not view.ok(n)) if ts else None,
                "t0": origin.t0,
                "ok": view.ok(n),
                "gpu": (ts["gpu_label"], ts["gpu_how"]) if ts and ts["has_gpu"] else None,
                "n_samples": ts["n_samples"] if ts else 0,
            }
        )
    ttft = []
    ok_names = [n for n in view.names if not view.requests[n].empty]
    for wl, groups in ttft_groups(view).items():
        ttft.append(
            {
                "workload": wl,
                "png": figure_png(
                    lambda ax, g=groups: P.plot_distributions(ax, g, ok_names, "TTFT ms", log=_wide(g)), size=(10, 2.8)
                ),
            }
        )
    labels, walls = pass_walls(view)
    walls_png = (
        figure_png(lambda ax: P.plot_grouped_bars(ax, labels, walls, "median pass wall, s"), size=(8, 3))
        if labels
        else None
    )
    hits = []
    for n in view.names:
        h = tier_hits(view, n)
        if h["labels"]:
            hits.append(
                {
                    "variant": n,
                    "png": figure_png(
                        lambda ax, h=h: P.plot_tier_hits(ax, h["labels"], h["device"], h["host"], h["miss"]),
                        size=(8, 3.2),
                    ),
                }
            )
    load_backs = []
    rooflines = []
    predictions = [row for n in view.names if view.ok(n) for row in tier_prediction_rows(view, n)]
    for n in view.names:
        if view.hicache(n) and view.ok(n):
            load_backs.append({"variant": n, **load_back(view, n)})
            rooflines.extend(roofline_rows(view, n))
    csv = view.root / "summary.csv"
    unexercised = [{"variant": n, "text": w.text} for n in view.names for w in unexercised_warnings(n, view.summary(n))]
    design = [
        {"variant": n, "text": w} for n, ws in view.manifest.design_warnings.items() if n in view.names for w in ws
    ]
    return {
        "h": header(view),
        "banner": banner(view, expectations),
        "effect": hicache_effect(view),
        "unexercised": unexercised,
        "design_warnings": design,
        "complete": view.complete,
        "interrupted": view.interrupted,
        "variants": variant_rows(view),
        "gpu_time": gpu_time_rows(view),
        "gpu_buckets": BUCKETS,
        "startup": startup_rows(view),
        "startup_phases": STARTUP_PHASES,
        "names": view.names,
        "probe": probe_rows(view.probe),
        "hicache_rows": hicache_rows,
        "baseline": base,
        "memory_rows": memory_table(view),
        "find_ratio": find_ratio_context(view.root),
        "timeseries": figures_ts,
        "ttft": ttft,
        "walls_png": walls_png,
        "hits": hits,
        "parity": parity_groups(view),
        "worst": worst_samples(view),
        "failures": failures(view),
        "comparison": view.comparison.raw if view.comparison is not None else None,
        "expectations": expectations,
        "load_back": load_backs,
        "rooflines": rooflines,
        "tier_predictions": predictions,
        "summary_csv": relpath(csv, report_dir) if csv.exists() else None,
        "run_path": str(view.root),
        "sections": SECTIONS,
        "report_rel": report_dir.relative_to(Path(reports_dir)),
        "load": load_context(view),
        "soaks": soak_context(view),
        "cost": cost_headline(view),
    }


def relpath(target: Path, start: Path) -> str:
    """``target`` relative to ``start`` (a link inside the page); absolute across drives (Windows)."""
    try:
        return os.path.relpath(target, start)
    except ValueError:
        return str(target)


def render(context: dict[str, Any]) -> str:
    return _env().get_template("index.html.j2").render(**context)


def report_dir_of(scenario: str, run_root: Path, reports_dir: Path) -> Path:
    return Path(reports_dir) / results.safe_name(scenario) / results.safe_name(Path(run_root).name)


def write_report(run_root: Path, reports_dir: Path) -> Path:
    """Write ``<reports_dir>/<scenario>/<run_id>/index.html`` for the run and return its path
    (raises `results.ResultsError` naming a missing or damaged file of the run, or a target that is
    not a regular file: `harness.store.targets.regular_target`)."""
    run_root = Path(run_root)
    ctx = build_context(run_root, Path(reports_dir))
    out = Path(reports_dir) / ctx["report_rel"] / "index.html"
    regular_target(out, "report", under=Path(reports_dir))  # checked before the page is drawn
    page = render(ctx)
    results.write_text_atomic(regular_target(out, "report", under=Path(reports_dir)), page)
    return out


def cli_main(args) -> int:
    try:
        path = write_report(Path(args.run), Path(args.reports_dir))
    except results.ResultsError as exc:  # names the file: one line, no traceback
        print(f"harness report: {exc}", file=sys.stderr)
        return 2
    print(f"report: {path}")
    return 0

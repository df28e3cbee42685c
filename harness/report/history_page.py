"""The history page of a scenario (reports/<scenario>/history.html): one figure per headline
metric of a `harness.history.History`, its variants' change points and decisions."""

from __future__ import annotations

from pathlib import Path

from jinja2 import Environment, FileSystemLoader

from harness import results
from harness.history import History, metric_direction
from harness.report import plots as P
from harness.report.html import TEMPLATES, figure_png


def render(h: History) -> str:
    """The page as self-contained HTML (figures inlined as PNG data URIs)."""
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


def write_history_page(h: History, reports_dir: Path) -> Path:
    """Write the page to ``reports_dir/<scenario>/history.html``; return its path."""
    out = Path(reports_dir) / results.safe_name(h.scenario) / "history.html"
    results.write_text_atomic(out, render(h))
    return out

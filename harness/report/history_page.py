"""The history page of a scenario (reports/<scenario>/history.html): one figure per headline
metric of a `harness.compare.history.History`, its variants' change points and decisions, the markers
where the scenario or a variant's config changed (with their dates), and a SIMULATED label on
the page and on every simulated run."""

from __future__ import annotations

from pathlib import Path

from jinja2 import Environment, FileSystemLoader

from harness.compare.history import History, metric_direction
from harness.report import plots as P
from harness.report.html import TEMPLATES, figure_png
from harness.store import results
from harness.store.targets import regular_target


def _draw(ax, labels, by_v, cps, failed, unit, metric, markers) -> None:
    """`plots.plot_history`, then the configuration markers as dotted grey lines."""
    P.plot_history(ax, labels, by_v, cps, failed, unit, metric)
    for x in markers:
        ax.axvline(x - 0.5, ls=":", color="#888888", lw=1.5)


def render(h: History) -> str:
    """The page as self-contained HTML (figures inlined as PNG data URIs)."""
    labels = [("SIM " if r.get("simulated") else "") + r["run_id"][:15] for r in h.runs]
    marked = {}
    for mk in h.markers:
        marked.setdefault(mk.index, []).append(mk.what)
    figs = []
    for m, by_v in h.series.items():
        _, unit = metric_direction(m)
        cps = {v: [p.index for p in d.change_points] for v, d in h.decisions[m].items()}
        xs = sorted({mk.index for mk in h.markers if mk.variants is None or set(mk.variants) & set(by_v)})
        png = figure_png(
            lambda ax, by_v=by_v, cps=cps, m=m, unit=unit, xs=xs: _draw(
                ax, labels, by_v, cps, {v: h.failed.get(v, []) for v in by_v}, unit, m, xs
            ),
            size=(10, 2.8),
        )
        figs.append(
            {
                "metric": m,
                "png": png,
                "decisions": [
                    {
                        "variant": v,
                        "state": d.state,
                        "reason": d.reason,
                        "regression": d.regression,
                    }
                    for v, d in h.decisions[m].items()
                ],
            }
        )
    env = Environment(loader=FileSystemLoader(str(TEMPLATES)), autoescape=True)
    return env.get_template("history.html.j2").render(h=h, figs=figs, n_runs=len(h.runs), marked=marked)


def write_history_page(h: History, reports_dir: Path) -> Path:
    """Write the page to ``reports_dir/<scenario>/history.html``; return its path."""
    out = Path(reports_dir) / results.safe_name(h.scenario) / "history.html"
    page = render(h)
    results.write_text_atomic(regular_target(out, "history page", under=Path(reports_dir)), page)
    return out

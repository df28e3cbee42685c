"""Report figures: pure matplotlib functions that draw flat data on a given ``ax``.

One job: drawing. No file or run access here; `harness.report.html` makes the figures, calls
these and encodes the result. Every function tolerates empty input (draws "no data") so a
failed variant never produces a misleading empty axis or a zero.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

PALETTE = ["#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860", "#da8bc3", "#8c8c8c", "#ccb974", "#64b5cd"]
PHASE_COLORS = ["#f2f2f2", "#e3ecf7"]


def color_for(i: int) -> str:
    return PALETTE[i % len(PALETTE)]


def no_data(ax, message: str = "no data") -> None:
    ax.text(0.5, 0.5, message, ha="center", va="center", transform=ax.transAxes, color="#888")
    ax.set_xticks([])
    ax.set_yticks([])


def shade_phases(
    ax, phases: Sequence[tuple[float, float, str]], label: bool = True, min_label_frac: float = 0.03
) -> None:
    """Alternately shaded spans (t0, t1, name); names written at the top when wide enough."""
    if not phases:
        return
    total = max(t1 for _, t1, _ in phases) - min(t0 for t0, _, _ in phases) or 1.0
    for i, (t0, t1, name) in enumerate(phases):
        ax.axvspan(t0, t1, color=PHASE_COLORS[i % 2], zorder=0, lw=0)
        if label and (t1 - t0) / total >= min_label_frac:
            ax.text(
                (t0 + t1) / 2,
                1.0,
                name,
                transform=ax.get_xaxis_transform(),
                ha="center",
                va="bottom",
                fontsize=6.5,
                rotation=30,
                color="#444",
                clip_on=False,
            )


def plot_timeseries(
    ax,
    t: Sequence[float],
    series: Mapping[str, Sequence[float]],
    phases: Sequence[tuple[float, float, str]] = (),
    ylabel: str = "",
    label_phases: bool = True,
) -> None:
    """Lines of ``series`` (label → values, NaN gaps allowed) over ``t`` seconds, phases shaded."""
    t = np.asarray(t, dtype=float)
    drawn = 0
    shade_phases(ax, phases, label=label_phases)
    for i, (name, ys) in enumerate(series.items()):
        y = np.asarray(ys, dtype=float)
        if y.size == 0 or not np.isfinite(y).any():
            continue
        ax.plot(t, y, lw=1.2, color=color_for(i), label=name)
        drawn += 1
    if drawn == 0:
        no_data(ax, "not sampled")
        return
    ax.set_ylabel(ylabel, fontsize=8)
    ax.tick_params(labelsize=7)
    ax.margins(x=0)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.005, 1.0), borderaxespad=0)
    ax.grid(True, axis="y", alpha=0.3)


def plot_distributions(
    ax,
    groups: Sequence[tuple[str, Mapping[str, Sequence[float]]]],
    variants: Sequence[str],
    ylabel: str = "",
    log: bool = False,
    max_points: int = 400,
) -> None:
    """Box plots per group (x) and variant (colour); the points themselves when few."""
    width = 0.8 / max(1, len(variants))
    drawn = False
    rng = np.random.default_rng(0)
    for gi, (_, by_variant) in enumerate(groups):
        for vi, v in enumerate(variants):
            vals = np.asarray(by_variant.get(v, ()), dtype=float)
            vals = vals[np.isfinite(vals)]
            if vals.size == 0:
                continue
            x = gi - 0.4 + width * (vi + 0.5)
            ax.boxplot(
                [vals],
                positions=[x],
                widths=width * 0.8,
                patch_artist=True,
                showfliers=False,
                boxprops={"facecolor": color_for(vi), "alpha": 0.45},
                medianprops={"color": "black"},
            )
            pts = vals if vals.size <= max_points else rng.choice(vals, max_points, replace=False)
            ax.scatter(
                x + rng.uniform(-width * 0.25, width * 0.25, pts.size),
                pts,
                s=6,
                color=color_for(vi),
                alpha=0.8,
                zorder=3,
            )
            drawn = True
    if not drawn:
        no_data(ax)
        return
    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels([g for g, _ in groups], fontsize=7, rotation=20, ha="right")
    ax.set_xlim(-0.6, len(groups) - 0.4)
    if log:
        ax.set_yscale("log")
    ax.set_ylabel(ylabel, fontsize=8)
    ax.tick_params(labelsize=7)
    ax.grid(True, axis="y", alpha=0.3)
    handles = [ax.scatter([], [], color=color_for(i), label=v) for i, v in enumerate(variants)]
    ax.legend(handles=handles, fontsize=7, loc="upper left", bbox_to_anchor=(1.005, 1.0), borderaxespad=0)


def plot_grouped_bars(
    ax, groups: Sequence[str], values: Mapping[str, Sequence[float | None]], ylabel: str = "", annotate: bool = True
) -> None:
    """Bars per group (x) and series (colour); None/NaN values are labelled "n/a", never 0."""
    series = list(values)
    width = 0.8 / max(1, len(series))
    drawn = False
    for si, name in enumerate(series):
        for gi, v in enumerate(values[name]):
            x = gi - 0.4 + width * (si + 0.5)
            if v is None or not np.isfinite(v):
                ax.text(x, 0, "n/a", ha="center", va="bottom", fontsize=6, color="#c44e52")
                continue
            ax.bar(x, v, width * 0.9, color=color_for(si), label=name if gi == 0 else None)
            if annotate:
                ax.text(x, v, f"{v:.3g}", ha="center", va="bottom", fontsize=6)
            drawn = True
    if not drawn:
        no_data(ax)
        return
    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels(groups, fontsize=7)
    ax.set_ylabel(ylabel, fontsize=8)
    ax.tick_params(labelsize=7)
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize=7)


def plot_tier_hits(
    ax,
    labels: Sequence[str],
    device: Sequence[float],
    host: Sequence[float],
    miss: Sequence[float],
    ylabel: str = "prompt tokens",
) -> None:
    """Stacked bars per label: device hits, host hits, computed (miss)."""
    if not labels:
        no_data(ax)
        return
    x = np.arange(len(labels))
    d, h, m = (np.nan_to_num(np.asarray(a, dtype=float)) for a in (device, host, miss))
    ax.bar(x, d, color="#55a868", label="device hit")
    ax.bar(x, h, bottom=d, color="#dd8452", label="host hit")
    ax.bar(x, m, bottom=d + h, color="#b0b0b0", label="computed (miss)")
    ax.set_xticks(x)
    ax.set_xticklabels(labels, fontsize=7, rotation=25, ha="right")
    ax.set_ylabel(ylabel, fontsize=8)
    ax.tick_params(labelsize=7)
    ax.legend(fontsize=7)
    ax.grid(True, axis="y", alpha=0.3)


def plot_history(
    ax,
    labels: Sequence[str],
    series: Mapping[str, Sequence[float | None]],
    change_points: Mapping[str, Sequence[int]] | None = None,
    failed: Mapping[str, Sequence[int]] | None = None,
    ylabel: str = "",
    title: str = "",
) -> None:
    """One metric over runs (x = run index, labelled), one line per variant; failed runs as
    crosses on the axis floor (no value, never 0); change points as dashed vertical lines."""
    change_points = change_points or {}
    failed = failed or {}
    xs = np.arange(len(labels), dtype=float)
    if xs.size == 0 or not series:
        no_data(ax)
        return
    finite = [v for ys in series.values() for v in ys if v is not None and np.isfinite(v)]
    floor = min(finite) if finite else 0.0
    for i, (name, ys) in enumerate(series.items()):
        y = np.asarray([np.nan if v is None else v for v in ys], dtype=float)
        ok = np.isfinite(y)
        ax.plot(xs[ok], y[ok], "-o", ms=3, lw=1, color=color_for(i), label=name)
        bad = list(failed.get(name, ()))
        if bad:
            ax.scatter(xs[bad], [floor] * len(bad), marker="x", s=40, color=color_for(i), zorder=4)
        for cp in change_points.get(name, ()):
            ax.axvline(xs[cp] - 0.5, ls="--", color=color_for(i), lw=1.2)
    step = max(1, len(labels) // 12)
    ax.set_xticks(xs[::step])
    ax.set_xticklabels(list(labels)[::step], fontsize=6, rotation=30, ha="right")
    ax.set_ylabel(ylabel, fontsize=8)
    ax.set_title(title, fontsize=9)
    ax.tick_params(labelsize=7)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.005, 1.0), borderaxespad=0)

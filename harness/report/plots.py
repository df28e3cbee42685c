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


# ------------------------------------------------------------------------ load shapes

CURVE_MAX_POINTS = 400  # a line of a curve figure keeps at most this many points
PERCENTILE_STYLES = {"p50": "-", "p90": "--", "p95": "-.", "p99": ":"}
TIER_COLORS = {"device": "#55a868", "host": "#dd8452", "storage": "#8172b3", "computed": "#b0b0b0"}


def decimate(x: Sequence[float], y: Sequence[float | None], max_points: int = CURVE_MAX_POINTS):
    """(x, y) as float arrays of at most ``max_points`` evenly spaced points (first and last kept);
    None becomes NaN (a gap, never 0)."""
    xa = np.asarray(x, dtype=float)
    ya = np.asarray([np.nan if v is None else v for v in y], dtype=float)
    if xa.size <= max_points:
        return xa, ya
    idx = np.unique(np.linspace(0, xa.size - 1, max_points).round().astype(int))
    return xa[idx], ya[idx]


def plot_percentile_lines(
    ax,
    series: Mapping[str, tuple[Sequence[float | None], Mapping[str, Sequence[float | None]]]],
    ylabel: str = "",
    xlabel: str = "",
    limit: float | None = None,
    log_y: bool = False,
    legend: bool = True,
) -> None:
    """One colour per variant (``series``: variant → (x, {percentile: y})), one line style per
    percentile (p50 solid, p90 dashed, p95 dash-dot, p99 dotted); ``limit``: an SLO as a red
    horizontal line. Points without an x or a y are left out; long series are decimated."""
    drawn = False
    for i, (name, (xs, by_pct)) in enumerate(series.items()):
        for pct, ys in by_pct.items():
            keep = [(x, y) for x, y in zip(xs, ys) if x is not None and y is not None and np.isfinite(y)]
            if not keep:
                continue
            x, y = decimate([k[0] for k in keep], [k[1] for k in keep])
            ax.plot(x, y, PERCENTILE_STYLES.get(pct, "-"), marker="o", ms=3, lw=1.3, color=color_for(i))
            drawn = True
    if not drawn:
        no_data(ax)
        return
    if limit is not None:
        ax.axhline(limit, color="#c44e52", lw=1, alpha=0.8)
        ax.text(1.0, limit, f" SLO {limit:g}", transform=ax.get_yaxis_transform(), fontsize=6.5, color="#c44e52")
    if log_y:
        ax.set_yscale("log")
    ax.set_ylabel(ylabel, fontsize=8)
    ax.set_xlabel(xlabel, fontsize=8)
    ax.tick_params(labelsize=7)
    ax.grid(True, alpha=0.3)
    if not legend:
        return
    handles = [ax.plot([], [], color=color_for(i), lw=2, label=n)[0] for i, n in enumerate(series)]
    pcts = list(dict.fromkeys(p for _, by in series.values() for p in by))
    handles += [ax.plot([], [], PERCENTILE_STYLES.get(p, "-"), color="#444", label=p)[0] for p in pcts]
    ax.legend(handles=handles, fontsize=6.5, loc="upper left", bbox_to_anchor=(1.005, 1.0), borderaxespad=0)


def plot_goodput(
    ax,
    series: Mapping[str, tuple[Sequence[float | None], Sequence[float | None], Sequence[float | None]]],
    knees: Mapping[str, float | None],
    xlabel: str = "offered rate, req/s",
    percentile: int | None = None,
) -> None:
    """Goodput (solid) and achieved rate (thin dotted) against the offered load, one colour per
    variant (``series``: variant → (x, goodput, achieved)); each variant's knee as a dashed
    vertical line, labelled. A variant without a knee says so in the legend."""
    drawn = False
    for i, (name, (xs, good, achieved)) in enumerate(series.items()):
        for ys, style, lw in ((good, "-o", 1.6), (achieved, ":", 1.0)):
            keep = [(x, y) for x, y in zip(xs, ys) if x is not None and y is not None]
            if keep:
                x, y = decimate([k[0] for k in keep], [k[1] for k in keep])
                ax.plot(x, y, style, ms=3, lw=lw, color=color_for(i))
                drawn = True
        k = knees.get(name)
        if k is not None:
            ax.axvline(k, ls="--", lw=1.2, color=color_for(i))
            ax.text(
                k,
                1.0,
                f" knee {k:g}",
                transform=ax.get_xaxis_transform(),
                fontsize=6.5,
                color=color_for(i),
                va="top",
                rotation=90,
            )
    if not drawn:
        no_data(ax)
        return
    ax.set_ylabel("req/s", fontsize=8)
    ax.set_xlabel(xlabel, fontsize=8)
    ax.tick_params(labelsize=7)
    ax.grid(True, alpha=0.3)
    at = f" (p{percentile})" if percentile else ""
    handles = [
        ax.plot([], [], "-o", ms=3, color=color_for(i), label=f"{n} goodput, knee{at} {_g(knees.get(n))}")[0]
        for i, n in enumerate(series)
    ]
    handles.append(ax.plot([], [], ":", color="#444", label="achieved rate")[0])
    ax.legend(handles=handles, fontsize=6.5, loc="upper left", bbox_to_anchor=(1.005, 1.0), borderaxespad=0)


def _g(v: float | None) -> str:
    return "none" if v is None else f"{v:g}"


def plot_slo_fractions(
    ax, series: Mapping[str, tuple[Sequence[float | None], Mapping[str, Sequence[float | None]]]], xlabel: str = ""
) -> None:
    """The share of requests meeting each SLO limit (and all of them) against the load: one colour
    per variant, one line style per limit (``series``: variant → (x, {limit: shares}))."""
    styles = ["-", "--", "-.", ":"]
    names: list[str] = []
    drawn = False
    for i, (_, (xs, by_limit)) in enumerate(series.items()):
        for label, ys in by_limit.items():
            if label not in names:
                names.append(label)
            keep = [(x, y) for x, y in zip(xs, ys) if x is not None and y is not None]
            if keep:
                x, y = decimate([k[0] for k in keep], [k[1] for k in keep])
                ax.plot(x, y, styles[names.index(label) % 4], marker="o", ms=3, lw=1.3, color=color_for(i))
                drawn = True
    if not drawn:
        no_data(ax, "no SLO")
        return
    ax.set_ylim(-0.03, 1.03)
    ax.set_ylabel("share meeting the SLO", fontsize=8)
    ax.set_xlabel(xlabel, fontsize=8)
    ax.tick_params(labelsize=7)
    ax.grid(True, alpha=0.3)
    handles = [ax.plot([], [], color=color_for(i), lw=2, label=n)[0] for i, n in enumerate(series)]
    handles += [ax.plot([], [], styles[k % 4], color="#444", label=n)[0] for k, n in enumerate(names)]
    ax.legend(handles=handles, fontsize=6.5, loc="upper left", bbox_to_anchor=(1.005, 1.0), borderaxespad=0)


def plot_round_tiers(
    ax, rounds: Sequence[int], tiers: Mapping[str, Mapping[str, Sequence[float]]], ylabel: str = "prompt tokens"
) -> None:
    """Per round (x), one stacked bar per variant (side by side, labelled under the bar): tokens
    from the GPU (device), the host tier, storage, and computed (miss)."""
    if not rounds or not tiers:
        no_data(ax)
        return
    names = list(tiers)
    width = 0.8 / len(names)
    x0 = np.arange(len(rounds), dtype=float)
    for vi, n in enumerate(names):
        x = x0 - 0.4 + width * (vi + 0.5)
        bottom = np.zeros(len(rounds))
        for tier in ("device", "host", "storage", "computed"):
            vals = np.nan_to_num(np.asarray(tiers[n].get(tier, [0] * len(rounds)), dtype=float))
            ax.bar(
                x,
                vals,
                width * 0.92,
                bottom=bottom,
                color=TIER_COLORS[tier],
                label=tier if vi == 0 else None,
                edgecolor="white",
                lw=0.4,
            )
            bottom += vals
        if len(names) > 1:
            for xi in x:
                ax.text(xi, 0, n, rotation=90, fontsize=5.5, ha="center", va="bottom", color="#222")
    ax.set_xticks(x0)
    ax.set_xticklabels([f"round {k}" for k in rounds], fontsize=7)
    ax.set_ylabel(ylabel, fontsize=8)
    ax.tick_params(labelsize=7)
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.005, 1.0), borderaxespad=0)


def limit_line(ax, y: float, label: str) -> None:
    """A red horizontal line at ``y`` (a limit), labelled at the right."""
    ax.axhline(y, color="#c44e52", lw=1, ls="--")
    ax.text(1.0, y, f" {label}", transform=ax.get_yaxis_transform(), fontsize=6.5, color="#c44e52", va="center")


TREND_COLORS = {"LEAK": "#c44e52", "STABLE": "#55a868", "INCONCLUSIVE": "#dd8452"}


def plot_trend(
    ax,
    t_s: Sequence[float],
    values: Sequence[float],
    slope_per_h: float | None,
    intercept: float | None,
    unit: str,
    title: str,
    verdict: str,
) -> None:
    """One soak series: its slice points over minutes and its Theil–Sen line, titled with the
    verdict (coloured: LEAK red, STABLE green, INCONCLUSIVE orange)."""
    if not values:
        no_data(ax, f"{title}: not measured")
        return
    color = TREND_COLORS.get(verdict, "#8c8c8c")
    minutes = np.asarray(t_s, dtype=float) / 60.0
    ax.plot(minutes, values, "o", ms=3.5, color="#4c72b0", label="slice")
    if slope_per_h is not None and intercept is not None:
        line = intercept + slope_per_h * minutes / 60.0
        ax.plot(minutes, line, "-", lw=1.6, color=color, label="Theil–Sen")
    ax.set_title(f"{title}: {verdict}", fontsize=9, color=color)
    ax.set_xlabel("minutes into the soak", fontsize=7)
    ax.set_ylabel(unit, fontsize=7)
    ax.tick_params(labelsize=7)
    ax.grid(alpha=0.3)

"""Each headline metric over a scenario's runs, with change points and configuration markers.

One job: runs of one scenario → per metric × variant series (one value per night for the plot,
the per-repeat values of each night for the test) → `detect_change` → a `History`. (The page is
`harness.report.history_page`; the ``harness history`` command is `harness.cli.history`.)

Headline metrics are what each workload's kind declares (`harness.workloads`), named as
expectations name them (`harness.analysis.expectations`): its derived figures, ``<workload>.<derived>``
(prefill_total_tok_s, decode_tok_s, second_pass_speedup, host_speedup, interference, ...), and
its ``history_stats``, ``<workload>.<phase>.<metric>_<stat>`` (e.g. a short_ttft workload's
``alone.ttft_ms_p50`` and ``during_long.ttft_ms_p50``). A night's values are its figures'
per-repeat values (``derived_by_repeat``, ``history_stats_by_repeat``) — the figures compare and
the report read (`harness.analysis.figures`: the stored summary with what it lacks recomputed
from the night's requests.jsonl), so a summary written before the per-repeat figures gets them
from its records; one without records gives its one pooled value. A workload's kind comes from the scenario stored in the run. A run
where the variant failed has no value (a cross on the plot, never 0).

Markers. Where the scenario text (its hash) changed between two consecutive runs, every
variant's series gets a marker; where a variant's config hash changed, that variant's. A marker
starts a new segment: change points are searched within segments only, so a step across a
marker is never blamed on the code (the page shows the marker and its date instead).

Change-point rule (`detect_change`, pure). For each night i (oldest first) with at least
``min_before`` (3) nights with a value before it in its segment: ``before`` = the per-repeat
values of up to ``window`` (5) such nights, ``m`` = their median. A step at i is flagged when

  - it is sustained: at least ``persist`` (2) consecutive nights from i on (up to ``window``,
    within the segment) each differ from ``m`` (their own median) in the same direction by at
    least the threshold (relative; the scenario's threshold for the metric,
    `harness.compare.statistics.threshold_for`, default 5 %), AND
  - it is significant: `harness.compare.statistics.decide` — the same test as ``harness
    compare`` — on ``before`` against the per-repeat values of those nights says regression or
    improvement (at least the threshold, p < 0.05).

So a one-night spike that reverts is never a step, noise is not either (not significant), a
change seen on the last night only waits for a second night, and a step that lasted two nights
or more is flagged even if it was fixed later. After a flagged step the search continues
``window`` nights later. A series with fewer than ``min_before + persist`` nights with a value in
every segment → ``insufficient_history``.

Each series' own spread. The threshold a series is held to is the larger of the declared one
and ``NOISE_K`` (3.5) × its night-to-night spread (`night_spread`: the relative standard
deviation of one night's median from the next, estimated from the median absolute difference
of consecutive nights within a segment, so a step moves it by one difference only): a cache-hit
ratio that swings ±15 % night to night is not held to a 5 % threshold. The decision says which
threshold it used and why.

Slow drift (`slow_drift`, pure). A series that moves a little every night never makes a
step. Over the newest segment's nights (at least ``DRIFT_MIN_NIGHTS``), the Theil-Sen slope of
the nightly medians times the segment's span is the drift; it is flagged (state ``drift``)
when Kendall's tau against the night index is significant (p < 0.05) and the drift is at least
the series' threshold.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from harness.analysis.expectations import scenario_expectations
from harness.analysis.figures import variant_figures
from harness.compare.changes import night_changes
from harness.compare.runs import run_workload_kinds
from harness.compare.statistics import decide, threshold_for
from harness.measures.metrics import METRICS
from harness.server import startup_phases
from harness.store import gpu_time, results, run_folder
from harness.store.manifest import Manifest
from harness.store.summary import Summary
from harness.store.variant_status import VariantStatus
from harness.workloads import derived_figures, kind_of

MIN_BEFORE = 3
PERSIST = 2
WINDOW = 5
NOISE_K = 3.5  # a series' threshold is at least this many night-to-night standard deviations
DRIFT_MIN_NIGHTS = 6
DRIFT_ALPHA = 0.05

NightValues = float | Sequence[float] | None  # one night: its value, its per-repeat values, or none


@dataclass(frozen=True)
class ChangePoint:
    index: int  # position in the series (first night of the new level)
    before: float  # median of the per-repeat values before
    after: float  # median of the per-repeat values of the nights that moved
    change: float  # relative change (after - before) / |before|
    direction: str  # regression | improvement
    test: str = ""  # the statistical test (harness.compare.statistics)
    p_value: float | None = None
    nights: int = 0  # how many nights the step lasted (within the window)


@dataclass(frozen=True)
class Drift:
    """A slow, monotone move over a segment's nights (`slow_drift`)."""

    first: int  # index of the segment's first night
    nights: int
    change: float  # relative: slope × span / |median|
    direction: str  # regression | improvement
    p_value: float


@dataclass
class ChangeDecision:
    state: str  # insufficient_history | stable | change | drift
    change_points: list[ChangePoint] = field(default_factory=list)
    n: int = 0
    reason: str = ""
    threshold: float | None = None  # what the series was held to (declared, or its own spread's)
    spread: float | None = None  # relative night-to-night standard deviation (`night_spread`)
    drift: Drift | None = None

    @property
    def regression(self) -> bool:
        """A step or a drift for the worse."""
        return any(p.direction == "regression" for p in self.change_points) or (
            self.drift is not None and self.drift.direction == "regression"
        )


@dataclass(frozen=True)
class Marker:
    """A night where the configuration changed: the first run of the new configuration."""

    index: int
    run_id: str
    created_at: str | None
    what: str  # e.g. "scenario text changed", "config changed"
    variants: tuple[str, ...] | None  # None: every variant (the scenario text changed)


def _night(v: NightValues) -> np.ndarray:
    """The finite values of one night."""
    if v is None:
        return np.array([], dtype=float)
    a = np.atleast_1d(np.asarray(v, dtype=float))
    return a[np.isfinite(a)]


def night_spread(medians: Sequence[float], segment: Sequence[int] = ()) -> float | None:
    """The relative standard deviation of one night's median about the next: 1.4826 × the
    median |difference| of consecutive nights of one segment / √2, over the median of the
    medians. None below 3 differences or with a median of 0. Robust: a step is one difference.
    Pure."""
    seg = list(segment) or [0] * len(medians)
    diffs = [abs(b - a) for (a, sa), (b, sb) in zip(zip(medians, seg), zip(medians[1:], seg[1:])) if sa == sb]
    center = abs(float(np.median(medians))) if len(medians) else 0.0
    if len(diffs) < 3 or center == 0:
        return None
    return float(1.4826 * np.median(diffs) / math.sqrt(2) / center)


def slow_drift(medians: Sequence[float], threshold: float, higher_is_better: bool) -> Drift | None:
    """A monotone drift over one segment's nightly medians (oldest first): Theil-Sen slope ×
    span, relative to the median, when Kendall's tau is significant and the drift is at least
    ``threshold``; None otherwise (or below ``DRIFT_MIN_NIGHTS`` nights). Pure."""
    from scipy import stats

    y = np.asarray(medians, dtype=float)
    if y.size < DRIFT_MIN_NIGHTS or not np.isfinite(y).all() or np.ptp(y) == 0:
        return None
    x = np.arange(y.size, dtype=float)
    tau = stats.kendalltau(x, y)
    slope = float(stats.theilslopes(y, x).slope)
    center = abs(float(np.median(y)))
    if center == 0 or not math.isfinite(float(tau.pvalue)) or float(tau.pvalue) >= DRIFT_ALPHA:
        return None
    change = slope * (y.size - 1) / center
    if abs(change) < threshold:
        return None
    worse = change < 0 if higher_is_better else change > 0
    return Drift(0, int(y.size), change, "regression" if worse else "improvement", float(tau.pvalue))


def detect_change(
    values: Sequence[NightValues],
    threshold: float,
    higher_is_better: bool,
    min_before: int = MIN_BEFORE,
    persist: int = PERSIST,
    window: int = WINDOW,
    breaks: Sequence[int] = (),
    noise_k: float = NOISE_K,
) -> ChangeDecision:
    """Sustained, significant steps in a nightly series, and slow drift over its newest
    segment (see the module docstring). A night is a value, its per-repeat values, or None/NaN
    (a failed or missing night, skipped). ``breaks``: night indices where a new segment
    (configuration) starts. The threshold used is the larger of ``threshold`` and ``noise_k`` ×
    the series' night-to-night spread."""
    nights = [(i, a) for i, a in ((i, _night(v)) for i, v in enumerate(values)) if a.size]
    n = len(nights)
    cuts = sorted(set(breaks))
    segment = [sum(1 for b in cuts if b <= i) for i, _ in nights]
    declared = threshold
    spread = night_spread([float(np.median(a)) for _, a in nights], segment)
    if spread is not None and noise_k * spread > threshold:
        threshold = noise_k * spread
    held = f"threshold {threshold * 100:.1f}%" + (
        ""
        if threshold == declared
        else f" ({noise_k:g} × the series' night-to-night spread {spread * 100:.1f}%; declared {declared * 100:.0f}%)"
    )
    longest = max((segment.count(s) for s in set(segment)), default=0)
    if longest < min_before + persist:
        where = " in one configuration" if len(set(segment)) > 1 else ""
        return ChangeDecision(
            "insufficient_history",
            [],
            n,
            f"{longest if cuts else n} nights with a value{where}; need {min_before + persist} "
            f"({min_before} before a step, {persist} to confirm it)",
            threshold,
            spread,
        )
    points: list[ChangePoint] = []
    j = 0
    while j < n:
        start = next(k for k in range(n) if segment[k] == segment[j])
        if j - start < min_before:
            j += 1
            continue
        before = np.concatenate([a for _, a in nights[max(start, j - window) : j]])
        m = float(np.median(before))
        need = threshold * abs(m)
        levels = [float(np.median(a)) - m for _, a in nights[j : j + window]]
        sign = 1.0 if levels[0] > 0 else -1.0
        run = 0
        while run < len(levels) and segment[j + run] == segment[j] and need > 0 and sign * levels[run] >= need:
            run += 1
        if run >= persist:
            after = np.concatenate([a for _, a in nights[j : j + run]])
            d = decide(before, after, higher_is_better, threshold)
            if d.state in ("regression", "improved"):
                points.append(
                    ChangePoint(
                        nights[j][0],
                        m,
                        float(np.median(after)),
                        float(d.change),
                        "regression" if d.state == "regression" else "improvement",
                        d.test,
                        d.p_value,
                        run,
                    )
                )
                j += window
                continue
        j += 1
    last = [(i, a) for (i, a), seg in zip(nights, segment) if seg == segment[-1]] if nights else []
    drift = slow_drift([float(np.median(a)) for _, a in last], threshold, higher_is_better) if last else None
    if drift is not None:
        drift = Drift(last[0][0], drift.nights, drift.change, drift.direction, drift.p_value)
    drift_text = (
        ""
        if drift is None
        else f"slow drift ({drift.direction}) of {drift.change * 100:+.1f}% over the last {drift.nights} nights "
        f"(Theil-Sen, Kendall p={drift.p_value:.2g})"
    )
    if points:
        return ChangeDecision(
            "change",
            points,
            n,
            "; ".join(
                f"{p.direction} of {p.change * 100:+.1f}% at night {p.index + 1} ({p.nights} nights, {p.test}"
                f"{'' if p.p_value is None else f' p={p.p_value:.2g}'})"
                for p in points
            )
            + (f"; {drift_text}" if drift_text else "")
            + f"; {held}",
            threshold,
            spread,
            drift,
        )
    if drift is not None:
        return ChangeDecision("drift", [], n, f"{drift_text}; no step; {held}", threshold, spread, drift)
    return ChangeDecision(
        "stable",
        [],
        n,
        "no sustained, significant step beyond the threshold"
        + (f" (searched within {len(set(segment))} configurations)" if len(set(segment)) > 1 else "")
        + f"; {held}",
        threshold,
        spread,
    )


# ------------------------------------------------------------------------------------ collecting


def headline_values(summary: Summary | None, names_to_kinds: Mapping[str, str]) -> dict[str, float | None]:
    """{metric name: value} of one variant's summary: what each workload's kind declares
    (derived figures the summary holds, history stats of the phases it has); nothing for a
    workload of a kind this harness does not know. ``names_to_kinds``: {workload: kind}."""
    out: dict[str, float | None] = {}
    for wl, w in ((summary.workloads if summary is not None else None) or {}).items():
        kind = kind_of(wl, names_to_kinds)
        if kind is None:
            continue
        for d in kind.derived:
            if d.name in w.derived:
                out[f"{wl}.{d.name}"] = w.derived[d.name]
        for s in kind.history_stats:
            if s.phase in w.phases:
                out[f"{wl}.{s.phase}.{s.metric}_{s.stat}"] = s.stored(w.phases)
    return out


def headline_samples(summary: Summary | None, names_to_kinds: Mapping[str, str]) -> dict[str, list[float]]:
    """{metric name: per-repeat values} of one variant's summary (the names of
    `headline_values`): ``derived_by_repeat`` and ``history_stats_by_repeat``; a summary
    written before them gives its one pooled value."""
    pooled = headline_values(summary, names_to_kinds)
    out: dict[str, list[float]] = {}
    for wl, w in ((summary.workloads if summary is not None else None) or {}).items():
        per = {
            **{f"{wl}.{k}": v for k, v in (w.derived_by_repeat or {}).items()},
            **{f"{wl}.{k}": v for k, v in (w.history_stats_by_repeat or {}).items()},
        }
        for name, vs in per.items():
            if name in pooled:
                out[name] = [float(v) for v in vs if isinstance(v, (int, float)) and math.isfinite(v)]
    for name, v in pooled.items():
        if name not in out and isinstance(v, (int, float)) and math.isfinite(v):
            out[name] = [float(v)]
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
    if name.startswith(gpu_time.HISTORY_PREFIX):
        return False, "GPU-min"  # a night's GPU time: less is better
    if name.startswith(startup_phases.HISTORY_PREFIX):
        return False, "s"  # a start's phase: shorter is better
    _, phase, metric = _parse_name(name)
    info = METRICS.get(metric) if phase != "*" else derived_figures().get(metric)
    return (True, "") if info is None else (info.higher_is_better, info.unit)


@dataclass
class History:
    scenario: str
    runs: list[dict]  # run_id, created_at, path, simulated, scenario_hash
    series: dict[str, dict[str, list[float | None]]]  # metric -> variant -> value per run (pooled)
    failed: dict[str, list[int]]  # variant -> run indices where it failed
    decisions: dict[str, dict[str, ChangeDecision]]
    thresholds: dict[str, float]
    samples: dict[str, dict[str, list[list[float] | None]]] = field(default_factory=dict)  # per-repeat values
    markers: list[Marker] = field(default_factory=list)
    breaks: dict[str, list[int]] = field(default_factory=dict)  # variant -> run indices starting a segment
    # run index of a change point -> what differs from the night before it (harness.compare.changes)
    night_changes: dict[int, list[dict]] = field(default_factory=dict)

    @property
    def simulated(self) -> bool:
        return any(r.get("simulated") for r in self.runs)


def config_markers(runs: Sequence[Mapping]) -> tuple[list[Marker], dict[str, list[int]]]:
    """The markers of a list of runs (each with ``scenario_hash`` and ``config_hashes``
    {variant: hash}) and, per variant, the run indices where its series starts a new segment.
    A variant's config is compared with the last earlier run that had it. Pure."""
    markers: list[Marker] = []
    breaks: dict[str, list[int]] = {}
    last_config: dict[str, str | None] = {}
    prev_scenario = None
    for i, r in enumerate(runs):
        scenario_changed = i > 0 and r.get("scenario_hash") != prev_scenario
        changed = [v for v, h in r["config_hashes"].items() if v in last_config and last_config[v] != h]
        if scenario_changed:
            markers.append(
                Marker(
                    i,
                    r["run_id"],
                    r.get("created_at"),
                    "scenario text changed" + (f"; config changed: {', '.join(changed)}" if changed else ""),
                    None,
                )
            )
            for v in {*last_config, *r["config_hashes"]}:
                breaks.setdefault(v, []).append(i)
        elif changed:
            markers.append(
                Marker(i, r["run_id"], r.get("created_at"), f"config changed: {', '.join(changed)}", tuple(changed))
            )
            for v in changed:
                breaks.setdefault(v, []).append(i)
        prev_scenario = r.get("scenario_hash")
        last_config.update(r["config_hashes"])
    return markers, breaks


def collect(results_dir: Path, scenario: str) -> History:
    """Load every complete run of a scenario (oldest first) and decide change points."""
    runs = []
    per_run: list[dict[str, dict[str, list[float]]]] = []
    loaded: list[tuple[Manifest, dict[str, VariantStatus]]] = []  # each night's manifest and statuses, for what changed
    pooled_run: list[dict[str, dict[str, float | None]]] = []
    failed: dict[str, list[int]] = {}
    thresholds: dict[str, float] = {}
    for p in results.list_runs(results_dir, scenario):
        try:
            run = run_folder.load_run(p)
        except (results.ResultsError, TypeError, KeyError, AttributeError):
            continue
        if not run.complete:
            continue
        if run.manifest.shard:
            continue  # one shard of a night: its merged run (if written here) stands for the night
        names_to_kinds = run_workload_kinds(run.manifest)
        try:  # a night's figures as compare and the report read them (`harness.analysis.figures`)
            figures = {v.name: variant_figures(v, names_to_kinds) for v in run.variants if v.ok}
        except results.ResultsError:
            continue  # rows that are not request records: a damaged night, skipped as an unreadable one
        i = len(runs)
        runs.append(
            {
                "run_id": run.run_id,
                "created_at": run.manifest.created_at,
                "path": str(p),
                "simulated": run.manifest.simulated,
                "scenario_hash": run.manifest.scenario.hash,
                "config_hashes": {e.name: e.config_hash for e in run.manifest.variants},
            }
        )
        thresholds = {k: t.fraction for k, t in scenario_expectations(run.manifest).thresholds.items()}
        vals: dict[str, dict[str, list[float]]] = {}
        pooled: dict[str, dict[str, float | None]] = {}
        for v in run.variants:
            if not v.ok:
                if v.status.expect != "startup_failed":
                    failed.setdefault(v.name, []).append(i)
                continue
            vals[v.name] = headline_samples(figures[v.name], names_to_kinds)
            pooled[v.name] = headline_values(figures[v.name], names_to_kinds)
            night = {**gpu_time.history_values(v.status.timing), **startup_phases.history_values(v.status.startup)}
            for name, value in night.items():  # one value a night
                vals[v.name][name] = [value]
                pooled[v.name][name] = value
        per_run.append(vals)
        pooled_run.append(pooled)
        loaded.append((run.manifest, {v.name: v.status for v in run.variants}))
    markers, breaks = config_markers(runs)
    metrics = sorted({m for r in pooled_run for vs in r.values() for m in vs})
    variants = list(dict.fromkeys(v for r in pooled_run for v in r))
    series: dict[str, dict[str, list[float | None]]] = {}
    samples: dict[str, dict[str, list[list[float] | None]]] = {}
    decisions: dict[str, dict[str, ChangeDecision]] = {}
    for m in metrics:
        hib, _ = metric_direction(m)
        thr, _ = threshold_for(thresholds, *_parse_name(m))
        for v in variants:
            ys = [r.get(v, {}).get(m) for r in pooled_run]
            if all(y is None for y in ys):
                continue
            nights = [r.get(v, {}).get(m) for r in per_run]
            series.setdefault(m, {})[v] = ys
            samples.setdefault(m, {})[v] = nights
            decisions.setdefault(m, {})[v] = detect_change(nights, thr, hib, breaks=breaks.get(v, ()))
    flagged = {p.index for ds in decisions.values() for d in ds.values() for p in d.change_points if p.index > 0}
    changed = {i: night_changes_of(loaded[i - 1], loaded[i]) for i in sorted(flagged)}
    return History(scenario, runs, series, failed, decisions, thresholds, samples, markers, breaks, changed)


def night_changes_of(
    before: tuple[Manifest, dict[str, VariantStatus]], after: tuple[Manifest, dict[str, VariantStatus]]
) -> list[dict]:
    """What differs between two nights ((manifest, {variant: status}) each), ranked."""
    (bm, bs), (am, as_) = before, after
    return [c.to_json() for c in night_changes(bm, am, bs, as_)]

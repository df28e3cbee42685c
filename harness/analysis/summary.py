"""Records → per workload/phase statistics and the derived ratios the table reports. Pure.

`summarize(records)` returns (JSON-ready; every statistic null when there is nothing to measure,
never 0):

    {"n_requests", "n_errors", "errors": {error: count}, "repeats": [..],
     "workloads": {<workload>: {
         "phases": {<phase>: {
             "n", "n_errors", "errors": {error: count}, "n_warmup", "filler": bool,
             "metrics": {<metric>: {"n", "mean", "p50", "p90", "p95", "p99", "min", "max"} | null},
             "hits": {"prompt_tokens", "cached_tokens", "device_tokens", "host_tokens",
                      "storage_tokens", "requests_with_host_hit", "requests_with_device_hit",
                      "tiers_reported"},
             "figures": {...},     # only where the kind declares phase_figures
             "roofline": {...}}},  # only a phase with host/storage hits, given a platform (harness.measures.roofline)
         "derived": {<name>: float | null},
         "derived_by_repeat": {<name>: [float | null, ...]},
         "history_stats_by_repeat": {"<phase>.<metric>_<stat>": [float | null, ...]}}},
     "unexercised": [{"workload", "phase", "tier", "prompt_tokens", "cached_tokens",
                      "tier_tokens", "figures": [..], "text"}],   # only when the tiers are given
     "tier_prediction": {"pools", "phases": {<workload>: {<phase>: {predicted, achieved, ...}}},
                         "shortfalls": [..]}}   # only when the pools are given (harness.measures.tier_model)

Warm-up requests are left out (counted in `n_warmup`); errored requests are left out of the
metrics and counted in `n_errors`/`errors`. `itl_ms` pools every chunk gap of the phase (like
bench_serving); `pass_wall_s` is over the phase's concurrency groups without errors.
Filler phases (repeat_prefill's "evict") are flagged and never used in a derived ratio.

Derived figures (second_pass_speedup, host_speedup, interference, ...) are declared by each
workload kind (``harness/workloads/kinds/<kind>.py``, ``KIND.derived``) and computed here from that
workload's phase summaries; filler phases are declared there too. ``derived`` is computed over
all repeats pooled; ``derived_by_repeat`` applies the same declaration to the records of each
repeat alone (one value per entry of the summary's ``repeats``, null where that repeat has no
value), so that ``harness compare`` and ``harness history`` have n = repeats values of each
figure. ``history_stats_by_repeat`` does the same for the phase statistics the kind's
``history_stats`` declares. A kind that declares ``phase_figures`` (figures that need the
phase's records and the workload's config: schedule lag, SLO attainment) gets their value in each
phase's ``"figures"``; ``workload_configs`` passes the configs (without one the kind gets None).

Unexercised cache phases (`unexercised_phases`): a phase that its kind declares exists to hit
one cache tier (`WorkloadKind.hit_tier`: repeat_prefill's repeat_device → device,
repeat_after_evict → host, parallel_prefixes' later passes → host), on a variant that has that
tier, whose measured requests got none of it (or, where the server reports no tiers, nothing
cached at all), measured recompute: the figures derived from it (device_speedup, host_speedup,
second_pass_speedup, ...; not those that count the hits themselves) are listed with it, and
checks and gates on them are inconclusive (`harness.analysis.expectations`, `harness.compare`). A host or
storage phase on a variant without that tier (HiCache off) is expected to miss: not listed.

Server-counter deltas per phase come from `harness.analysis.samples.summarize_samples` (the sampler's
samples carry the same phase labels, `workloads.context.phase_label`), not from here.
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from harness.measures import metrics as M
from harness.measures.roofline import Platform, cold_prefill_rate, workload_rooflines
from harness.measures.tier_model import TierPools, phase_predictions, shortfalls
from harness.store.records import RequestRecord
from harness.store.stats import STAT_KEYS
from harness.store.summary import Summary
from harness.workloads import derived_figures, kinds
from harness.workloads.config import WorkloadConfig

SUMMARY_VERSION = 1


def stats(values: Iterable[float | None]) -> dict[str, float | int] | None:
    """n, mean, p50, p90, p95, p99, min, max of the finite values; None if there are none."""
    a = np.asarray([v for v in values if v is not None], dtype=float)
    a = a[np.isfinite(a)]
    if a.size == 0:
        return None
    p50, p90, p95, p99 = np.percentile(a, [50, 90, 95, 99])
    return {
        "n": int(a.size),
        "mean": float(a.mean()),
        "p50": float(p50),
        "p90": float(p90),
        "p95": float(p95),
        "p99": float(p99),
        "min": float(a.min()),
        "max": float(a.max()),
    }


def _hits(rs: Sequence[RequestRecord]) -> dict[str, int]:
    reported = [r for r in rs if r.cached_host is not None or r.cached_device is not None]
    return {
        "prompt_tokens": sum(M.prompt_token_count(r) or 0 for r in rs),
        "cached_tokens": sum(r.cached_tokens or 0 for r in rs),
        "device_tokens": sum(r.cached_device or 0 for r in reported),
        "host_tokens": sum(r.cached_host or 0 for r in reported),
        "storage_tokens": sum(r.cached_storage or 0 for r in reported),
        "requests_with_host_hit": sum(1 for r in reported if (r.cached_host or 0) > 0),
        "requests_with_device_hit": sum(1 for r in reported if (r.cached_device or 0) > 0),
        "tiers_reported": len(reported),
    }


PhaseFigures = Callable[[str, Sequence[RequestRecord]], Mapping[str, Any]]


def _phase_summary(
    workload: str,
    phase: str,
    rs: list[RequestRecord],
    walls: list[M.GroupWall],
    filler: bool,
    figures: PhaseFigures | None = None,
) -> dict[str, Any]:
    measured = [r for r in rs if not r.warmup]
    ok = [r for r in measured if r.error is None]
    errors = Counter(r.error for r in measured if r.error is not None)
    metrics: dict[str, Any] = {}
    for name in M.REQUEST_METRICS:
        if name == "itl_ms":
            metrics[name] = stats(v for r in ok for v in M.itl_values_ms(r))
        else:
            metrics[name] = stats(M.DERIVATIONS[name](r) for r in ok)
    metrics["pass_wall_s"] = stats(
        w.wall_s for w in walls if w.workload == workload and w.phase == phase and w.n_errors == 0
    )
    out = {
        "n": len(ok),
        "n_errors": sum(errors.values()),
        "errors": dict(errors),
        "n_warmup": len(rs) - len(measured),
        "filler": filler,
        "metrics": metrics,
        "hits": _hits(ok),
    }
    if figures is not None:
        out["figures"] = dict(figures(phase, rs))
    return out


def derived(kind: str, phases: dict[str, Any]) -> dict[str, float | None]:
    """The figures workload kind ``kind`` derives from its phase summaries (those it has the
    phases for); nothing for a kind this harness does not know."""
    declared = kinds().get(kind)
    if declared is None:
        return {}
    return {d.name: d.compute(phases) for d in declared.derived if d.applies(phases)}


def _figures(kind: str, config: Any) -> PhaseFigures | None:
    """The kind's ``phase_figures`` bound to the workload's config, or None if it declares none."""
    declared = kinds().get(kind)
    if declared is None or declared.phase_figures is None:
        return None
    return functools.partial(declared.phase_figures, config)


@dataclass(frozen=True)
class Roofline:
    """What the hit phases' rooflines need beyond their records (`harness.measures.roofline`)."""

    platform: Platform
    variant_cold_rate: float | None  # tokens/s of the variant's uncached requests (a workload without any)


def _phase_summaries(
    workload: str,
    records: list[RequestRecord],
    filler: frozenset[str],
    figures: PhaseFigures | None = None,
    roof: Roofline | None = None,
) -> dict[str, Any]:
    """{phase: its summary} of one workload's records; with ``roof``, each phase that got host or
    storage hits gains its ``roofline`` (`harness.measures.roofline.phase_roofline`)."""
    walls = M.group_walls(records)
    phases: dict[str, list[RequestRecord]] = {}
    for r in records:
        phases.setdefault(r.phase, []).append(r)
    out = {p: _phase_summary(workload, p, rs, walls, p in filler, figures) for p, rs in phases.items()}
    if roof is not None:
        for p, rl in workload_rooflines(phases, roof.platform, roof.variant_cold_rate, filler).items():
            out[p]["roofline"] = rl
    return out


def by_repeat(
    kind: str,
    records: list[RequestRecord],
    repeats: Sequence[int],
    filler: frozenset[str] = frozenset(),
    config: Any = None,
    roof: Roofline | None = None,
) -> tuple[dict[str, list], dict[str, list]]:
    """(derived_by_repeat, history_stats_by_repeat) of one workload's records: the kind's
    declarations applied to the records of each repeat alone, one value per entry of
    ``repeats`` (None where that repeat has no value). Nothing for an unknown kind.
    ``config``: the workload's config, for a kind that declares ``phase_figures``."""
    declared = kinds().get(kind)
    if declared is None:
        return {}, {}
    per: dict[int, list[RequestRecord]] = {r: [] for r in repeats}
    for rec in records:
        per.setdefault(rec.repeat, []).append(rec)
    wl = records[0].workload if records else ""
    figures: dict[str, list] = {}
    stats_: dict[str, list] = {}
    for i, r in enumerate(repeats):
        ph = _phase_summaries(wl, per[r], filler, _figures(kind, config), roof) if per[r] else {}
        for name, v in derived(kind, ph).items():
            figures.setdefault(name, [None] * len(repeats))[i] = v
        for s in declared.history_stats:
            if s.phase in ph:
                stats_.setdefault(f"{s.phase}.{s.metric}_{s.stat}", [None] * len(repeats))[i] = s.of(ph)
    return figures, stats_


_TIER_TOKENS = {"device": "device_tokens", "host": "host_tokens", "storage": "storage_tokens"}


@dataclass(frozen=True)
class UnexercisedPhase:
    """A phase that exists to hit ``tier`` and got none of it: what it and its figures measured."""

    workload: str
    phase: str
    tier: str
    prompt_tokens: int
    cached_tokens: int  # every tier together
    tier_tokens: int | None  # None: the server reported no tiers (judged on cached_tokens)
    figures: tuple[str, ...]  # the derived figures that read this phase (not hit counts)

    @property
    def text(self) -> str:
        """One line for people: what the phase got, and what its figures therefore measure."""
        exists = f"it exists to measure {self.tier}-tier hits"
        if self.tier_tokens is None:
            exists += "; the server reported no tiers"
        if not self.cached_tokens:
            head = f"got no cache hit at all (0 of {self.prompt_tokens:,} prompt tokens cached; {exists})"
            what = "measure recompute"
        else:
            head = (
                f"got no {self.tier}-tier hit ({self.cached_tokens:,} of {self.prompt_tokens:,} prompt "
                f"tokens cached, from other tiers; {exists})"
            )
            what = f"do not measure the {self.tier} tier"
        tail = f": {', '.join(self.figures)} {what}" if self.figures else ""
        return f"{self.workload}/{self.phase} {head}{tail}"

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "figures": list(self.figures), "text": self.text}


def unexercised_phases(
    workloads: Mapping[str, Any], workload_kinds: Mapping[str, str] | None, tiers: Iterable[str]
) -> list[UnexercisedPhase]:
    """The phases of a variant's summarised ``workloads`` that exist to hit a cache tier the
    variant has (``tiers``: `Variant.cache_tiers`) and whose measured requests got 0 tokens of
    that tier (0 cached at all where the server reported no tiers). Pure."""
    have = set(tiers)
    out: list[UnexercisedPhase] = []
    for wl, w in workloads.items():
        kind = kinds().get((workload_kinds or {}).get(wl, wl))
        if kind is None or kind.hit_tier is None:
            continue
        for phase, p in w["phases"].items():
            tier = kind.hit_tier(phase)
            h = p["hits"]
            if tier is None or tier not in have or not p.get("n") or not h.get("prompt_tokens"):
                continue
            reported = bool(h.get("tiers_reported"))
            got = h.get(_TIER_TOKENS[tier]) if reported else h.get("cached_tokens")
            if got:
                continue
            # (a figure listed only where its ``when`` holds, a roofline's, is absent here: no hits)
            figures = tuple(d.name for d in kind.derived if phase in d.needs and not d.counts_hits and d.when is None)
            out.append(
                UnexercisedPhase(
                    wl,
                    phase,
                    tier,
                    int(h.get("prompt_tokens") or 0),
                    int(h.get("cached_tokens") or 0),
                    int(h.get(_TIER_TOKENS[tier]) or 0) if reported else None,
                    figures,
                )
            )
    return out


def summarize(
    records: Iterable[RequestRecord],
    workload_kinds: Mapping[str, str] | None = None,
    workload_configs: Mapping[str, Any] | None = None,
    tiers: Iterable[str] | None = None,
    platform: Platform | None = None,
    pools: TierPools | None = None,
) -> dict[str, Any]:
    """Per workload and phase statistics of one variant's records (all repeats pooled), and the
    derived figures pooled and per repeat. ``workload_kinds``: {workload name: kind} (default:
    each workload is named after its kind); ``workload_configs``: {workload name: its config},
    for the kinds that declare ``phase_figures``; ``tiers``: the variant's cache tiers
    (`Variant.cache_tiers`), to list its unexercised cache phases (None: not judged);
    ``platform``: KV bytes per token and bandwidths (`harness.measures.roofline.platform_for`), to give
    each phase with host or storage hits its roofline (None: no rooflines); ``pools``: the pools
    the server reported (`harness.measures.tier_model.pools_for`), to predict each phase's tier hits from
    the run's own sends and name the shortfalls (None: not predicted)."""
    records = list(records)
    roof = Roofline(platform, cold_prefill_rate(records)) if platform is not None else None
    repeats = sorted({r.repeat for r in records})
    by_wl: dict[str, list[RequestRecord]] = {}
    for r in records:
        by_wl.setdefault(r.workload, []).append(r)
    workloads: dict[str, Any] = {}
    for wl, recs in by_wl.items():
        kind = (workload_kinds or {}).get(wl, wl)
        declared = kinds().get(kind)
        filler = declared.filler_phases if declared is not None else frozenset()
        config = (workload_configs or {}).get(wl)
        ph = _phase_summaries(wl, recs, filler, _figures(kind, config), roof)
        figures, stats_ = by_repeat(kind, recs, repeats, filler, config, roof)
        workloads[wl] = {
            "phases": ph,
            "derived": derived(kind, ph),
            "derived_by_repeat": figures,
            "history_stats_by_repeat": stats_,
        }
    measured = [r for r in records if not r.warmup]
    errors = Counter(r.error for r in measured if r.error is not None)
    out = {
        "summary_version": SUMMARY_VERSION,
        "n_requests": len(measured),
        "n_errors": sum(errors.values()),
        "errors": dict(errors),
        "repeats": repeats,
        "workloads": workloads,
    }
    if tiers is not None:
        out["unexercised"] = [u.to_json() for u in unexercised_phases(workloads, workload_kinds, tiers)]
    if pools is not None:
        out["tier_prediction"] = tier_prediction(records, pools, workload_kinds, workload_configs, tiers)
    return out


def add_sample_figures(
    summary: dict[str, Any],
    samples: Iterable[Mapping[str, Any]],
    workload_kinds: Mapping[str, str] | None,
    workload_configs: Mapping[str, Any] | None,
) -> None:
    """Each workload whose kind declares ``sample_figures`` gets what it derives from the
    variant's samples (in time order) under ``from_samples`` (a workload without records still
    gets its entry: a soak that sent nothing is judged on its samples too)."""
    workloads = summary.get("workloads")
    if workloads is None:
        return
    kept: list[Mapping[str, Any]] | None = None  # read once, and only when a kind needs them
    for wl, cfg in (workload_configs or {}).items():
        declared = kinds().get((workload_kinds or {}).get(wl, wl))
        if declared is None or declared.sample_figures is None or cfg is None:
            continue
        kept = list(samples) if kept is None else kept
        entry = workloads.setdefault(wl, {"phases": {}, "derived": {}})
        entry["from_samples"] = dict(declared.sample_figures(cfg, kept))


def tier_prediction(
    records: Sequence[RequestRecord],
    pools: TierPools,
    workload_kinds: Mapping[str, str] | None,
    workload_configs: Mapping[str, WorkloadConfig] | None,
    tiers: Iterable[str] | None,
) -> dict[str, Any]:
    """Predicted vs achieved tier hits of every phase (`harness.measures.tier_model`), and the shortfalls of
    the phases that exist to hit a tier the variant has."""
    configs = workload_configs or {}
    flush = [wl for wl, cfg in configs.items() if cfg.flush_before]
    # a workload that restarts the server (its config's ``restarts_before``: phase -> came back changed)
    restarts = {(wl, phase): changed for wl, cfg in configs.items() for phase, changed in cfg.restarts_before().items()}
    preds = phase_predictions(records, pools, flush, restarts)
    have = set(tiers or ("device",))
    hit_phase = {}
    for wl, phase in preds:
        kind = kinds().get((workload_kinds or {}).get(wl, wl))
        tier = kind.hit_tier(phase) if kind is not None and kind.hit_tier is not None else None
        hit_phase[(wl, phase)] = tier is not None and tier in have
    phases: dict[str, dict[str, Any]] = {}
    for (wl, phase), pp in preds.items():
        phases.setdefault(wl, {})[phase] = pp.to_json()
    return {
        "pools": pools.to_json(),
        "phases": phases,
        "shortfalls": [s.to_json() for s in shortfalls(preds, pools, hit_phase)],
    }


def unexercised_figures(summary: Summary | None) -> dict[tuple[str, str], str]:
    """{(workload, derived figure): why it measured recompute} of a stored summary's unexercised
    phases (what checks, gates and the report mark)."""
    out: dict[tuple[str, str], str] = {}
    for u in summary.unexercised if summary is not None else ():
        for f in u.get("figures") or []:
            out.setdefault((str(u.get("workload")), str(f)), str(u.get("text") or ""))
    return out


def failed(cause: str | None, detail: Any = None) -> dict[str, Any]:
    """A variant that produced no usable rows: null metrics and the cause, never zeros."""
    return {
        "summary_version": SUMMARY_VERSION,
        "n_requests": 0,
        "n_errors": 0,
        "errors": {},
        "repeats": [],
        "workloads": None,
        "cause": cause,
        "cause_detail": detail,
    }


def summary_rows(variant: str, summary: Summary) -> list[dict[str, Any]]:
    """Flat rows (variant × workload × phase × metric, plus derived with phase "*") for a CSV."""
    rows: list[dict[str, Any]] = []
    for wl, w in summary.measured.items():
        for phase, p in w.phases.items():
            for metric, s in p.metrics.items():
                meta = M.METRICS[metric]
                row = {
                    "variant": variant,
                    "workload": wl,
                    "phase": phase,
                    "metric": metric,
                    "unit": meta.unit,
                    "higher_is_better": meta.higher_is_better,
                    "n_errors": p.n_errors,
                }
                row.update({k: s[k] if s is not None else None for k in STAT_KEYS})
                rows.append(row)
        figures = derived_figures()
        for name, v in w.derived.items():
            meta = figures[name]
            rows.append(
                {
                    "variant": variant,
                    "workload": wl,
                    "phase": "*",
                    "metric": name,
                    "unit": meta.unit,
                    "higher_is_better": meta.higher_is_better,
                    "n_errors": None,
                    **{k: None for k in STAT_KEYS},
                    "mean": v,
                    "p50": v,
                }
            )
    return rows

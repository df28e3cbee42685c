"""Records → per workload/phase statistics and the derived ratios the table reports. Pure.

`summarize(records)` returns (JSON-ready; every statistic null when there is nothing to measure,
never 0):

    {"n_requests", "n_errors", "errors": {error: count}, "repeats": [..],
     "workloads": {<workload>: {
         "phases": {<phase>: {
             "n", "n_errors", "errors": {error: count}, "n_warmup", "filler": bool,
             "metrics": {<metric>: {"n", "mean", "p50", "p90", "p99", "min", "max"} | null},
             "hits": {"prompt_tokens", "cached_tokens", "device_tokens", "host_tokens",
                      "storage_tokens", "requests_with_host_hit", "requests_with_device_hit",
                      "tiers_reported"}}},
         "derived": {<name>: float | null}}}}

Warm-up requests are left out (counted in `n_warmup`); errored requests are left out of the
metrics and counted in `n_errors`/`errors`. `itl_ms` pools every chunk gap of the phase (like
bench_serving); `pass_wall_s` is over the phase's concurrency groups without errors.
Filler phases (repeat_prefill's "evict") are flagged and never used in a derived ratio.

Derived (keyed by what phases a workload has, so a renamed workload still gets them):
  second_pass_speedup  pass1 / pass2 median pass wall            (parallel_prefixes)
  device_speedup       cold / repeat_device median TTFT           (repeat_prefill)
  host_speedup         cold / repeat_after_evict median TTFT      (repeat_prefill)
  interference         during_long / alone median TTFT            (short_ttft)
  prefill_tok_s        median prefill_tok_s of "cold"             (cold_prefill, repeat_prefill)
  prefill_total_tok_s  median prefill_total_tok_s of "cold"
  decode_tok_s, tpot_ms  medians of "decode"                      (decode)
  later_turns_cached_fraction  mean cached fraction of turns ≥ 2  (multi_turn)

Server-counter deltas per phase come from `harness.sampling.summarize_samples` (the sampler's
samples carry the same phase labels, `workloads.base.phase_label`), not from here.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Iterable, Sequence

import numpy as np

from harness import metrics as M
from harness.records import RequestRecord

SUMMARY_VERSION = 1
FILLER_PHASES = frozenset({"evict"})
STAT_KEYS = ("n", "mean", "p50", "p90", "p99", "min", "max")


def stats(values: Iterable[float | None]) -> dict[str, float | int] | None:
    """n, mean, p50, p90, p99, min, max of the finite values; None if there are none."""
    a = np.asarray([v for v in values if v is not None], dtype=float)
    a = a[np.isfinite(a)]
    if a.size == 0:
        return None
    p50, p90, p99 = np.percentile(a, [50, 90, 99])
    return {"n": int(a.size), "mean": float(a.mean()), "p50": float(p50), "p90": float(p90),
            "p99": float(p99), "min": float(a.min()), "max": float(a.max())}


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


def _phase_summary(workload: str, phase: str, rs: list[RequestRecord],
                   walls: list[M.GroupWall]) -> dict[str, Any]:
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
        w.wall_s for w in walls if w.workload == workload and w.phase == phase and w.n_errors == 0)
    return {"n": len(ok), "n_errors": sum(errors.values()), "errors": dict(errors),
            "n_warmup": len(rs) - len(measured), "filler": phase in FILLER_PHASES,
            "metrics": metrics, "hits": _hits(ok)}


def _p50(phases: dict[str, Any], phase: str, metric: str) -> float | None:
    s = phases[phase]["metrics"].get(metric) if phase in phases else None
    return s["p50"] if s else None


def _ratio(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or b <= 0:
        return None
    return a / b


def derived(phases: dict[str, Any]) -> dict[str, float | None]:
    """The table's ratios from one workload's phase summaries (only those its phases allow)."""
    out: dict[str, float | None] = {}
    if "pass1" in phases and "pass2" in phases:
        out["second_pass_speedup"] = _ratio(_p50(phases, "pass1", "pass_wall_s"),
                                            _p50(phases, "pass2", "pass_wall_s"))
    if "cold" in phases:
        out["prefill_tok_s"] = _p50(phases, "cold", "prefill_tok_s")
        out["prefill_total_tok_s"] = _p50(phases, "cold", "prefill_total_tok_s")
        cold = _p50(phases, "cold", "ttft_ms")
        if "repeat_device" in phases:
            out["device_speedup"] = _ratio(cold, _p50(phases, "repeat_device", "ttft_ms"))
        if "repeat_after_evict" in phases:
            out["host_speedup"] = _ratio(cold, _p50(phases, "repeat_after_evict", "ttft_ms"))
    if "alone" in phases and "during_long" in phases:
        out["interference"] = _ratio(_p50(phases, "during_long", "ttft_ms"),
                                     _p50(phases, "alone", "ttft_ms"))
    if "decode" in phases:
        out["decode_tok_s"] = _p50(phases, "decode", "decode_tok_s")
        out["tpot_ms"] = _p50(phases, "decode", "tpot_ms")
    later = [p for p in phases if p.startswith("turn") and p[4:].isdigit() and int(p[4:]) >= 2]
    if later:
        means = [phases[p]["metrics"]["cached_fraction"] for p in later]
        vals = [m["mean"] for m in means if m]
        out["later_turns_cached_fraction"] = float(np.mean(vals)) if vals else None
    return out


def summarize(records: Iterable[RequestRecord]) -> dict[str, Any]:
    """Per workload and phase statistics of one variant's records (all repeats pooled)."""
    records = list(records)
    walls = M.group_walls(records)
    by_wl: dict[str, dict[str, list[RequestRecord]]] = {}
    for r in records:
        by_wl.setdefault(r.workload, {}).setdefault(r.phase, []).append(r)
    workloads: dict[str, Any] = {}
    for wl, phases in by_wl.items():
        ph = {p: _phase_summary(wl, p, rs, walls) for p, rs in phases.items()}
        workloads[wl] = {"phases": ph, "derived": derived(ph)}
    measured = [r for r in records if not r.warmup]
    errors = Counter(r.error for r in measured if r.error is not None)
    return {"summary_version": SUMMARY_VERSION, "n_requests": len(measured),
            "n_errors": sum(errors.values()), "errors": dict(errors),
            "repeats": sorted({r.repeat for r in records}), "workloads": workloads}


def failed(cause: str | None, detail: Any = None) -> dict[str, Any]:
    """A variant that produced no usable rows: null metrics and the cause, never zeros."""
    return {"summary_version": SUMMARY_VERSION, "n_requests": 0, "n_errors": 0, "errors": {},
            "repeats": [], "workloads": None, "cause": cause, "cause_detail": detail}


def summary_rows(variant: str, summary: dict[str, Any]) -> list[dict[str, Any]]:
    """Flat rows (variant × workload × phase × metric, plus derived with phase "*") for a CSV."""
    rows: list[dict[str, Any]] = []
    for wl, w in (summary.get("workloads") or {}).items():
        for phase, p in w["phases"].items():
            for metric, s in p["metrics"].items():
                meta = M.METRICS[metric]
                row = {"variant": variant, "workload": wl, "phase": phase, "metric": metric,
                       "unit": meta.unit, "higher_is_better": meta.higher_is_better,
                       "n_errors": p["n_errors"]}
                row.update({k: (s or {}).get(k) for k in STAT_KEYS})
                rows.append(row)
        for name, v in w["derived"].items():
            meta = M.metric_info(name)
            rows.append({"variant": variant, "workload": wl, "phase": "*", "metric": name,
                         "unit": meta.unit, "higher_is_better": meta.higher_is_better,
                         "n_errors": None, **{k: None for k in STAT_KEYS}, "mean": v, "p50": v})
    return rows

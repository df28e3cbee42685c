"""The series the report's figures draw: sampler time series, TTFT distributions, pass wall
times and tier hits (plain arrays and lists; no drawing).

One job: selecting and shaping series from a `RunView`. Which workloads' phases are pass walls
or tier-hit bars is each workload kind's declaration (`WorkloadKind.pass_walls`,
`WorkloadKind.tier_hit_phases`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from harness.report.formatting import KIB_PER_GIB
from harness.report.memory_table import gpu_selection_words, gpus_sampled
from harness.report.tables import sampling_phases
from harness.report.view import RunView
from harness.store.summary import Summary, WorkloadSummary
from harness.workloads.kind import PhaseStat

TIMESERIES_MAX_POINTS = 1500


def _segments(phase: pd.Series, t: np.ndarray) -> list[tuple[float, float, str]]:
    """Consecutive runs of one phase label → (t0, t1, label); each ends where the next starts."""
    if len(phase) == 0:
        return []
    p = phase.fillna("").to_numpy()
    starts = np.flatnonzero(np.r_[True, p[1:] != p[:-1]])
    out = []
    for i, s in enumerate(starts):
        e = starts[i + 1] if i + 1 < len(starts) else len(p) - 1
        out.append((float(t[s]), float(t[e]), str(p[s])))
    return out


def downsample(df: pd.DataFrame, max_points: int = TIMESERIES_MAX_POINTS) -> pd.DataFrame:
    """At most ``max_points`` rows, evenly spaced (plots need shape, not every tick)."""
    if len(df) <= max_points:
        return df
    idx = np.unique(np.linspace(0, len(df) - 1, max_points).round().astype(int))
    return df.iloc[idx]


def gpu_label(view: RunView, name: str) -> tuple[str, str]:
    """(legend label, how chosen) of a variant's GPU-memory series: the sum over the GPUs its
    sampler read (phase summaries' ``gpus_sampled``: the variant's own GPUs, not the host's)."""
    phases = sampling_phases(view, name)
    gpus = gpus_sampled(phases)
    if not gpus:
        return "GPU memory used (GPUs sampled not recorded)", gpu_selection_words(phases)
    which = f"GPU {gpus[0]}" if len(gpus) == 1 else "sum of GPUs " + ", ".join(gpus)
    return f"GPU memory used ({which})", gpu_selection_words(phases)


def timeseries(view: RunView, name: str) -> dict[str, Any] | None:
    """Downsampled series of one variant: t (s), memory (GiB), swap (KB/s), GPU (GiB, labelled
    with the GPUs sampled), phases."""
    df = view.samples.get(name)
    if df is None or df.empty:
        return None
    t_full = df["t_s"].to_numpy(dtype=float)
    phases = _segments(df["phase"], t_full)
    d = downsample(df)
    col = lambda c, scale=1.0: d[c].to_numpy(dtype=float) / scale
    gpu_name, gpu_how = gpu_label(view, name)
    return {
        "t": d["t_s"].to_numpy(dtype=float),
        "phases": phases,
        "memory": {
            "MemAvailable": col("mem_available_kib", KIB_PER_GIB),
            "Cached": col("cached_kib", KIB_PER_GIB),
            "Mlocked": col("mlocked_kib", KIB_PER_GIB),
            "server RSS": col("server_rss_kib", KIB_PER_GIB),
        },
        "swap": {"swap-in (pswpin)": col("pswpin_kib_s"), "swap-out (pswpout)": col("pswpout_kib_s")},
        "gpu": {gpu_name: col("gpu_mem_used_mib", 1024.0)},
        "gpu_label": gpu_name,
        "gpu_how": gpu_how,
        "has_gpu": bool(np.isfinite(d["gpu_mem_used_mib"].to_numpy(dtype=float)).any()),
        "n_samples": len(df),
    }


def ttft_groups(view: RunView) -> dict[str, list[tuple[str, dict[str, np.ndarray]]]]:
    """{workload: [(phase, {variant: TTFT ms values})]} of measured, error-free requests."""
    out: dict[str, dict[str, dict[str, np.ndarray]]] = {}
    for n, df in view.requests.items():
        if df.empty:
            continue
        ok = df[(df["warmup"] != True) & df["error"].isna()]
        for (wl, ph), g in ok.groupby(["workload", "phase"], sort=False):
            out.setdefault(wl, {}).setdefault(ph, {})[n] = g["ttft_ms"].to_numpy(dtype=float)
    return {wl: list(phs.items()) for wl, phs in out.items()}


def _workloads(summary: Summary | None) -> Mapping[str, WorkloadSummary]:
    return summary.measured if summary is not None else {}


def pass_walls(view: RunView) -> tuple[list[str], dict[str, list[float | None]]]:
    """Phases of the workloads whose kind declares ``pass_walls`` × variant: median pass wall
    seconds. Labels are ``<workload>/<phase>``; only variants that ran ok have values."""
    keys: list[tuple[str, str]] = []
    for n in view.names:
        for wl, w in _workloads(view.summary(n)).items():
            kind = view.kind(wl)
            if kind is None or not kind.pass_walls:
                continue
            for ph in w.phases:
                if (wl, ph) not in keys:
                    keys.append((wl, ph))
    vals: dict[str, list[float | None]] = {}
    for n in view.names:
        if not view.ok(n):
            continue
        wls = _workloads(view.summary(n))
        vals[n] = [PhaseStat(ph, "pass_wall_s").stored(wls[wl].phases) if wl in wls else None for wl, ph in keys]
    return [f"{wl}/{ph}" for wl, ph in keys], vals


def tier_hits(view: RunView, name: str) -> dict[str, list]:
    """Per phase of the workloads whose kind declares ``tier_hit_phases`` (phases that reuse
    prompts): device / host / computed prompt tokens."""
    labels, dev, host, miss = [], [], [], []
    for wl, w in _workloads(view.summary(name)).items():
        kind = view.kind(wl)
        if kind is None or not kind.tier_hit_phases:
            continue
        for ph, p in w.phases.items():
            h = p.hits
            if not h.get("prompt_tokens"):
                continue
            labels.append(f"{wl}/{ph}")
            dev.append(h.get("device_tokens") or 0)
            host.append(h.get("host_tokens") or 0)
            miss.append(max(0, (h.get("prompt_tokens") or 0) - (h.get("cached_tokens") or 0)))
    return {"labels": labels, "device": dev, "host": host, "miss": miss}

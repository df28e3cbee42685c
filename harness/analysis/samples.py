"""Pure: a variant's samples (samples.jsonl) summarised per phase — memory, swap, RSS and GPU
ranges, counter increases, the storage tier's I/O (`summarize_samples`, `storage_io`)."""

from __future__ import annotations

import math
from typing import Iterable, Mapping

from harness.server.metrics_page import is_counter_key


def _index_order(idx: str) -> tuple[int, str]:
    return (int(idx), idx) if idx.isdigit() else (1 << 30, idx)


def _round(x: float | None, nd: int = 2) -> float | None:
    return None if x is None else round(x, nd)


# ----------------------------------------------------------------------------- summaries


def _segments(samples: list[Mapping]) -> list[tuple[str, int, int]]:
    """Runs of consecutive samples with the same phase: (phase, first index, last index)."""
    segs: list[tuple[str, int, int]] = []
    for i, s in enumerate(samples):
        ph = s.get("phase")
        if segs and segs[-1][0] == ph:
            segs[-1] = (ph, segs[-1][1], i)
        else:
            segs.append((ph, i, i))
    return segs


def _counter_increase(readings: list[Mapping[str, float]]) -> dict[str, float]:
    """Increase of each counter over consecutive scrapes. A counter absent from a scrape is 0
    (labelled counters appear on first increment); a drop means the server restarted and the
    counter counts from zero again, as in Prometheus' increase()."""
    keys = {k for r in readings for k in r if is_counter_key(k)}
    out: dict[str, float] = {}
    for k in keys:
        total = 0.0
        for a_map, b_map in zip(readings, readings[1:]):
            a, b = a_map.get(k, 0.0), b_map.get(k, 0.0)
            total += b - a if b >= a else b
        out[k] = total
    return out


def _min(values: Iterable[float | None]) -> float | None:
    vs = [v for v in values if v is not None]
    return min(vs) if vs else None


def _max(values: Iterable[float | None]) -> float | None:
    vs = [v for v in values if v is not None]
    return max(vs) if vs else None


def _mean(values: Iterable[float | None]) -> float | None:
    vs = [v for v in values if v is not None]
    return sum(vs) / len(vs) if vs else None


# sglang's storage tier (L3) series (StorageMetricsCollector, labels storage_backend/tp_rank/dp_rank)
STORAGE_COUNTERS = {
    "prefetched_tokens": "sglang:prefetched_tokens_total",  # storage -> host
    "backuped_tokens": "sglang:backuped_tokens_total",  # host -> storage
}
STORAGE_BANDWIDTH_HISTOGRAMS = {"prefetch": "sglang:prefetch_bandwidth", "backup": "sglang:backup_bandwidth"}  # GB/s


def storage_io(counter_deltas: Mapping[str, float]) -> dict[str, float | None] | None:
    """A phase's storage-tier figures from its counter deltas (pure), None when the server
    exported no storage series: prefetched/backuped tokens, ``cached_storage_tokens``
    (``cached_tokens_total`` with a ``cache_source`` starting "storage"), and the mean GB/s of
    sglang's per-operation bandwidth histograms (``prefetch_gbs``, ``backup_gbs``: sum ÷ count)
    with their operation counts. Summed over label sets (ranks)."""
    sums: dict[str, float] = {}
    seen = False
    for key, v in counter_deltas.items():
        name = key.split("{", 1)[0]
        for field, series in STORAGE_COUNTERS.items():
            if name == series:
                sums[field] = sums.get(field, 0.0) + v
                seen = True
        for op, series in STORAGE_BANDWIDTH_HISTOGRAMS.items():
            for part in ("_sum", "_count"):
                if name == series + part:
                    sums[op + part] = sums.get(op + part, 0.0) + v
                    seen = True
        if name == "sglang:cached_tokens_total" and 'cache_source="storage' in key:
            sums["cached_storage_tokens"] = sums.get("cached_storage_tokens", 0.0) + v
            seen = True
    if not seen:
        return None
    out: dict[str, float | None] = {
        "prefetched_tokens": sums.get("prefetched_tokens", 0.0),
        "backuped_tokens": sums.get("backuped_tokens", 0.0),
        "cached_storage_tokens": sums.get("cached_storage_tokens", 0.0),
    }
    for op in STORAGE_BANDWIDTH_HISTOGRAMS:
        n = sums.get(op + "_count", 0.0)
        out[op + "_ops"] = n
        out[op + "_gbs"] = sums.get(op + "_sum", 0.0) / n if n > 0 else None
    return out


SIMULATED_ENERGY = "sglang:simulated_energy_joules_total"  # the simulator's pretend GPU (harness/sim/metrics.py)


def _gpu_energy_mj(sample: Mapping) -> dict[str, float]:
    return {
        str(g.get("index")): float(g["energy_mj"])
        for g in sample.get("gpus") or []
        if isinstance(g.get("energy_mj"), (int, float))
    }


def nvml_energy_j(samples: list[Mapping], i0: int, i1: int) -> float | None:
    """Joules the sampled GPUs used over samples ``i0..i1`` (from the last reading before ``i0``,
    else ``i0`` itself, to ``i1``): NVML's total energy counter's increase summed over the GPUs
    read at both ends (a counter that went back — a driver reload — counts nothing). None when no
    GPU reported the counter at both ends."""
    start: dict[str, float] = {}
    for j in range(i0 - 1, -1, -1):
        start = _gpu_energy_mj(samples[j])
        if start:
            break
    if not start:
        start = _gpu_energy_mj(samples[i0])
    end: dict[str, float] = {}
    for j in range(i1, i0 - 1, -1):
        end = _gpu_energy_mj(samples[j])
        if end:
            break
    both = set(start) & set(end)
    if not both:
        return None
    return sum(max(0.0, end[k] - start[k]) for k in both) / 1000.0


def phase_energy(nvml_j: float | None, deltas: Mapping[str, float]) -> tuple[float | None, str | None]:
    """(joules, source) of a phase: NVML's where the GPUs reported it ("nvml"), else the
    simulator's counter ("simulated"), else (None, None)."""
    if nvml_j is not None:
        return nvml_j, "nvml"
    sim = [v for k, v in deltas.items() if k.split("{", 1)[0] == SIMULATED_ENERGY]
    if sim:
        return sum(sim), "simulated"
    return None, None


def summarize_samples(samples: Iterable[Mapping]) -> dict[str, dict]:
    """Samples (in time order) → {phase: summary}, phases in order of first appearance.

    Per phase: n_samples, duration_s, min_mem_available_kib, min_mem_free_kib, min_cached_kib,
    min_swap_free_kib, max_mlocked_kib, mean/max_pswpin_kib_s, mean/max_pswpout_kib_s,
    max_pgmajfault_s, max_server_rss_kib, max_storage_dir_kib, peak_gpu_mem_used_mib ({gpu index (str): MiB}),
    max_gpu_util_pct ({index: %}), peak_server_gpu_mem_mib ({index: MiB} of the server's own
    processes, where NVML listed them), gpus_sampled (the GPU indices the phase's samples read,
    as strings), gpu_selection (the last ``gpu_selection`` record in effect during the phase, or
    None), counter_deltas ({series: increase}), gauges_max, storage (`storage_io` of the
    deltas: the storage tier's tokens and GB/s, None without storage series), and energy_j with
    energy_source (`phase_energy`: NVML's energy counter, "nvml", else the simulator's, "simulated").

    A phase may occur in several runs (e.g. idle again later); its figures cover all of them.
    Counter deltas of a run start at the last sample before it (the previous phase's last
    sample) when there is one, else at the run's first sample; a counter absent from a scrape
    is 0 (sglang creates labelled counters on first increment). Samples without counters
    (scrape failed or disabled) are ignored for deltas. duration_s spans the same start to the
    run's last sample.
    """
    samples = list(samples)
    segs = _segments(samples)
    out: dict[str, dict] = {}
    per_phase: dict[str, list[Mapping]] = {}
    deltas: dict[str, dict[str, float]] = {}
    durations: dict[str, float] = {}
    nvml_j: dict[str, float | None] = {}
    for ph, i0, i1 in segs:
        seg = samples[i0 : i1 + 1]
        e = nvml_energy_j(samples, i0, i1)
        if e is not None:
            nvml_j[ph] = (nvml_j.get(ph) or 0.0) + e
        else:
            nvml_j.setdefault(ph, None)
        per_phase.setdefault(ph, []).extend(seg)
        start_t = samples[i0 - 1]["t_ns"] if i0 > 0 else seg[0]["t_ns"]
        durations[ph] = durations.get(ph, 0.0) + (seg[-1]["t_ns"] - start_t) / 1e9
        # counters: last scraped sample before the run (or the run's first), to the run's last
        start_c = None
        for j in range(i0 - 1, -1, -1):
            if samples[j].get("counters") is not None:
                start_c = samples[j]["counters"]
                break
        with_c = [s["counters"] for s in seg if s.get("counters") is not None]
        acc = deltas.setdefault(ph, {})
        if with_c:
            readings = ([start_c] if start_c is not None else []) + with_c
            for k, v in _counter_increase(readings).items():
                acc[k] = acc.get(k, 0.0) + v

    selection_of: dict[str, dict | None] = {}
    in_effect: dict | None = None
    for s in samples:  # a selection record holds from its sample on
        in_effect = s.get("gpu_selection") or in_effect
        selection_of[s.get("phase")] = in_effect

    for ph, ss in per_phase.items():
        gpu_peak: dict[str, float] = {}
        gpu_util: dict[str, float] = {}
        own_peak: dict[str, float] = {}
        for s in ss:
            for g in s.get("gpus") or []:
                idx = str(g.get("index"))
                used = g.get("mem_used_mib")
                if used is not None and used > gpu_peak.get(idx, -math.inf):
                    gpu_peak[idx] = used
                util = g.get("util_pct")
                if util is not None and util > gpu_util.get(idx, -math.inf):
                    gpu_util[idx] = util
                own = g.get("server_mem_mib")
                if own is not None and own > own_peak.get(idx, -math.inf):
                    own_peak[idx] = own
        sampled = sorted({str(g.get("index")) for s in ss for g in s.get("gpus") or []}, key=_index_order)
        gauges: dict[str, float] = {}
        for s in ss:
            for k, v in (s.get("counters") or {}).items():
                if not is_counter_key(k) and (k not in gauges or v > gauges[k]):
                    gauges[k] = v
        out[ph] = {
            "n_samples": len(ss),
            "duration_s": round(durations[ph], 3),
            "min_mem_available_kib": _min(s.get("mem_available_kib") for s in ss),
            "min_mem_free_kib": _min(s.get("mem_free_kib") for s in ss),
            "min_cached_kib": _min(s.get("cached_kib") for s in ss),
            "min_swap_free_kib": _min(s.get("swap_free_kib") for s in ss),
            "max_mlocked_kib": _max(s.get("mlocked_kib") for s in ss),
            "mean_pswpin_kib_s": _mean(s.get("pswpin_kib_s") for s in ss),
            "max_pswpin_kib_s": _max(s.get("pswpin_kib_s") for s in ss),
            "mean_pswpout_kib_s": _mean(s.get("pswpout_kib_s") for s in ss),
            "max_pswpout_kib_s": _max(s.get("pswpout_kib_s") for s in ss),
            "max_pgmajfault_s": _max(s.get("pgmajfault_s") for s in ss),
            "max_server_rss_kib": _max(s.get("server_rss_kib") for s in ss),
            "max_storage_dir_kib": _max(s.get("storage_dir_kib") for s in ss),
            "peak_gpu_mem_used_mib": gpu_peak,
            "max_gpu_util_pct": gpu_util,
            "peak_server_gpu_mem_mib": own_peak,
            "gpus_sampled": sampled,
            "gpu_selection": selection_of.get(ph),
            "counter_deltas": dict(sorted(deltas.get(ph, {}).items())),
            "gauges_max": dict(sorted(gauges.items())),
            "storage": storage_io(deltas.get(ph, {})),
        }
        out[ph]["energy_j"], out[ph]["energy_source"] = phase_energy(nvml_j.get(ph), deltas.get(ph, {}))
    return out

"""A run's raw rows as pandas DataFrames: one row per request, per concurrency group, per sampler tick.

One job: requests.jsonl / samples.jsonl → tables, fast enough for a million rows. Lines are
parsed one at a time and only scalars are kept (no per-row Python objects are held), so memory
is the size of the columns, not of the JSON. The metric columns are the formulas of
`harness.metrics` applied to whole columns (the same functions the summary applies to one
record); missing values are NaN (never 0).

`harness load RUN` (`harness.commands.load`) prints the head and shape of the request and sample tables.
"""

from __future__ import annotations

import math
from array import array
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from harness import metrics as M
from harness import results

REQUEST_LABELS = ["variant", "workload", "phase", "repeat", "index", "rid", "warmup",
                  "concurrency_group", "finish_reason", "error"]
REQUEST_COUNTS = ["prompt_len", "prompt_tokens", "completion_tokens", "cached_tokens",
                  "cached_device", "cached_host", "cached_storage"]
REQUEST_TIMES = ["sent_ns", "first_token_ns", "done_ns"]

SAMPLE_SCALARS = ["t_ns", "wall_time", "mem_available_kib", "mem_free_kib", "cached_kib",
                  "mlocked_kib", "shmem_kib", "swap_total_kib", "swap_free_kib", "pswpin_kib_s",
                  "pswpout_kib_s", "pgmajfault_s", "server_rss_kib"]
# Server counters kept as columns (summed over label sets); the rest stay in samples.jsonl.
SAMPLE_COUNTERS = {
    "load_back_bytes": "sglang:load_back_bytes_total",
    "load_back_tokens": "sglang:load_back_tokens_total",
    "load_back_seconds": "sglang:load_back_duration_seconds_sum",
}


def _nan(v: Any) -> float:
    return math.nan if v is None else float(v)


def _as_np(a: array) -> np.ndarray:
    return np.frombuffer(a, dtype=float) if len(a) else np.array([], float)


def requests_frame(path: Path, variant: str | None = None) -> pd.DataFrame:
    """One row per request of a requests.jsonl: labels, counts, raw times and the request
    metrics (NaN where a metric cannot be derived), plus `output_len` and `n_chunks`.
    ``variant`` fills the variant column for rows that lack it."""
    labels: dict[str, list] = {c: [] for c in REQUEST_LABELS}
    intern: dict[str, dict] = {c: {} for c in REQUEST_LABELS}
    numeric = REQUEST_COUNTS + REQUEST_TIMES
    nums: dict[str, array] = {c: array("d") for c in numeric}
    chunks: dict[str, array] = {c: array("d") for c in M.CHUNK_INPUTS}
    sizes: dict[str, array] = {c: array("d") for c in ("output_len", "n_chunks")}
    nan = math.nan
    for d in results.read_jsonl(path):
        get = d.get
        for c in REQUEST_LABELS:
            v = get(c)
            labels[c].append(intern[c].setdefault(v, v) if isinstance(v, str) and c != "rid" else v)
        for c in numeric:
            v = get(c)
            nums[c].append(nan if v is None else v)
        chunk_ns = get("chunk_ns") or ()
        for c, v in zip(M.CHUNK_INPUTS, M.chunk_stats(chunk_ns, get("chunk_new_tokens") or ())):
            chunks[c].append(v)
        sizes["output_len"].append(len(get("output_ids") or ()))
        sizes["n_chunks"].append(len(chunk_ns))
    columns = {c: _as_np(a) for c, a in {**nums, **chunks}.items()}
    df = pd.DataFrame({**labels, **{c: columns[c] for c in numeric}, **M.request_metrics(columns),
                       **{c: _as_np(a) for c, a in sizes.items()}})
    if variant is not None:
        df["variant"] = df["variant"].fillna(variant) if len(df) else variant
    return df


def groups_frame(requests: pd.DataFrame) -> pd.DataFrame:
    """One row per non-warm-up concurrency group and phase of a requests frame (a group whose
    requests span phases, like a long prefill and the short requests sent during it, gives one
    row per phase), in order of first appearance: variant, workload, phase, concurrency_group, n,
    n_errors, the `GROUP_INPUTS` of `harness.metrics` and the group metrics (pass_wall_s; NaN
    when no request of it finished)."""
    grouped = requests[(requests["warmup"] != True) & requests["concurrency_group"].notna()]
    keys = ["variant", "workload", "phase", "concurrency_group"]
    if grouped.empty:
        return pd.DataFrame(columns=[*keys, "n", "n_errors", *M.GROUP_INPUTS,
                                     *M.group_metrics({c: np.array([], float) for c in M.GROUP_INPUTS})])
    out = grouped.groupby(keys, sort=False).agg(
        n=("sent_ns", "size"), n_errors=("error", lambda s: int(s.notna().sum())),
        first_sent_ns=("sent_ns", "min"), last_done_ns=("done_ns", "max")).reset_index()
    for name, values in M.group_metrics({c: out[c].to_numpy(dtype=float) for c in M.GROUP_INPUTS}).items():
        out[name] = values
    return out


def samples_frame(path: Path, variant: str | None = None) -> pd.DataFrame:
    """One row per sampler tick: the scalar fields, `phase`, `gpu_mem_used_mib` (sum over GPUs,
    NaN when none were read), `t_s` (seconds since the variant's first sample) and the
    load-back counters of `SAMPLE_COUNTERS` (cumulative, summed over label sets; NaN when the
    scrape failed or the counter is absent)."""
    cols: dict[str, array] = {c: array("d") for c in SAMPLE_SCALARS}
    phase: list = []
    phases_seen: dict[str, str] = {}
    gpu = array("d")
    counters: dict[str, array] = {k: array("d") for k in SAMPLE_COUNTERS}
    for d in results.read_jsonl(path):
        for c in SAMPLE_SCALARS:
            cols[c].append(_nan(d.get(c)))
        ph = d.get("phase")
        phase.append(phases_seen.setdefault(ph, ph) if isinstance(ph, str) else ph)
        gs = [g.get("mem_used_mib") for g in d.get("gpus") or () if g.get("mem_used_mib") is not None]
        gpu.append(float(sum(gs)) if gs else math.nan)
        cs = d.get("counters")
        for col, prefix in SAMPLE_COUNTERS.items():
            if not cs:
                counters[col].append(math.nan)
                continue
            vals = [v for k, v in cs.items() if k == prefix or k.startswith(prefix + "{")]
            counters[col].append(float(sum(vals)) if vals else math.nan)
    df = pd.DataFrame({"variant": variant, "phase": phase, **{c: _as_np(a) for c, a in cols.items()},
                       "gpu_mem_used_mib": _as_np(gpu), **{c: _as_np(a) for c, a in counters.items()}})
    t = df["t_ns"].to_numpy(dtype=float)
    df.insert(2, "t_s", (t - t[0]) / 1e9 if len(t) else t)
    return df


def load_frames(run_dir: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(requests_df, samples_df) of every variant of a run, concatenated in manifest order."""
    run = results.load_run(Path(run_dir))
    reqs, samples = [], []
    for v in run.variants:
        reqs.append(requests_frame(v.paths.requests, v.name))
        samples.append(samples_frame(v.paths.samples, v.name))
    req_df = pd.concat(reqs, ignore_index=True) if reqs else requests_frame(Path("/nonexistent"))
    smp_df = pd.concat(samples, ignore_index=True) if samples else samples_frame(Path("/nonexistent"))
    return req_df, smp_df

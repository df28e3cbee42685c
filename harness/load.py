"""A run's raw rows as pandas DataFrames: one row per request, one row per sampler tick.

One job: requests.jsonl / samples.jsonl → tables, fast enough for a million rows. Lines are
parsed one at a time and only scalars are kept (no per-row Python objects are held), so memory
is the size of the columns, not of the JSON. The request metrics use exactly the definitions of
`harness.metrics` (ttft_ms, e2e_ms, itl_ms, tpot_ms, prefill_tok_s, prefill_total_tok_s,
decode_tok_s, *_fraction); `tests/test_load.py` checks them against `metrics.records_frame`
on factory records. Missing values are NaN (never 0).

`harness load RUN` prints the head and shape of both tables.
"""

from __future__ import annotations

import math
from array import array
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from harness import results

REQUEST_LABELS = ["variant", "workload", "phase", "repeat", "index", "rid", "warmup",
                  "concurrency_group", "finish_reason", "error"]
REQUEST_COUNTS = ["prompt_len", "prompt_tokens", "completion_tokens", "cached_tokens",
                  "cached_device", "cached_host", "cached_storage"]
REQUEST_TIMES = ["sent_ns", "first_token_ns", "done_ns"]
REQUEST_METRIC_COLUMNS = ["ttft_ms", "itl_ms", "tpot_ms", "e2e_ms", "prefill_tok_s",
                          "prefill_total_tok_s", "decode_tok_s", "host_hit_fraction",
                          "device_hit_fraction", "cached_fraction"]

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


def _chunk_stats(chunk_ns: list[int], chunk_new: list[int]) -> tuple[float, float, float, float]:
    """(first token chunk ns, last token chunk ns, tokens after the first chunk, mean ITL ms)
    over token-bearing chunks, as `metrics._token_chunks` defines them; NaN where undefined."""
    first = last = math.nan
    after = 0
    itl_sum = 0.0
    itl_n = 0
    prev = None
    for t, n in zip(chunk_ns, chunk_new):
        if n <= 0:
            continue
        if prev is None:
            first = float(t)
        else:
            after += n
            itl_sum += (t - prev) / n / 1e6
            itl_n += 1
        prev = t
        last = float(t)
    if prev is None:
        return math.nan, math.nan, math.nan, math.nan
    return first, last, float(after) if itl_n else math.nan, itl_sum / itl_n if itl_n else math.nan


def requests_frame(path: Path, variant: str | None = None) -> pd.DataFrame:
    """One row per request of a requests.jsonl: labels, counts, raw times and the request
    metrics (NaN where a metric cannot be derived), plus `output_len` and `n_chunks`.
    ``variant`` fills the variant column for rows that lack it."""
    labels: dict[str, list] = {c: [] for c in REQUEST_LABELS}
    intern: dict[str, dict] = {c: {} for c in REQUEST_LABELS}
    numeric = REQUEST_COUNTS + REQUEST_TIMES
    nums: dict[str, array] = {c: array("d") for c in numeric}
    extra = {c: array("d") for c in ("_first_chunk", "_last_chunk", "_after", "itl_ms", "output_len", "n_chunks")}
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
        first, last, after, itl = _chunk_stats(chunk_ns, get("chunk_new_tokens") or ())
        extra["_first_chunk"].append(first)
        extra["_last_chunk"].append(last)
        extra["_after"].append(after)
        extra["itl_ms"].append(itl)
        extra["output_len"].append(len(get("output_ids") or ()))
        extra["n_chunks"].append(len(chunk_ns))
    df = pd.DataFrame({**labels, **{c: np.frombuffer(a, dtype=float) if len(a) else np.array([], float)
                                    for c, a in {**nums, **extra}.items()}})
    if variant is not None:
        df["variant"] = df["variant"].fillna(variant) if len(df) else variant
    return _derive_request_metrics(df)


def _derive_request_metrics(df: pd.DataFrame) -> pd.DataFrame:
    """Vectorised `harness.metrics` derivations on the scalar columns."""
    f = lambda c: df[c].to_numpy(dtype=float)  # noqa: E731
    sent, first_tok, done = f("sent_ns"), f("first_token_ns"), f("done_ns")
    with np.errstate(divide="ignore", invalid="ignore"):
        ttft = (first_tok - sent) / 1e6
        e2e = (done - sent) / 1e6
        n_prompt = np.where(np.isnan(f("prompt_tokens")), f("prompt_len"), f("prompt_tokens"))
        n_prompt = np.where(n_prompt > 0, n_prompt, np.nan)  # 0 prompt tokens: undefined
        cached = np.nan_to_num(f("cached_tokens"), nan=0.0)
        ok_t = ttft > 0
        prefill = np.where(ok_t, (n_prompt - cached) / (ttft / 1e3), np.nan)
        prefill_total = np.where(ok_t, n_prompt / (ttft / 1e3), np.nan)
        span = f("_last_chunk") - f("_first_chunk")
        after = f("_after")
        tpot = np.where(after > 0, span / after / 1e6, np.nan)
        decode = np.where(span > 0, after / (span / 1e9), np.nan)
        out = {
            "ttft_ms": ttft, "e2e_ms": e2e, "tpot_ms": tpot, "decode_tok_s": decode,
            "prefill_tok_s": prefill, "prefill_total_tok_s": prefill_total,
            "cached_fraction": f("cached_tokens") / n_prompt,
            "device_hit_fraction": f("cached_device") / n_prompt,
            "host_hit_fraction": f("cached_host") / n_prompt,
        }
    for k, v in out.items():
        df[k] = v
    df = df.drop(columns=["_first_chunk", "_last_chunk", "_after"])
    order = REQUEST_LABELS + REQUEST_COUNTS + REQUEST_TIMES + REQUEST_METRIC_COLUMNS + ["output_len", "n_chunks"]
    return df[order]


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
    as_np = lambda a: np.frombuffer(a, dtype=float) if len(a) else np.array([], float)  # noqa: E731
    df = pd.DataFrame({"variant": variant, "phase": phase, **{c: as_np(a) for c, a in cols.items()},
                       "gpu_mem_used_mib": as_np(gpu), **{c: as_np(a) for c, a in counters.items()}})
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


def cli_main(args) -> int:
    try:
        req, smp = load_frames(Path(args.run))
    except results.ResultsError as exc:
        print(f"harness load: {exc}", file=sys.stderr)
        return 2
    with pd.option_context("display.width", 200, "display.max_columns", 14):
        print(f"requests: {req.shape[0]} rows x {req.shape[1]} columns")
        print(req.head(10).to_string())
        print()
        print(f"samples: {smp.shape[0]} rows x {smp.shape[1]} columns")
        print(smp.head(10).to_string())
    print("\nIn Python: from harness.load import load_frames; requests_df, samples_df = load_frames(RUN)")
    return 0

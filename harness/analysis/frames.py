"""A run's raw rows as pandas DataFrames: one row per request, per concurrency group, per sampler tick.

One job: requests.jsonl / samples.jsonl → tables, fast enough for a million rows. Lines are
parsed one at a time and only scalars are kept (no per-row Python objects are held), so memory
is the size of the columns, not of the JSON. The metric columns are the formulas of
`harness.measures.metrics` applied to whole columns (the same functions the summary applies to one
record); missing values are NaN (never 0).

Columnar copy: parsing a JSONL of a million rows takes seconds, so the parsed input columns of a
file of at least `COLUMNS_MIN_BYTES` are kept beside it (`requests.jsonl.columns.npz`: numpy
arrays, no pickles) and read instead of the JSONL while they are current. The JSONL stays the
source of truth: the copy records the JSONL's size and mtime and the copy format, and is rebuilt
when it is missing, older, damaged or unwritable (read-only folders just parse every time). Only
inputs are stored: metric columns are always recomputed, so a fixed definition applies to old
runs. `write_columns(path)` builds the copy at once (e.g. when a variant's rows are complete).

`harness load RUN` (`harness.cli.load`) prints the head and shape of the request and sample tables.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
import zipfile
from array import array
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from harness.measures import metrics as M
from harness.store import results, run_folder

REQUEST_LABELS = [
    "variant",
    "workload",
    "phase",
    "repeat",
    "index",
    "rid",
    "warmup",
    "concurrency_group",
    "finish_reason",
    "error",
]
REQUEST_COUNTS = [
    "prompt_len",
    "prompt_tokens",
    "completion_tokens",
    "cached_tokens",
    "cached_device",
    "cached_host",
    "cached_storage",
]
REQUEST_TIMES = ["sent_ns", "first_token_ns", "done_ns"]

SAMPLE_SCALARS = [
    "t_ns",
    "wall_time",
    "mem_available_kib",
    "mem_free_kib",
    "cached_kib",
    "mlocked_kib",
    "shmem_kib",
    "swap_total_kib",
    "swap_free_kib",
    "pswpin_kib_s",
    "pswpout_kib_s",
    "pgmajfault_s",
    "server_rss_kib",
]
# Server counters kept as columns (summed over label sets); the rest stay in samples.jsonl.
SAMPLE_COUNTERS = {
    "load_back_bytes": "sglang:load_back_bytes_total",
    "load_back_tokens": "sglang:load_back_tokens_total",
    "load_back_seconds": "sglang:load_back_duration_seconds_sum",
}


COLUMNS_SUFFIX = ".columns.npz"
COLUMNS_FORMAT = 1  # bump when what is stored changes: older copies are then rebuilt
COLUMNS_MIN_BYTES = 4 << 20  # smaller files parse in well under a second: no copy beside them


def _nan(v: Any) -> float:
    return math.nan if v is None else float(v)


def _as_np(a: array) -> np.ndarray:
    return np.frombuffer(a, dtype=float) if len(a) else np.array([], float)


def _request_columns(path: Path) -> dict[str, Any]:
    """The input columns of a requests.jsonl: labels (lists), raw numbers, chunk reductions and
    sizes (float arrays), parsed one line at a time."""
    labels: dict[str, list] = {c: [] for c in REQUEST_LABELS}
    intern: dict[str, dict] = {c: {} for c in REQUEST_LABELS}
    numeric = REQUEST_COUNTS + REQUEST_TIMES
    nums: dict[str, array] = {c: array("d") for c in numeric}
    chunks: dict[str, array] = {c: array("d") for c in M.CHUNK_INPUTS}
    sizes: dict[str, array] = {c: array("d") for c in ("output_len", "n_chunks")}
    nan = math.nan
    label_lists = [(c, labels[c].append, intern[c].setdefault if c != "rid" else None) for c in REQUEST_LABELS]
    num_lists = [(c, nums[c].append) for c in numeric]
    chunk_appends = [chunks[c].append for c in M.CHUNK_INPUTS]
    chunk_stats = M.chunk_stats
    out_len, n_chunks = sizes["output_len"].append, sizes["n_chunks"].append
    for d in results.read_jsonl(path):
        get = d.get
        for c, append, setdefault in label_lists:
            v = get(c)
            append(setdefault(v, v) if setdefault is not None and v.__class__ is str else v)
        for c, append in num_lists:
            v = get(c)
            append(nan if v is None else v)
        chunk_ns = get("chunk_ns") or ()
        for append, v in zip(chunk_appends, chunk_stats(chunk_ns, get("chunk_new_tokens") or ())):
            append(v)
        out_len(len(get("output_ids") or ()))
        n_chunks(len(chunk_ns))
    return {**labels, **{c: _as_np(a) for c, a in {**nums, **chunks, **sizes}.items()}}


def requests_frame(path: Path, variant: str | None = None) -> pd.DataFrame:
    """One row per request of a requests.jsonl: labels, counts, raw times and the request
    metrics (NaN where a metric cannot be derived), plus `output_len` and `n_chunks`.
    ``variant`` fills the variant column for rows that lack it."""
    columns = _cached(Path(path), _request_columns, REQUEST_LABELS)
    numeric = REQUEST_COUNTS + REQUEST_TIMES
    df = pd.DataFrame(
        {
            **{c: columns[c] for c in REQUEST_LABELS},
            **{c: columns[c] for c in numeric},
            **M.request_metrics(columns),
            "output_len": columns["output_len"],
            "n_chunks": columns["n_chunks"],
        }
    )
    if variant is not None:
        df["variant"] = df["variant"].fillna(variant) if len(df) else variant
    return df


def groups_frame(requests: pd.DataFrame) -> pd.DataFrame:
    """One row per non-warm-up concurrency group and phase of a requests frame (a group whose
    requests span phases, like a long prefill and the short requests sent during it, gives one
    row per phase), in order of first appearance: variant, workload, phase, concurrency_group, n,
    n_errors, the `GROUP_INPUTS` of `harness.measures.metrics` and the group metrics (pass_wall_s; NaN
    when no request of it finished)."""
    grouped = requests[(requests["warmup"] != True) & requests["concurrency_group"].notna()]
    keys = ["variant", "workload", "phase", "concurrency_group"]
    if grouped.empty:
        return pd.DataFrame(
            columns=[
                *keys,
                "n",
                "n_errors",
                *M.GROUP_INPUTS,
                *M.group_metrics({c: np.array([], float) for c in M.GROUP_INPUTS}),
            ]
        )
    out = (
        grouped.groupby(keys, sort=False)
        .agg(
            n=("sent_ns", "size"),
            n_errors=("error", lambda s: int(s.notna().sum())),
            first_sent_ns=("sent_ns", "min"),
            last_done_ns=("done_ns", "max"),
        )
        .reset_index()
    )
    for name, values in M.group_metrics({c: out[c].to_numpy(dtype=float) for c in M.GROUP_INPUTS}).items():
        out[name] = values
    return out


def _sample_columns(path: Path) -> dict[str, Any]:
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
    return {
        "phase": phase,
        **{c: _as_np(a) for c, a in cols.items()},
        "gpu_mem_used_mib": _as_np(gpu),
        **{c: _as_np(a) for c, a in counters.items()},
    }


def samples_frame(path: Path, variant: str | None = None) -> pd.DataFrame:
    """One row per sampler tick: the scalar fields, `phase`, `gpu_mem_used_mib` (sum over GPUs,
    NaN when none were read), `t_s` (seconds since the variant's first sample) and the
    load-back counters of `SAMPLE_COUNTERS` (cumulative, summed over label sets; NaN when the
    scrape failed or the counter is absent)."""
    c = _cached(Path(path), _sample_columns, ["phase"])
    df = pd.DataFrame(
        {
            "variant": variant,
            "phase": c["phase"],
            **{k: c[k] for k in SAMPLE_SCALARS},
            "gpu_mem_used_mib": c["gpu_mem_used_mib"],
            **{k: c[k] for k in SAMPLE_COUNTERS},
        }
    )
    t = df["t_ns"].to_numpy(dtype=float)
    df.insert(2, "t_s", (t - t[0]) / 1e9 if len(t) else t)
    return df


# ------------------------------------------------------------------------------ columnar copy


def columns_path(jsonl: Path) -> Path:
    """Where the columnar copy of a JSONL file lives (beside it)."""
    return jsonl.with_name(jsonl.name + COLUMNS_SUFFIX)


def _source_key(jsonl: Path) -> np.ndarray | None:
    try:
        st = jsonl.stat()
    except OSError:
        return None
    return np.array([COLUMNS_FORMAT, st.st_size, st.st_mtime_ns], dtype=np.int64)


def _cached(path: Path, parse, object_columns: list[str]) -> dict[str, Any]:
    """`parse(path)`'s columns, from the columnar copy while it is current, else parsed (and the
    copy written when the file is large enough and the folder writable)."""
    key = _source_key(path)
    if key is None:
        return parse(path)
    if key[1] >= COLUMNS_MIN_BYTES:
        got = _read_columns(columns_path(path), key, object_columns)
        if got is not None:
            return got
    columns = parse(path)
    if key[1] >= COLUMNS_MIN_BYTES:
        _write_columns(columns_path(path), key, columns, object_columns)
    return columns


def write_columns(jsonl: Path) -> bool:
    """Build the columnar copy of a requests.jsonl or samples.jsonl now (whatever its size);
    False when it could not be written."""
    jsonl = Path(jsonl)
    key = _source_key(jsonl)
    if key is None:
        return False
    if jsonl.name.startswith("samples"):
        cols, objs = _sample_columns(jsonl), ["phase"]
    else:
        cols, objs = _request_columns(jsonl), REQUEST_LABELS
    return _write_columns(columns_path(jsonl), key, cols, objs)


def _encode_objects(values: list) -> dict[str, np.ndarray]:
    """A column of JSON scalars (str, bool, numbers, None) without pickles: codes into a table of
    the distinct values (as JSON text); a column of mostly distinct strings (rid) as one UTF-8
    blob with offsets."""
    if values and all(v.__class__ is int or v is None for v in values):  # repeat, index: numbers
        try:
            ints = np.array([0 if v is None else v for v in values], dtype=np.int64)
        except OverflowError:  # beyond 64 bits (a hand-edited row): kept as JSON below
            pass
        else:
            return {"ints": ints, "present": np.array([v is not None for v in values], dtype=bool)}
    table: dict[Any, int] = {}
    codes = np.empty(len(values), dtype=np.int64)
    for i, v in enumerate(values):
        k = (v.__class__, v)
        try:
            c = table.get(k)
        except TypeError:  # an unhashable value (a list where a label belongs): kept as JSON
            return _encode_blob(values)
        if c is None:
            c = table[k] = len(table)
        codes[i] = c
        if len(table) > 4096 and len(table) * 2 > i + 1:  # mostly distinct: a blob instead
            return _encode_blob(values)
    cats = np.array([json.dumps(v) for _, v in table], dtype=np.str_) if table else np.array([], dtype=np.str_)
    return {"codes": codes.astype(np.int32), "cats": cats}


def _encode_blob(values: list) -> dict[str, np.ndarray]:
    texts = ["" if v is None else v if isinstance(v, str) else json.dumps(v) for v in values]
    kinds = np.array([0 if v is None else 1 if isinstance(v, str) else 2 for v in values], dtype=np.int8)
    joined = "".join(texts)
    offsets = np.zeros(len(texts) + 1, dtype=np.int64)
    np.cumsum([len(t) for t in texts], out=offsets[1:])
    return {
        "blob": np.frombuffer(joined.encode("utf-8", "surrogatepass"), dtype=np.uint8),
        "offsets": offsets,
        "kinds": kinds,
    }


def _decode_objects(z: Any, name: str) -> list:
    if f"{name}.ints" in z:
        out = z[f"{name}.ints"].tolist()
        present = z[f"{name}.present"]
        for i in np.flatnonzero(~present).tolist():
            out[i] = None
        return out
    if f"{name}.codes" in z:
        cats = [json.loads(c) for c in z[f"{name}.cats"]]
        table = np.empty(len(cats), dtype=object)
        table[:] = cats
        return table[z[f"{name}.codes"]].tolist()
    joined = z[f"{name}.blob"].tobytes().decode("utf-8", "surrogatepass")
    off = z[f"{name}.offsets"].tolist()
    out = [joined[a:b] for a, b in zip(off, off[1:])]
    kinds = z[f"{name}.kinds"]
    for i in np.flatnonzero(kinds != 1).tolist():
        out[i] = None if kinds[i] == 0 else json.loads(out[i])
    return out


def _read_columns(cache: Path, key: np.ndarray, object_columns: list[str]) -> dict[str, Any] | None:
    try:
        with np.load(cache, allow_pickle=False) as z:
            if not np.array_equal(z["__source__"], key):
                return None
            names = [n for n in z.files if n != "__source__" and "." not in n]
            out: dict[str, Any] = {n: z[n] for n in names}
            for name in object_columns:
                out[name] = _decode_objects(z, name)
            return out
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile):
        return None  # missing or damaged: parse the JSONL again


def _write_columns(cache: Path, key: np.ndarray, columns: dict[str, Any], object_columns: list[str]) -> bool:
    """Write the copy atomically (a temporary file in the folder, then a rename); a folder that
    cannot be written is no error (the JSONL is parsed again next time)."""
    arrays: dict[str, np.ndarray] = {"__source__": key}
    for name, col in columns.items():
        if name in object_columns:
            for part, arr in _encode_objects(col).items():
                arrays[f"{name}.{part}"] = arr
        else:
            arrays[name] = np.asarray(col, dtype=float)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{cache.name}.", suffix=".tmp", dir=cache.parent)
    except OSError:
        return False
    try:
        os.fchmod(fd, results.FILE_MODE)
        with os.fdopen(fd, "wb") as f:
            np.savez(f, **arrays)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, cache)
        return True
    except OSError:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        return False


def load_frames(run_dir: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(requests_df, samples_df) of every variant of a run, concatenated in manifest order."""
    run = run_folder.load_run(Path(run_dir))
    reqs, samples = [], []
    for v in run.variants:
        reqs.append(requests_frame(v.paths.requests, v.name))
        samples.append(samples_frame(v.paths.samples, v.name))
    req_df = pd.concat(reqs, ignore_index=True) if reqs else requests_frame(Path("/nonexistent"))
    smp_df = pd.concat(samples, ignore_index=True) if samples else samples_frame(Path("/nonexistent"))
    return req_df, smp_df

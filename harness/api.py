"""The Python API: runs, histories and comparisons as pandas DataFrames with proper dtypes.

    from harness.api import load_run, load_runs, load_comparison

    run = load_run("results/sim_smoke/20261130T120000Z-ab12cd")
    req = run.requests
    req[~req.warmup].groupby(["variant", "phase_key"]).ttft_ms.median()
    run.samples.merge(...)                        # same phase_key in both tables

    history = load_runs("results", "sim_smoke")   # every run of a scenario, oldest first
    comparison = load_comparison(run.path)        # the run's comparison.json (harness compare)

Conventions, the same in every table:

- ``variant``, ``workload``, ``phase`` and ``phase_key`` are strings (pandas ``string`` dtype).
  ``phase_key`` is ``"<workload>/<phase>"`` for a workload's phase — the label the sampler writes
  in samples.jsonl — and the bare label for a phase of no workload (``idle``, ``startup``,
  ``cooldown``, ``quality_cold``, ...; its ``workload`` is missing). Requests and samples of one
  phase share one ``phase_key``, so the two tables join on it.
- Flags are ``bool`` (``warmup``: a request without the field is not a warm-up); counts and
  integer-nanosecond times are nullable ``Int64`` (``<NA>`` where a value is missing, never 0);
  measured values and metrics are ``float64`` with NaN where missing.
- Every table has its columns even when it has no rows.

Tables of a run (:class:`Run`): ``requests`` (one row per request, with the metrics of
`harness.measures.metrics`), ``samples`` (one row per sampler tick), ``quality`` (one row per quality
answer), ``parity`` (one row per compared (sample, ask) pair of each HiCache arm, ``arm`` =
``on`` or ``control``), ``summaries`` (summary.csv: one row per variant × workload × phase ×
metric), ``derived`` (the workloads' derived figures per variant), ``variants`` (one row per
variant: state, cause, expectation).

Built on `harness.analysis.frames` (the fast JSONL → column readers the report and compare use); this
module adds the dtypes, the phase key and the tables frames does not have. Reads only: nothing
here writes into a run folder. ``harness load RUN --csv DIR`` / ``--parquet DIR`` writes these
tables to files.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from harness.analysis import frames
from harness.analysis.run_products import PARITY_FILE
from harness.compare.runs import COMPARISON_FILE
from harness.store import results, run_folder
from harness.store.names import safe_name
from harness.store.stats import STAT_KEYS

__all__ = ["Comparison", "History", "Run", "RUN_TABLES", "load_comparison", "load_run", "load_runs"]

RUN_TABLES = ("requests", "samples", "quality", "parity", "summaries", "derived", "variants")

_STR = "string"
_INT = "Int64"

REQUEST_INTS = ("repeat", "index", *frames.REQUEST_COUNTS, *frames.REQUEST_TIMES, "output_len", "n_chunks")
REQUEST_STRS = ("variant", "workload", "phase", "phase_key", "rid", "finish_reason", "error")
SAMPLE_INTS = ("t_ns",)
# What names a metric row, in the run's summaries and in a comparison alike.
METRIC_KEYS = {
    "variant": _STR,
    "workload": _STR,
    "phase": _STR,
    "phase_key": _STR,
    "metric": _STR,
    "unit": _STR,
    "higher_is_better": "boolean",
}
QUALITY_COLUMNS = {  # column → dtype; the list columns (output ids, logprobs) stay objects
    "variant": _STR,
    "arm_role": _STR,
    "task": _STR,
    "length_target": _INT,
    "index": _INT,
    "seed": _INT,
    "ask": _INT,
    "mode": _STR,
    "prompt_tokens": _INT,
    "input_hash": _STR,
    "rid": _STR,
    "cached_tokens": _INT,
    "cached_device": _INT,
    "cached_host": _INT,
    "text": _STR,
    "correct": "boolean",
    "score": float,
    "finish_reason": _STR,
    "error": _STR,
    "sent_ns": _INT,
    "first_token_ns": _INT,
    "done_ns": _INT,
    "phase_key": _STR,
}
PARITY_COLUMNS = {
    "variant": _STR,
    "arm": _STR,
    "task": _STR,
    "length_target": _INT,
    "index": _INT,
    "seed": _INT,
    "ask": _INT,
    "token_equal": "boolean",
    "compared_tokens": _INT,
    "first_divergence": _INT,
    "ref_token": _INT,
    "cand_token": _INT,
    "cand_in_ref_topk": "boolean",
    "ref_in_cand_topk": "boolean",
    "ref_margin": float,
    "tie_flip": "boolean",
    "max_abs_dlogprob": float,
    "kind": _STR,
    "ref_correct": "boolean",
    "cand_correct": "boolean",
    "cand_cached_host": _INT,
    "noise": "boolean",
}
SUMMARY_COLUMNS = {
    **METRIC_KEYS,
    **{k: (_INT if k == "n" else float) for k in STAT_KEYS},
    "n_errors": _INT,
}
DERIVED_COLUMNS = {"variant": _STR, "workload": _STR, "name": _STR, "value": float}
VARIANT_COLUMNS = {
    "variant": _STR,
    "state": _STR,
    "cause": _STR,
    "expect": _STR,
    "expect_cause": _STR,
    "expect_met": "boolean",
    "hicache": "boolean",
    "ready_s": float,
}
QUALITY_PHASES = {"cold": "quality_cold", "reask": "quality_reask"}


# ----------------------------------------------------------------------------- shared helpers


def phase_key(workload: Any, phase: Any) -> Any:
    """``"<workload>/<phase>"``; the phase alone when there is no workload; NA when neither."""
    has_w = isinstance(workload, str) and workload != ""
    has_p = isinstance(phase, str) and phase != ""
    if has_w and has_p:
        return f"{workload}/{phase}"
    return phase if has_p else pd.NA


def split_phase_key(key: Any) -> tuple[Any, Any]:
    """(workload, phase) of a phase key: ``cold_prefill/cold`` → (cold_prefill, cold);
    ``idle`` → (NA, idle)."""
    if not isinstance(key, str):
        return pd.NA, pd.NA
    workload, sep, phase = key.partition("/")
    return (workload, phase) if sep else (pd.NA, key)


def _typed(df: pd.DataFrame, dtypes: dict[str, Any]) -> pd.DataFrame:
    """``df`` with every column of ``dtypes`` (added, all missing, when absent) cast to its dtype;
    other columns kept after them."""
    out = {}
    n = len(df)
    for col, dtype in dtypes.items():
        s = df[col] if col in df.columns else pd.Series([None] * n, index=df.index, dtype=object)
        out[col] = _cast(s, dtype)
    rest = {c: df[c] for c in df.columns if c not in dtypes}
    return pd.DataFrame({**out, **rest}, index=df.index)


def _cast(s: pd.Series, dtype: Any) -> pd.Series:
    """``s`` as ``dtype``, vectorised (no Python call per element on the large tables): missing
    values (None, NaN, NA) become NA; other values of a string column become ``str(v)``."""
    if dtype == _INT:
        num = pd.to_numeric(s, errors="coerce")
        return num.round().astype(_INT) if num.dtype.kind == "f" else num.astype(_INT)
    if dtype == "boolean":
        if s.dtype.kind == "b":
            return s.astype("boolean")
        if s.dtype.kind in "iuf":  # NaN → NA; a number is true when non-zero, as bool(v)
            return s.ne(0).astype("boolean").mask(s.isna())
        return s.map(
            lambda v: pd.NA if v is None or v is pd.NA or (isinstance(v, float) and np.isnan(v)) else bool(v)
        ).astype("boolean")
    if dtype is float:
        return pd.to_numeric(s, errors="coerce").astype(float)
    if dtype == _STR:
        return s.astype(_STR)  # str(v) per value, None/NaN/NA → NA (pandas' ensure_string_array)
    return s.astype(dtype)


def _per_unique(columns: list[pd.Series], fn: Any) -> list[Any]:
    """``[fn(*row) for row in zip(*columns)]`` computed once per distinct row (the phase labels of
    a million requests are a few dozen pairs): factorised codes, one call per unique."""
    n = len(columns[0]) if columns else 0
    if n == 0:
        return []
    codes = np.zeros(n, dtype=np.int64)
    for col in columns:
        c, u = pd.factorize(col, use_na_sentinel=True)
        codes = codes * (len(u) + 1) + (c + 1)
    _, first, inverse = np.unique(codes, return_index=True, return_inverse=True)
    values = [fn(*(col.iat[i] for col in columns)) for i in first]
    out = np.empty(len(values), dtype=object)
    out[:] = values
    return out[inverse.reshape(-1)]


# ----------------------------------------------------------------------------- a run


@dataclass
class Run:
    """One run folder read into tables (see the module docstring for the columns)."""

    path: Path
    run_id: str
    scenario: str
    manifest: dict  # manifest.json as stored, upgraded (`harness.store.manifest.Manifest.raw`)
    complete: bool
    simulated: bool
    requests: pd.DataFrame
    samples: pd.DataFrame
    quality: pd.DataFrame
    parity: pd.DataFrame
    summaries: pd.DataFrame
    derived: pd.DataFrame
    variants: pd.DataFrame

    def tables(self) -> dict[str, pd.DataFrame]:
        """{name: table} of the tables in `RUN_TABLES` order."""
        return {name: getattr(self, name) for name in RUN_TABLES}


def requests_table(path: Path, variant: str | None = None) -> pd.DataFrame:
    """One requests.jsonl as the API's requests table (frames' columns, typed, with ``phase_key``)."""
    return _type_requests(frames.requests_frame(Path(path), variant))


def _type_requests(df: pd.DataFrame) -> pd.DataFrame:
    """The API's requests table from a frames requests frame: a new frame of the same columns,
    cast (``df`` is not changed; unchanged columns are not copied twice)."""
    cols = {c: df[c] for c in df.columns}
    cols["phase_key"] = pd.Series(_per_unique([df["workload"], df["phase"]], phase_key), index=df.index, dtype=object)
    warm = df["warmup"]
    cols["warmup"] = warm.astype(bool) if warm.dtype == bool else warm.map(lambda v: v is True).astype(bool)
    for c in REQUEST_INTS:
        cols[c] = _cast(cols[c], _INT)
    for c in (*REQUEST_STRS, "concurrency_group"):
        cols[c] = _cast(cols[c], _STR)
    order = ["variant", "workload", "phase", "phase_key"]
    return pd.DataFrame({c: cols[c] for c in order + [c for c in cols if c not in order]}, index=df.index, copy=False)


def _type_samples(df: pd.DataFrame) -> pd.DataFrame:
    df = df.copy()
    keys = df["phase"]
    workloads = _per_unique([keys], lambda k: split_phase_key(k)[0])
    phases = _per_unique([keys], lambda k: split_phase_key(k)[1])
    df["phase_key"] = _cast(pd.Series(keys.to_numpy(dtype=object), index=df.index, dtype=object), _STR)
    df["workload"] = _cast(pd.Series(workloads, index=df.index, dtype=object), _STR)
    df["phase"] = _cast(pd.Series(phases, index=df.index, dtype=object), _STR)
    df["variant"] = _cast(df["variant"], _STR)
    df["t_ns"] = _cast(df["t_ns"], _INT)
    order = ["variant", "workload", "phase", "phase_key"]
    return df[order + [c for c in df.columns if c not in order]]


def _quality_table(run: run_folder.LoadedRun) -> pd.DataFrame:
    rows = []
    for v in run.variants:
        for r in results.read_jsonl(v.paths.quality):
            r = dict(r)
            r.setdefault("variant", v.name)
            rows.append(r)
    df = pd.DataFrame(rows)
    if len(df):
        asks = df["ask"] if "ask" in df.columns else pd.Series([0] * len(df))
        # the sampler's label while the answer was asked (harness.quality.run: ask 0 is cold)
        df["phase_key"] = [QUALITY_PHASES["cold"] if not a else QUALITY_PHASES["reask"] for a in asks]
    return _typed(df, QUALITY_COLUMNS)


def _parity_table(run: run_folder.LoadedRun) -> pd.DataFrame:
    rows = []
    for v in run.variants:
        path = v.paths.root / PARITY_FILE
        if not path.is_file():
            continue
        report = results.read_json(path)
        if not isinstance(report, dict):
            raise results.ResultsError(f"{path}: not a JSON object")
        for arm, key in (("on", "comparisons"), ("control", "control_comparisons")):
            for c in report.get(key) or []:
                rows.append({"variant": v.name, "arm": arm, **c})
    return _typed(pd.DataFrame(rows), PARITY_COLUMNS)


def _summaries_table(run: run_folder.LoadedRun) -> pd.DataFrame:
    path = run.paths.summary_csv
    df = pd.read_csv(path, keep_default_na=True, dtype=object) if path.is_file() else pd.DataFrame()
    if len(df):
        df["higher_is_better"] = df["higher_is_better"].map({"True": True, "False": False})
        df["phase_key"] = [phase_key(w, p) for w, p in zip(df["workload"], df["phase"])]
    return _typed(df, SUMMARY_COLUMNS)


def _derived_table(run: run_folder.LoadedRun) -> pd.DataFrame:
    rows = []
    for v in run.variants:
        for workload, w in ((v.summary.workloads if v.summary is not None else None) or {}).items():
            for name, value in w.derived.items():
                rows.append({"variant": v.name, "workload": workload, "name": name, "value": value})
    return _typed(pd.DataFrame(rows), DERIVED_COLUMNS)


def _variants_table(run: run_folder.LoadedRun) -> pd.DataFrame:
    rows = []
    for v in run.variants:
        st = v.status
        rows.append(
            {
                "variant": v.name,
                "state": st.state,
                "cause": st.cause,
                "expect": st.expect,
                "expect_cause": st.expect_cause,
                "expect_met": st.expect_met,
                "hicache": v.entry.hicache is not None if "hicache" in v.entry.raw else None,
                "ready_s": st.ready_s,
            }
        )
    return _typed(pd.DataFrame(rows), VARIANT_COLUMNS)


def load_run(path: str | Path) -> Run:
    """Every table of a run folder (``results/<scenario>/<run_id>``). Raises
    ``harness.store.results.ResultsError`` (naming the file) for a folder that is not a readable run."""
    run = run_folder.load_run(Path(path))
    req = [frames.requests_frame(v.paths.requests, v.name) for v in run.variants]
    smp = [frames.samples_frame(v.paths.samples, v.name) for v in run.variants]
    empty = Path("/nonexistent")
    requests = _type_requests(pd.concat(req, ignore_index=True) if req else frames.requests_frame(empty))
    samples = _type_samples(pd.concat(smp, ignore_index=True) if smp else frames.samples_frame(empty))
    m = run.manifest
    return Run(
        path=run.paths.root,
        run_id=run.run_id,
        scenario=run.scenario_name,
        manifest=dict(m.raw),
        complete=run.complete,
        simulated=m.simulated,
        requests=requests,
        samples=samples,
        quality=_quality_table(run),
        parity=_parity_table(run),
        summaries=_summaries_table(run),
        derived=_derived_table(run),
        variants=_variants_table(run),
    )


# ----------------------------------------------------------------------------- a history


@dataclass
class History:
    """Every run of one scenario under a results folder, oldest first: ``runs`` (one row per run:
    run_id, created_at (UTC datetime), complete, simulated, scenario_hash, sglang), and the
    ``summaries`` and ``derived`` tables of all of them with the run's ``run_id`` and
    ``created_at`` in front."""

    scenario: str
    runs: pd.DataFrame
    summaries: pd.DataFrame
    derived: pd.DataFrame
    problems: list[str] = field(default_factory=list)  # runs that could not be read, and why


def load_runs(results_dir: str | Path, scenario: str) -> History:
    """The history of ``scenario`` (its name, or its YAML file's stem) under ``results_dir``.
    A run folder that cannot be read is skipped and named in ``problems``. Reads manifests and
    summaries only (not the request rows): cheap for hundreds of nights."""
    name = Path(scenario).stem if str(scenario).endswith((".yaml", ".yml")) else str(scenario)
    runs, summaries, derived, problems = [], [], [], []
    for path in results.list_runs(Path(results_dir), safe_name(name)):
        try:
            run = run_folder.load_run(path)
            s, d = _summaries_table(run), _derived_table(run)
        except (results.ResultsError, ValueError, KeyError) as exc:
            problems.append(f"{path}: {exc}")
            continue
        m = run.manifest
        created = pd.to_datetime(m.created_at, utc=True, errors="coerce")
        runs.append(
            {
                "run_id": run.run_id,
                "created_at": created,
                "complete": run.complete,
                "simulated": m.simulated,
                "scenario_hash": m.scenario.hash,
                "sglang": m.sglang.get("version"),
                "path": str(path),
            }
        )
        for table, out in ((s, summaries), (d, derived)):
            t = table.copy()
            t.insert(0, "created_at", created)
            t.insert(0, "run_id", run.run_id)
            out.append(t)
    runs_df = _typed(
        pd.DataFrame(runs),
        {
            "run_id": _STR,
            "created_at": "datetime64[ns, UTC]",
            "complete": bool,
            "simulated": bool,
            "scenario_hash": _STR,
            "sglang": _STR,
            "path": _STR,
        },
    )

    def stack(parts: list[pd.DataFrame], columns: dict[str, Any]) -> pd.DataFrame:
        head = {"run_id": _STR, "created_at": "datetime64[ns, UTC]"}
        if not parts:
            return _typed(pd.DataFrame(), {**head, **columns})
        return _typed(pd.concat(parts, ignore_index=True), {**head, **columns})

    return History(
        scenario=name,
        runs=runs_df,
        summaries=stack(summaries, SUMMARY_COLUMNS),
        derived=stack(derived, DERIVED_COLUMNS),
        problems=problems,
    )


# ----------------------------------------------------------------------------- a comparison


@dataclass
class Comparison:
    """A comparison.json (``harness compare``): the verdict, the two runs, and its ``metrics``
    (one row per variant × workload × phase × metric judged, with ``phase_key``; a derived
    figure's phase is ``*``), ``variants`` and ``expectations`` as tables. ``raw``: the file."""

    path: Path
    verdict: str
    simulated: bool
    candidate: dict
    baseline: dict | None
    reasons: list[str]
    metrics: pd.DataFrame
    variants: pd.DataFrame
    expectations: pd.DataFrame
    raw: dict

    @property
    def regressions(self) -> pd.DataFrame:
        """The metric rows whose state is ``regression``."""
        return self.metrics[self.metrics["state"] == "regression"]


METRIC_COLUMNS = {
    **METRIC_KEYS,
    "baseline_p50": float,
    "candidate_p50": float,
    "n_baseline": _INT,
    "n_candidate": _INT,
    "values_baseline": _INT,
    "values_candidate": _INT,
    "change": float,
    "threshold": float,
    "test": _STR,
    "p_value": float,
    "state": _STR,
    "note": _STR,
    "baseline_below": float,
    "candidate_below": float,
}
COMPARED_VARIANT_COLUMNS = {
    "variant": _STR,
    "baseline_state": _STR,
    "candidate_state": _STR,
    "state": _STR,
    "note": _STR,
}
EXPECTATION_COLUMNS = {
    "check": _STR,
    "variant": _STR,
    "metric": _STR,
    "op": _STR,
    "actual": object,
    "outcome": _STR,
    "failed": "boolean",
    "reason": _STR,
}


def load_comparison(path: str | Path) -> Comparison:
    """A comparison.json, or the one in a run folder (``harness compare`` writes it there)."""
    p = Path(path)
    if p.is_dir():
        p = p / COMPARISON_FILE
    data = results.read_json(p)
    if not isinstance(data, dict) or not isinstance(data.get("metrics", []), list):
        raise results.ResultsError(f"{p}: not a comparison (a JSON object with a metrics list)")
    metrics = pd.DataFrame([m for m in data.get("metrics") or [] if isinstance(m, dict)])
    if len(metrics):
        metrics["phase_key"] = [phase_key(w, ph) for w, ph in zip(metrics["workload"], metrics["phase"])]
    return Comparison(
        path=p,
        verdict=str(data.get("verdict")),
        simulated=bool(data.get("simulated")),
        candidate=data.get("candidate") or {},
        baseline=data.get("baseline"),
        reasons=list(data.get("reasons") or []),
        metrics=_typed(metrics, METRIC_COLUMNS),
        variants=_typed(pd.DataFrame(_dicts(data.get("variants"))), COMPARED_VARIANT_COLUMNS),
        expectations=_typed(pd.DataFrame(_dicts(data.get("expectations"))), EXPECTATION_COLUMNS),
        raw=data,
    )


def _dicts(items: Any) -> list[dict]:
    return [x for x in items or [] if isinstance(x, dict)]


# ----------------------------------------------------------------------------- files


def write_tables(tables: dict[str, pd.DataFrame], out_dir: str | Path, fmt: str) -> list[Path]:
    """Write each table as ``<out_dir>/<name>.csv`` or ``.parquet`` (``fmt``); returns the paths.
    Parquet needs pyarrow (or fastparquet); object columns holding lists are written as JSON text."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, df in tables.items():
        path = out / f"{name}.{fmt}"
        flat = _flat(df)
        if fmt == "csv":
            results.write_text_atomic(path, flat.to_csv(index=False))
        elif fmt == "parquet":
            flat.to_parquet(path, index=False)
        else:
            raise ValueError(f"unknown format {fmt!r}: csv or parquet")
        written.append(path)
    return written


def _flat(df: pd.DataFrame) -> pd.DataFrame:
    """Object columns holding lists or dicts as JSON text (CSV and Parquet want scalars)."""
    out = df.copy()
    for col in out.columns:
        if out[col].dtype == object and out[col].map(lambda v: isinstance(v, (list, dict, tuple))).any():
            out[col] = out[col].map(lambda v: json.dumps(v) if isinstance(v, (list, dict, tuple)) else v)
    return out

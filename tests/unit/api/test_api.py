"""harness.api: a run, a history and a comparison as typed DataFrames (the golden runs), and
``harness load --csv/--parquet``; the example notebook runs against the golden run."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from argparse import Namespace
from pathlib import Path

import pandas as pd
import pytest

from harness import api
from harness.cli.load import cli_main as load_main
from harness.store import results, run_folder

ROOT = Path(__file__).resolve().parents[3]


def lines(path: Path) -> int:
    return sum(1 for line in path.open() if line.strip()) if path.exists() else 0


def test_run_tables_have_proper_dtypes(golden_run):
    run = api.load_run(golden_run("healthy"))
    req = run.requests
    assert req["warmup"].dtype == bool
    measured = req[~req.warmup]  # used to raise: warmup was an object column
    assert 0 < len(measured) < len(req)
    for col in ("repeat", "index", "prompt_len", "prompt_tokens", "sent_ns", "done_ns", "output_len"):
        assert str(req[col].dtype) == "Int64", col
    for col in ("variant", "workload", "phase", "phase_key", "rid"):
        assert str(req[col].dtype) == "string", col
    assert req["ttft_ms"].dtype == float
    assert (req["phase_key"] == req["workload"] + "/" + req["phase"]).all()
    assert str(run.samples["t_ns"].dtype) == "Int64" and str(run.samples["phase_key"].dtype) == "string"


def test_rows_are_the_files_rows(golden_run):
    path = golden_run("healthy")
    run = api.load_run(path)
    loaded = run_folder.load_run(path)
    for table, file in (("requests", "requests.jsonl"), ("samples", "samples.jsonl"), ("quality", "quality.jsonl")):
        want = sum(lines(v.paths.root / file) for v in loaded.variants)
        assert len(getattr(run, table)) == want, table
    assert len(run.summaries) == lines(path / "summary.csv") - 1
    parity = json.loads((path / "on-r2" / "parity.json").read_text())
    assert len(run.parity) == len(parity["comparisons"]) + len(parity["control_comparisons"])
    assert set(run.parity["arm"]) == {"on", "control"}
    assert list(run.variants["variant"]) == [v.name for v in loaded.variants]
    assert run.simulated and run.complete and run.run_id == "healthy"


def test_one_phase_key_joins_requests_and_samples(golden_run):
    run = api.load_run(golden_run("healthy"))
    smp = run.samples
    assert (smp.loc[smp.workload.isna(), "phase_key"] == smp.loc[smp.workload.isna(), "phase"]).all()  # idle, ...
    sampled = set(smp["phase_key"].dropna())
    for key in ("cold_prefill/cold", "parallel_prefixes/pass2", "repeat_prefill/repeat_after_evict"):
        assert key in sampled and key in set(run.requests["phase_key"])
    joined = run.requests.merge(
        smp.groupby(["variant", "phase_key"]).size().rename("ticks").reset_index(), on=["variant", "phase_key"]
    )
    assert len(joined) and (joined["ticks"] > 0).all()
    q = run.quality
    assert set(q["phase_key"]) <= {"quality_cold", "quality_reask"} and set(q["phase_key"]) <= sampled
    assert run.summaries["phase_key"].str.contains("/").all()


def test_missing_values_are_na_never_zero(tmp_path):
    path = tmp_path / "requests.jsonl"
    path.write_text(json.dumps({"variant": "v", "workload": "w", "phase": "p", "sent_ns": 1, "warmup": None}) + "\n")
    req = api.requests_table(path)
    assert req["prompt_len"].isna().all() and req["repeat"].isna().all()
    assert req["warmup"].tolist() == [False]
    assert pd.isna(req["ttft_ms"][0])


def test_vectorised_casts_keep_the_per_value_rules():
    """_cast and the phase keys run per column (no Python call per value on a million rows); they
    give what the per-value rules give: str(v), missing → NA, a number is true when non-zero."""
    import numpy as np

    mixed = pd.Series(["a", None, np.nan, 3, True, 1.5, pd.NA], dtype=object)
    strs = api._cast(mixed, "string")
    assert str(strs.dtype) == "string"
    assert strs.tolist() == ["a", pd.NA, pd.NA, "3", "True", "1.5", pd.NA]
    flags = api._cast(pd.Series([1.0, np.nan, 0.0, 0.5]), "boolean")
    assert str(flags.dtype) == "boolean" and flags.tolist() == [True, pd.NA, False, True]
    assert api._cast(pd.Series([True, False]), "boolean").tolist() == [True, False]
    ints = api._cast(pd.Series([1.0, np.nan, 2.6]), "Int64")
    assert str(ints.dtype) == "Int64" and ints.tolist() == [1, pd.NA, 3]
    workloads = pd.Series(["w", None, "w", "v", np.nan, ""], dtype=object)
    phases = pd.Series(["p", "idle", "p", None, None, "q"], dtype=object)
    keys = api._per_unique([workloads, phases], api.phase_key)
    assert list(keys) == [api.phase_key(w, p) for w, p in zip(workloads, phases)]
    assert list(keys[:4]) == ["w/p", "idle", "w/p", pd.NA]
    assert len(api._per_unique([pd.Series([], dtype=object)], api.split_phase_key)) == 0


def test_derived_figures(golden_run):
    path = golden_run("healthy")
    d = api.load_run(path).derived
    speedup = d[(d.variant == "on-r2") & (d.name == "second_pass_speedup")]["value"]
    summary = json.loads((path / "on-r2" / "summary.json").read_text())
    assert speedup.tolist() == [summary["workloads"]["parallel_prefixes"]["derived"]["second_pass_speedup"]]


def test_history_of_a_scenario(golden_run):
    for name in ("healthy", "regressed"):
        golden_run(name)
    results_dir = golden_run("merged").parent.parent
    history = api.load_runs(results_dir, "golden")
    assert history.runs["run_id"].tolist() == ["healthy", "merged", "regressed"]  # run ids sort by time
    assert str(history.runs["created_at"].dtype).startswith("datetime64")
    assert set(history.summaries["run_id"]) == {"healthy", "merged", "regressed"}
    assert history.summaries.columns[:2].tolist() == ["run_id", "created_at"]
    assert api.load_runs(results_dir, "golden.yaml").runs.shape == history.runs.shape
    empty = api.load_runs(results_dir, "no_such_scenario")
    assert empty.runs.empty and list(empty.summaries.columns[:3]) == ["run_id", "created_at", "variant"]


def test_a_broken_run_is_named_not_fatal(golden_run):
    run = golden_run("healthy")
    (run / "manifest.json").write_text("{not json")
    history = api.load_runs(run.parent.parent, "golden")
    assert history.runs.empty and "manifest.json" in history.problems[0]
    with pytest.raises(results.ResultsError):
        api.load_run(run)


def test_load_comparison(golden_run, capsys):
    pytest.importorskip("scipy")
    from harness.cli.compare import cli_main as compare_main

    cand, base = golden_run("regressed"), golden_run("healthy")
    compare_main(
        Namespace(run=str(cand), baseline=str(base), results_dir=str(cand.parent.parent), junit=None, markdown=None)
    )
    capsys.readouterr()
    comp = api.load_comparison(cand)
    raw = json.loads((cand / "comparison.json").read_text())
    assert comp.verdict == raw["verdict"] and len(comp.metrics) == len(raw["metrics"])
    assert str(comp.metrics["change"].dtype) == "float64" and str(comp.metrics["n_baseline"].dtype) == "Int64"
    assert (comp.regressions["state"] == "regression").all()
    assert (comp.metrics["phase_key"] == comp.metrics["workload"] + "/" + comp.metrics["phase"]).all()
    assert api.load_comparison(cand / "comparison.json").verdict == comp.verdict
    (cand / "x.json").write_text("[1, 2]")
    with pytest.raises(results.ResultsError, match="not a comparison"):
        api.load_comparison(cand / "x.json")


def test_load_writes_csv_that_reads_back(golden_run, tmp_path, capsys):
    run = golden_run("healthy")
    assert load_main(Namespace(run=str(run), csv=str(tmp_path / "csv"), parquet=None)) == 0
    written = capsys.readouterr().out.split()
    assert sorted(Path(p).name for p in written) == sorted(f"{t}.csv" for t in api.RUN_TABLES)
    back = pd.read_csv(tmp_path / "csv" / "requests.csv")
    assert len(back) == len(api.load_run(run).requests)
    quality = pd.read_csv(tmp_path / "csv" / "quality.csv")
    assert json.loads(quality["output_ids"][0])  # list columns as JSON text


def test_load_parquet_or_one_line(golden_run, tmp_path, capsys):
    run = golden_run("healthy")
    rc = load_main(Namespace(run=str(run), csv=None, parquet=str(tmp_path / "pq")))
    out = capsys.readouterr()
    if importlib.util.find_spec("pyarrow") is None and importlib.util.find_spec("fastparquet") is None:
        assert rc == 2 and out.err.strip() == "harness load --parquet needs pyarrow: pip install pyarrow"
    else:
        assert rc == 0 and len(pd.read_parquet(tmp_path / "pq" / "requests.parquet")) > 0


def test_the_example_notebook_runs_against_the_golden_run(tmp_path):
    """What .ci/notebook.sh runs: the notebook's code cells, in order, as one script."""
    nb = ROOT / "examples" / "explore_a_run.ipynb"
    r = subprocess.run(
        [
            sys.executable,
            str(ROOT / "examples" / "run_notebook.py"),
            str(nb),
            str(ROOT / "tests" / "golden" / "runs" / "healthy"),
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,
    )
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-4000:]
    assert "second_pass_speedup" in r.stdout


def test_github_annotations_point_at_the_scenario_lines(golden_run):
    """.github/scripts/annotate.py: a regression, a failed expectation and a failing variant of a
    comparison.json become ::error lines at the scenario lines that declare them."""
    run = golden_run("healthy")
    manifest = json.loads((run / "manifest.json").read_text())
    text = manifest["scenario"]["text"]
    check = next(c for c in ("on-r2: parallel_prefixes.second_pass_speedup >= 1.1",) if c in text)
    comparison = {
        "verdict": "FAIL",
        "simulated": True,
        "candidate": {"run_id": "healthy"},
        "baseline": None,
        "reasons": [],
        "metrics": [
            {
                "variant": "on-r2",
                "workload": "parallel_prefixes",
                "phase": "pass2",
                "metric": "ttft_ms",
                "unit": "ms",
                "higher_is_better": False,
                "baseline_p50": 10.0,
                "candidate_p50": 15.0,
                "n_baseline": 9,
                "n_candidate": 9,
                "change": 0.5,
                "threshold": 0.05,
                "test": "mann_whitney",
                "p_value": 0.001,
                "state": "regression",
                "note": "",
            },
            {
                "variant": "off",
                "workload": "decode",
                "phase": "decode",
                "metric": "tpot_ms",
                "unit": "ms",
                "higher_is_better": False,
                "baseline_p50": 1.0,
                "candidate_p50": 1.0,
                "n_baseline": 3,
                "n_candidate": 3,
                "change": 0.0,
                "threshold": 0.05,
                "test": "welch_t_log",
                "p_value": 0.9,
                "state": "unchanged",
                "note": "",
            },
        ],
        "variants": [
            {
                "variant": "off",
                "baseline_state": "ok",
                "candidate_state": "failed",
                "state": "introduced_failure",
                "note": "server died",
            }
        ],
        "expectations": [
            {
                "check": check,
                "variant": "on-r2",
                "metric": "parallel_prefixes.second_pass_speedup",
                "op": ">=",
                "actual": 0.9,
                "outcome": "fail",
                "failed": True,
                "reason": "0.9 >= 1.1 is false",
            }
        ],
    }
    (run / "comparison.json").write_text(json.dumps(comparison))
    r = subprocess.run(
        [sys.executable, str(ROOT / ".github" / "scripts" / "annotate.py"), str(run)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    out = r.stdout.splitlines()
    assert len(out) == 3, out
    scenario_file = manifest["scenario"]["path"]
    lines = text.splitlines()
    regression, expectation, variant = out
    assert (
        regression.startswith(f"::error file={scenario_file},line=") and "parallel_prefixes.pass2.ttft_ms" in regression
    )
    line = int(regression.split("line=")[1].split(",")[0])
    assert "parallel_prefixes" in lines[line - 1]
    assert "title=regression%3A on-r2 ttft_ms [SIMULATED]" in regression and "+50.0%" in regression
    line = int(expectation.split("line=")[1].split(",")[0])
    assert check in lines[line - 1]
    line = int(variant.split("line=")[1].split(",")[0])
    assert "name: off" in lines[line - 1] and "introduced_failure" in variant
    (run / "comparison.json").unlink()
    r = subprocess.run(
        [sys.executable, str(ROOT / ".github" / "scripts" / "annotate.py"), str(run)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0 and r.stdout.startswith("::warning::no comparison to annotate")

"""The committed golden runs (tests/golden/runs) through the public entry points give, byte for
byte, what the code before the compare/metrics/history refactor gave (tests/golden/expected):
``harness compare`` (comparison.json, Markdown, JUnit XML, console text), `load_frames` (the
request and sample tables as CSV) and the history of the runs; and the summary of each variant,
recomputed from its requests.jsonl, is the summary.json the run wrote."""

from __future__ import annotations

import dataclasses
import json
import shutil

import pytest

from harness import results
from harness.cli import main as harness
from harness.compare.runs import run_workload_kinds
from harness.frames import load_frames
from harness.history import collect
from harness.records import RequestRecord
from harness.summary import summarize
from tests.conftest import GOLDEN_EXPECTED, GOLDEN_RUNS


@pytest.fixture
def golden_cwd(tmp_path, monkeypatch):
    """The golden runs under ./runs of a temporary working directory, as the expected outputs
    were made (their paths read runs/<name>), with no variable the stored scenario reads set."""
    shutil.copytree(GOLDEN_RUNS, tmp_path / "runs")
    monkeypatch.chdir(tmp_path)
    for var in ("GOLDEN_MODEL", "SIM_TIME_SCALE", "GITHUB_STEP_SUMMARY"):
        monkeypatch.delenv(var, raising=False)
    return tmp_path


@pytest.mark.parametrize(("candidate", "exit_code"), [("regressed", 1), ("healthy", 0)])
def test_compare(golden_cwd, capsys, candidate, exit_code):
    expected = f"{candidate}_vs_healthy"
    assert harness(["compare", f"runs/{candidate}", "--baseline", "runs/healthy",
                    "--junit", "out.junit.xml", "--markdown", "out.md"]) == exit_code
    console = capsys.readouterr().out
    assert (golden_cwd / "runs" / candidate / "comparison.json").read_text() == \
        (GOLDEN_EXPECTED / f"{expected}.comparison.json").read_text()
    assert (golden_cwd / "out.md").read_text() == (GOLDEN_EXPECTED / f"{expected}.md").read_text()
    assert (golden_cwd / "out.junit.xml").read_text() == (GOLDEN_EXPECTED / f"{expected}.junit.xml").read_text()
    assert console == (GOLDEN_EXPECTED / f"{expected}.console.txt").read_text()


@pytest.mark.parametrize("run", ["healthy", "merged"])
def test_load_frames(run):
    requests_df, samples_df = load_frames(GOLDEN_RUNS / run)
    assert requests_df.to_csv(index=False) == (GOLDEN_EXPECTED / f"{run}_requests.csv").read_text()
    assert samples_df.to_csv(index=False) == (GOLDEN_EXPECTED / f"{run}_samples.csv").read_text()


def test_history(tmp_path):
    """history.json is the `History` of the four runs as JSON (decisions as dicts, runs by id)."""
    for name in ("healthy", "merged", "regressed", "interrupted"):
        shutil.copytree(GOLDEN_RUNS / name, tmp_path / "golden" / name)
    h = collect(tmp_path, "golden")
    got = {"decisions": {m: {v: dataclasses.asdict(d) for v, d in by_v.items()} for m, by_v in h.decisions.items()},
           "failed": h.failed, "runs": [r["run_id"] for r in h.runs], "series": h.series,
           "thresholds": h.thresholds}
    assert json.dumps(got, indent=1, sort_keys=True) == (GOLDEN_EXPECTED / "history.json").read_text()


@pytest.mark.parametrize("run", ["healthy", "regressed", "merged"])
def test_summaries_recomputed_from_the_records(run):
    """The per-record path of the metrics (the summary) gives what the run stored."""
    loaded = results.load_run(GOLDEN_RUNS / run)
    names_to_kinds = run_workload_kinds(loaded.manifest)
    served = [v for v in loaded.variants if v.paths.requests.exists()]
    assert served
    for v in served:
        records = [RequestRecord.from_dict(d) for d in results.read_jsonl(v.paths.requests)]
        assert json.dumps(summarize(records, names_to_kinds)["workloads"]) == json.dumps(v.summary["workloads"]), v.name

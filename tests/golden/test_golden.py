"""The committed golden runs (tests/golden/runs, made by the code before the compare/metrics/
history refactor) through the public entry points give, byte for byte, tests/golden/expected:
``harness compare`` (comparison.json, Markdown, JUnit XML, console text), `load_frames` (the
request and sample tables as CSV) and the history of the runs; and the summary of each variant,
recomputed from its requests.jsonl, is the summary.json the run wrote plus the per-repeat
figures added since (``derived_by_repeat``, ``history_stats_by_repeat``).

Three comparisons: ``healthy`` with itself, ``regressed`` (made with a 2x slower simulator time
scale, which is part of its variants' config hashes: not comparable) and ``slower_build`` (the
regressed run with the healthy run's config hashes: the same slowdown as a code change).

The expected compare outputs are regenerated through the real CLI with
``python -m tests.golden.test_golden`` (after a deliberate change of compare's output)."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import os
import shutil
import sys
from pathlib import Path

import pytest

from harness.analysis.figures import variant_figures
from harness.analysis.frames import load_frames
from harness.analysis.summary import summarize
from harness.cli import main as harness
from harness.compare.history import collect
from harness.compare.runs import run_workload_kinds
from harness.core.exit_codes import ExitCode
from harness.store import results, run_folder
from harness.store.records import RequestRecord
from tests.conftest import GOLDEN_EXPECTED, GOLDEN_RUNS

COMPARISONS = [
    ("regressed", ExitCode.INCONCLUSIVE),
    ("healthy", ExitCode.INCONCLUSIVE),
    ("slower_build", ExitCode.FAILED),
]
_ENV = ("GOLDEN_MODEL", "SIM_TIME_SCALE", "GITHUB_STEP_SUMMARY")


def golden_tree(root: Path) -> None:
    """The golden runs under ``root/runs``, as the expected outputs were made (their paths read
    runs/<name>), plus ``slower_build``: ``regressed`` with ``healthy``'s variant config hashes."""
    shutil.copytree(GOLDEN_RUNS, root / "runs")
    shutil.copytree(root / "runs" / "regressed", root / "runs" / "slower_build")
    hashes = {
        v["name"]: v["config_hash"] for v in json.loads((root / "runs/healthy/manifest.json").read_text())["variants"]
    }
    path = root / "runs/slower_build/manifest.json"
    manifest = json.loads(path.read_text())
    for v in manifest["variants"]:
        v["config_hash"] = hashes[v["name"]]
    path.write_text(json.dumps(manifest, indent=2) + "\n")


def run_compare(candidate: str) -> tuple[int, dict[str, str]]:
    """``harness compare runs/<candidate> --baseline runs/healthy`` in the current directory:
    (exit code, {expected file name: its text})."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = harness(
            [
                "compare",
                f"runs/{candidate}",
                "--baseline",
                "runs/healthy",
                "--junit",
                "out.junit.xml",
                "--markdown",
                "out.md",
            ]
        )
    name = f"{candidate}_vs_healthy"
    return code, {
        f"{name}.comparison.json": Path(f"runs/{candidate}/comparison.json").read_text(),
        f"{name}.md": Path("out.md").read_text(),
        f"{name}.junit.xml": Path("out.junit.xml").read_text(),
        f"{name}.console.txt": out.getvalue(),
    }


def golden_history(root: Path) -> str:
    """history.json: the `History` of the four runs as JSON (decisions as dicts, runs by id)."""
    for name in ("healthy", "merged", "regressed", "interrupted"):
        shutil.copytree(GOLDEN_RUNS / name, root / "golden" / name)
    h = collect(root, "golden")
    got = {
        "decisions": {m: {v: dataclasses.asdict(d) for v, d in by_v.items()} for m, by_v in h.decisions.items()},
        "failed": h.failed,
        "markers": [dataclasses.asdict(mk) for mk in h.markers],
        "runs": [r["run_id"] for r in h.runs],
        "samples": h.samples,
        "series": h.series,
        "thresholds": h.thresholds,
    }
    return json.dumps(got, indent=1, sort_keys=True)


@pytest.fixture
def golden_cwd(tmp_path, monkeypatch):
    """`golden_tree` in a temporary working directory, with no variable the stored scenario reads set."""
    golden_tree(tmp_path)
    monkeypatch.chdir(tmp_path)
    for var in _ENV:
        monkeypatch.delenv(var, raising=False)
    return tmp_path


@pytest.mark.parametrize(("candidate", "exit_code"), COMPARISONS)
def test_compare(golden_cwd, candidate, exit_code):
    code, files = run_compare(candidate)
    assert code == exit_code
    for name, text in files.items():
        assert text == (GOLDEN_EXPECTED / name).read_text(), name


FRAMES_RUNS = ["healthy", "merged"]


def frames_csv(run: str) -> dict[str, str]:
    """{expected file name: text} of a golden run's request and sample tables."""
    requests_df, samples_df = load_frames(GOLDEN_RUNS / run)
    return {
        f"{run}_requests.csv": requests_df.to_csv(index=False),
        f"{run}_samples.csv": samples_df.to_csv(index=False),
    }


@pytest.mark.parametrize("run", FRAMES_RUNS)
def test_load_frames(run):
    for name, text in frames_csv(run).items():
        assert text == (GOLDEN_EXPECTED / name).read_text(), name


def test_history(tmp_path):
    assert golden_history(tmp_path) == (GOLDEN_EXPECTED / "history.json").read_text()


@pytest.mark.parametrize("run", ["healthy", "regressed", "merged"])
def test_summaries_recomputed_from_the_records(run):
    """The per-record path of the metrics (the summary) gives what the run stored, and the
    figures the report and compare read (`harness.analysis.figures`: the stored summary with what
    it lacks recomputed) are exactly that recomputation: the golden runs' summaries predate p95
    and the per-repeat figures, which the figures fill in from the records."""
    loaded = run_folder.load_run(GOLDEN_RUNS / run)
    names_to_kinds = run_workload_kinds(loaded.manifest)
    served = [v for v in loaded.variants if v.paths.requests.exists()]
    assert served
    for v in served:
        records = [RequestRecord.from_dict(d) for d in results.read_jsonl(v.paths.requests)]
        workloads = summarize(records, names_to_kinds)["workloads"]
        for wl, w in workloads.items():
            assert set(w["derived_by_repeat"]) == set(w["derived"]), (v.name, wl)
            assert all(len(vs) == len(v.summary.repeats) for vs in w["derived_by_repeat"].values())
        assert variant_figures(v, names_to_kinds).raw["workloads"] == workloads, v.name
        stored = json.loads(v.paths.summary.read_text())["workloads"]
        for wl, w in stored.items():  # and nothing the run stored differs from the recomputation
            assert w["derived"] == workloads[wl]["derived"], (v.name, wl)
            for ph, p in w["phases"].items():
                for m, st in p["metrics"].items():
                    assert st is None or st == {k: workloads[wl]["phases"][ph]["metrics"][m][k] for k in st}


def regenerate(expected: Path = GOLDEN_EXPECTED) -> None:
    """Rewrite every file of tests/golden/expected (or of ``expected``): the comparisons through the
    real CLI, the history, the request and sample tables."""
    import tempfile

    for var in _ENV:
        os.environ.pop(var, None)
    here = Path.cwd()
    with tempfile.TemporaryDirectory() as tmp:
        golden_tree(Path(tmp))
        os.chdir(tmp)
        try:
            for candidate, _ in COMPARISONS:
                code, files = run_compare(candidate)
                print(f"{candidate}: exit {code}", file=sys.stderr)
                for name, text in files.items():
                    (expected / name).write_text(text)
        finally:
            os.chdir(here)
    with tempfile.TemporaryDirectory() as tmp:
        (expected / "history.json").write_text(golden_history(Path(tmp)))
    for run in FRAMES_RUNS:
        for name, text in frames_csv(run).items():
            (expected / name).write_text(text)


def test_regeneration_rebuilds_every_expected_file(tmp_path, monkeypatch):
    """`python -m tests.golden.test_golden` writes each file of tests/golden/expected, as it is."""
    monkeypatch.chdir(tmp_path)
    for var in _ENV:
        monkeypatch.delenv(var, raising=False)
    out = tmp_path / "expected"
    out.mkdir()
    regenerate(out)
    assert sorted(p.name for p in out.iterdir()) == sorted(p.name for p in GOLDEN_EXPECTED.iterdir())
    for p in GOLDEN_EXPECTED.iterdir():
        assert (out / p.name).read_text() == p.read_text(), p.name


if __name__ == "__main__":
    regenerate()

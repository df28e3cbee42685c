"""The CLI driven the way a Slurm job array and a GitHub Actions matrix drive it: the shipped
examples' own commands, several shard processes at once with the scheduler's environment, then
`harness merge`. The merged folder must load and hold every variant exactly once, with the same
states and row counts as one uninterrupted run."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from harness.store import results, run_folder
from tests.conftest import REPO, harness_bin, harness_env, only_run, run_harness, shape

SBATCH = REPO / "examples" / "slurm" / "hicache_nightly.sbatch"
WORKFLOW = REPO / "examples" / "github" / "sharded-nightly.yml"
VARIANTS = ["off", "on-r2", "on-r3", "on-r4"]


@pytest.fixture
def scenario(tiny_quality_scenario):
    return tiny_quality_scenario


@pytest.fixture
def reference(tiny_quality_reference):
    """One uninterrupted, unsharded run of the same scenario."""
    return tiny_quality_reference


def _check_merged(merged: Path, reference: Path, n_shards: int) -> dict:
    run = run_folder.load_run(merged)
    assert run.complete
    assert [v.name for v in run.variants] == VARIANTS  # every variant once, in YAML order
    assert shape(merged) == shape(reference)
    m = run.manifest.raw
    assert len(m["shards"]) == n_shards and all(s["host"]["kernel"] for s in m["shards"])
    assert sorted(v for s in m["shards"] for v in s["variants"]) == sorted(VARIANTS)
    assert "shard" not in m and len(m["merged_from"]) == n_shards
    # each ON arm keeps the parity verdict its own shard computed against a baseline on its host
    for v in run.variants:
        if v.name != "off":
            assert v.summary.parity["verdict"] == "PASS", v.name
    csv_variants = {line.split(",")[0] for line in run.paths.summary_csv.read_text().splitlines()[1:]}
    assert csv_variants == set(VARIANTS)
    return m


@pytest.mark.slow  # three shard runs at once, then the merge job: ~4 runs of the tiny scenario
def test_slurm_job_array(scenario, reference, tmp_path):
    """`sbatch --array=1-3`: three tasks at once with SLURM_ARRAY_* set, then the merge job."""
    root = tmp_path / "results"
    env = {
        "PATH": f"{harness_bin(tmp_path)}:{os.environ['PATH']}",
        "SCENARIO": str(scenario),
        "RESULTS_ROOT": str(root),
        "SLURM_ARRAY_JOB_ID": "4242",
        "SLURM_ARRAY_TASK_MIN": "0",
        "SLURM_ARRAY_TASK_COUNT": "3",
    }
    # a 0-based array (--array=0-2) to show $SLURM_ARRAY_TASK_MIN is honoured
    procs = [
        subprocess.Popen(
            ["bash", str(SBATCH)],
            cwd=REPO,
            env=harness_env({**env, "SLURM_ARRAY_TASK_ID": str(t)}),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for t in range(3)
    ]
    outs = [p.communicate(timeout=180)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], outs
    shards = sorted(run_dirs_any(root / "shards" / "4242"))
    assert len(shards) == 3
    indices = sorted(json.loads((d / "manifest.json").read_text())["shard"]["index"] for d in shards)
    assert indices == [1, 2, 3]

    merge = subprocess.run(
        ["bash", str(SBATCH), "merge", "4242"],
        cwd=REPO,
        env=harness_env(env),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert merge.returncode == 0, merge.stdout + merge.stderr
    merged = Path(re.search(r"^merged: (\S+)", merge.stdout, re.M).group(1))
    assert merged.parent == root / "tiny"
    _check_merged(merged, reference, 3)


def test_slurm_submit_mode(tmp_path):
    """`bash hicache_nightly.sbatch submit` submits the array and a dependent merge job."""
    fake = tmp_path / "fakebin"
    fake.mkdir()
    log = tmp_path / "sbatch.log"
    (fake / "sbatch").write_text(f'#!/bin/sh\necho "$@" >> {log}\necho "777;cluster"\n')
    (fake / "sbatch").chmod(0o755)
    r = subprocess.run(
        ["bash", str(SBATCH), "submit"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=30,
        env={
            **os.environ,
            "PATH": f"{fake}:{os.environ['PATH']}",
            "SHARDS": "5",
            "SCENARIO": "scenarios/x.yaml",
            "RESULTS_ROOT": "/shared/results",
        },
    )
    assert r.returncode == 0, r.stderr
    first, second = log.read_text().splitlines()
    assert "--array=1-5" in first and first.endswith(str(SBATCH))
    assert "--dependency=afterany:777" in second and f"bash {SBATCH} merge 777" in second


def run_dirs_any(root: Path) -> list[Path]:
    return [p.parent for p in root.rglob("manifest.json")]


def _gha_expr(text: str, ctx: dict) -> str:
    def sub(m):
        key = m.group(1).strip()
        assert key in ctx, f"test does not know the expression {key!r}"
        return str(ctx[key])

    return re.sub(r"\$\{\{(.*?)\}\}", sub, text)


def _step(job: dict, name: str) -> dict:
    return next(s for s in job["steps"] if s.get("name") == name)


@pytest.mark.slow  # four shard runs at once, then the merge step and its report
def test_github_actions_matrix(scenario, reference, tmp_path):
    """The workflow's own shard and merge steps: matrix env per job, artifacts as download-artifact
    lays them out, then the merge step with $GITHUB_OUTPUT."""
    wf = yaml.safe_load(WORKFLOW.read_text())
    shard_job, merge_job = wf["jobs"]["shard"], wf["jobs"]["merge"]
    matrix = shard_job["strategy"]["matrix"]["shard"]
    assert shard_job["strategy"]["fail-fast"] is False
    assert merge_job["needs"] == "shard" and "cancelled()" in merge_job["if"]
    path = f"{harness_bin(tmp_path)}:{os.environ['PATH']}"
    base_env = {**wf["env"], "SCENARIO": str(scenario), "PATH": path}
    run_step = _step(shard_job, "Run shard")
    upload = _step(shard_job, "Upload the shard run")

    workspaces, procs = {}, []
    for shard in matrix:  # one runner each, all at once
        ctx = {"matrix.shard": shard, "strategy.job-total": len(matrix)}
        ws = tmp_path / f"runner-{shard}"
        ws.mkdir()
        env = {**base_env, **{k: _gha_expr(str(v), ctx) for k, v in run_step["env"].items()}}
        procs.append(
            subprocess.Popen(
                ["bash", "-eo", "pipefail", "-c", _gha_expr(run_step["run"], ctx)],
                cwd=ws,
                env=harness_env(env),
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
        )
        workspaces[shard] = (ws, ctx)
    outs = [p.communicate(timeout=180)[0] for p in procs]
    assert [p.returncode for p in procs] == [0] * len(matrix), outs

    # actions/download-artifact with a pattern: one folder per artifact name under `path`
    merge_ws = tmp_path / "merge-runner"
    dl = _step(merge_job, "Download the shard runs")["with"]
    for shard, (ws, ctx) in workspaces.items():
        name = _gha_expr(upload["with"]["name"], ctx)
        assert re.fullmatch(dl["pattern"].replace("*", ".*"), name)
        shutil.copytree(ws / _gha_expr(upload["with"]["path"], ctx), merge_ws / dl["path"] / name)

    out_file = tmp_path / "github_output"
    out_file.touch()
    merge_step = _step(merge_job, "Merge")
    r = subprocess.run(
        ["bash", "-eo", "pipefail", "-c", merge_step["run"]],
        cwd=merge_ws,
        capture_output=True,
        text=True,
        timeout=120,
        env=harness_env({**base_env, "GITHUB_OUTPUT": str(out_file)}),
    )
    assert r.returncode == 0, r.stdout + r.stderr
    run_dir = dict(line.split("=", 1) for line in out_file.read_text().splitlines())["run_dir"]
    _check_merged(merge_ws / run_dir, reference, len(matrix))


def test_more_shards_than_variants(scenario, tmp_path):
    """A fixed CI matrix wider than the scenario: the extra shards run nothing and still merge."""
    out = tmp_path / "r"
    for i in (5, 6):
        r = run_harness("run", scenario, "--shard", f"{i}/6", "--results-dir", out / str(i), "--no-report")
        assert r.returncode == 0, r.stdout + r.stderr
    for i in (5, 6):
        run = run_folder.load_run(only_run(out / str(i)))
        assert run.complete and run.variants == () and run.manifest.shard["assigned"] == []
    merged = run_harness("merge", *[only_run(out / str(i)) for i in (5, 6)], "--results-dir", out / "m")
    assert merged.returncode == 1  # shards 1-4 of 6 missing: written, but not COMPLETE
    assert "shard(s) 1/6, 2/6, 3/6, 4/6 missing" in merged.stderr
    m = only_run(out / "m")
    assert not (m / results.COMPLETE_MARKER).exists()

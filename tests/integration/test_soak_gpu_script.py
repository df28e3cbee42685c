"""scenarios/gpu/run_soak_h200.sh's CPU paths: how it sizes the soak to the device call (two GPUs
side by side, one GPU in sequence, too short refused), its plan, and -- slow -- the whole script on
the simulator, down to the table and the files it packs into $OUT."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scenarios" / "gpu" / "run_soak_h200.sh"


def _script(tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    full = {**os.environ, "OUT": str(tmp_path / "out"), "PY": sys.executable, "PYTHONPATH": str(ROOT), **env}
    return subprocess.run(["bash", str(SCRIPT)], cwd=ROOT, env=full, capture_output=True, text=True, timeout=600)


def test_two_gpus_soak_side_by_side_for_what_the_call_leaves_and_one_gpu_in_sequence(tmp_path):
    two = _script(tmp_path, DRY_RUN="1", GPUS="2")
    assert two.returncode == 0, two.stdout[-2000:] + two.stderr[-2000:]
    assert "1 run(s) in sequence, a soak of 420 s in 28-s slices" in two.stdout  # capped at SOAK_MAX_S
    assert "# variant off" in two.stdout and "# variant on-r2" in two.stdout and "--hicache-ratio 2" in two.stdout
    one = _script(tmp_path, DRY_RUN="1", GPUS="1")
    assert one.returncode == 0 and "2 run(s) in sequence, a soak of 1" in one.stdout  # half of what is left
    # the mix's open loop fits its slice (at 10 s in 6-s slices each slice ran ~10 s on the H200)
    assert "s slices each (open loop " in one.stdout and "longer than slice_s" not in one.stdout
    over = _script(tmp_path, DRY_RUN="1", GPUS="1", OPEN_LOOP_S="10")
    assert "the mix's clocked members last 10 s, longer than slice_s (" in over.stdout
    short = _script(tmp_path, DRY_RUN="1", GPUS="1", CALL_BUDGET_S="300")
    assert short.returncode == 2 and "too short to judge" in short.stdout
    assert (tmp_path / "out" / "soak.out").read_text().count("run(s) in sequence") == 4


@pytest.mark.slow
def test_the_whole_script_on_the_simulator_packs_the_table_and_the_report(tmp_path):
    sim = (
        f"--set server.backend=sim --set server.model_path={ROOT / 'scenarios' / 'models' / 'llama-tiny'} "
        "--set sampling.gpu=false --set server.sim.time_scale=0.05 --set server.sim.startup_s=0 "
        "--set workloads.soak.settle_slices=1"
    )
    r = _script(
        tmp_path,
        SKIP_INSTALL="1",
        GPUS="1",
        CALL_BUDGET_S="400",
        START_ALLOW_S="5",
        TAIL_S="20",
        SOAK_MAX_S="48",
        SLICE_S="6",
        RUN_ARGS=sim,
        RESULTS=str(tmp_path / "runs"),
    )
    out = tmp_path / "out"
    table = (out / "soak_table.txt").read_text()
    assert "## off: state ok" in table and "## on-r2: state ok" in table, r.stdout[-3000:]
    assert "server_rss" in table and "energy source: simulated" in table and "energy_repeat/repeat_after_evict" in table
    assert (out / "index.html").exists() and (out / "soak-results.tar.gz").exists()
    assert f"harness run rc={r.returncode}" in (out / "soak.out").read_text()

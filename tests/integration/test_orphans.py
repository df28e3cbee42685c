"""Servers outliving their harness (SIGKILL, the OOM killer) are found by the marker in their
environment and stopped by the next run of their results folder; a GPU held by another run's
server refuses a run with a line naming it; a signal landing inside the spawn cannot leave a
server nobody knows about (harness/server/process.py, harness/run/runner.py)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from harness import cli
from harness.core.exit_codes import ExitCode
from harness.run.launch import launch_spec
from harness.scenario import load_scenario
from harness.server import process as server_mod
from harness.server.process import GpuBusy, ServerProcess, clear_orphans, find_marked_servers, free_port
from tests.conftest import REPO, alive, harness_env, run_in_process, session_alive, write_sim_scenario


def _scenario(tmp_path: Path) -> Path:
    return write_sim_scenario(tmp_path, "- name: a\n", name="orphans")


# A harness that starts a server and is SIGKILLed the next instant: before status.json could
# name the server (the race the marker closes).
_DIES_AFTER_SPAWN = """\
import os, signal, sys
from pathlib import Path
from harness.scenario import load_scenario
from harness.run.launch import launch_spec
from harness.server.process import ServerProcess, free_port
scenario = load_scenario(sys.argv[1])
variant = scenario.expand_variants()[0]
run = Path(sys.argv[2])
server = ServerProcess(launch_spec(scenario, variant, free_port()), run / variant.name / "server.log",
                       run_dir=run, variant=variant.name)
server.start()
print(server.pid, flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def _orphan_server(scenario: Path, run_dir: Path) -> int:
    proc = subprocess.run(
        [sys.executable, "-c", _DIES_AFTER_SPAWN, str(scenario), str(run_dir)],
        capture_output=True,
        text=True,
        env=harness_env(),
        cwd=REPO,
        timeout=60,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    pid = int(proc.stdout.split()[0])
    assert alive(pid)
    return pid


def test_a_fresh_run_stops_the_server_a_killed_harness_left_before_recording_it(tmp_path):
    scenario = _scenario(tmp_path)
    old_run = tmp_path / "results" / "orphans" / "20260101T000000Z-dead00"
    pid = _orphan_server(scenario, old_run)
    assert not (old_run / "a" / "status.json").exists()  # nothing on disk names it
    (found,) = [m for m in find_marked_servers() if m.pid == pid]
    assert found.run == str(old_run.resolve()) and not found.harness_alive

    outcome, _ = run_in_process(scenario, tmp_path)
    assert not alive(pid) and session_alive(pid) == []
    manifest = json.loads((outcome.run_dir / "manifest.json").read_text())
    (stopped,) = manifest["orphans_stopped"]
    assert pid in stopped["pids"] and stopped["run"] == str(old_run.resolve()) and stopped["variant"] == "a"
    assert stopped["survivors"] == []
    assert outcome.exit_code == ExitCode.OK


def test_an_orphan_of_another_results_folder_is_left_alone(tmp_path):
    scenario = _scenario(tmp_path)
    pid = _orphan_server(scenario, tmp_path / "elsewhere" / "orphans" / "run1")
    try:
        assert clear_orphans(tmp_path / "results") == []  # not this folder's, and no GPU says it is in the way
        assert alive(pid)
        (stopped,) = clear_orphans(tmp_path / "elsewhere")
        assert pid in stopped["pids"] and not alive(pid)
    finally:
        if alive(pid):
            os.killpg(pid, signal.SIGKILL)


def test_a_gpu_held_by_a_live_runs_server_refuses_the_run_naming_it(tmp_path, monkeypatch, capsys):
    """The other run's harness (here: this test process) still runs, so its server is not an
    orphan; it holds a GPU this run would use, so the run refuses, exit 2, before writing anything."""
    scenario_path = _scenario(tmp_path)
    scenario = load_scenario(scenario_path)
    (variant,) = scenario.expand_variants()
    other_run = tmp_path / "results" / "orphans" / "20260101T000000Z-live00"
    server = ServerProcess(
        launch_spec(scenario, variant, free_port()),
        other_run / "a" / "server.log",
        run_dir=other_run,
        variant="a",
    )
    server.start()
    try:
        monkeypatch.setattr(server_mod, "gpu_memory_of", lambda pids: {0: 40960.0} if server.pid in pids else {})
        rc = cli.main(["run", str(scenario_path), "--results-dir", str(tmp_path / "results"), "--no-report"])
        err = capsys.readouterr().err
        assert rc == ExitCode.BAD_INPUT
        assert f"GPU 0: 40960 MiB held by server pid {server.pid} (variant a of run {other_run.resolve()}" in err
        assert "still running" in err and "Traceback" not in err
        assert [p.name for p in (tmp_path / "results" / "orphans").iterdir()] == [other_run.name]  # no new run
        assert server.alive()  # a live run's server is never touched
        with pytest.raises(GpuBusy):
            clear_orphans(tmp_path / "results")
    finally:
        server.stop(term_timeout_s=5)


def test_a_signal_inside_the_spawn_is_raised_once_the_server_is_recorded(tmp_path, monkeypatch):
    """SIGINT arriving while the server is being spawned (here: right after the fork, before
    Popen returns) is deferred: the server is known, recorded in status.json, and stopped."""
    real_popen = subprocess.Popen
    spawned: list[int] = []

    def popen_then_sigint(*args, **kwargs):
        proc = real_popen(*args, **kwargs)
        if "harness.sim" in args[0]:
            spawned.append(proc.pid)
            os.kill(os.getpid(), signal.SIGINT)  # lands inside ServerProcess.start
        return proc

    monkeypatch.setattr(server_mod.subprocess, "Popen", popen_then_sigint)
    outcome, _ = run_in_process(_scenario(tmp_path), tmp_path)
    assert outcome.interrupted and spawned
    status = json.loads((outcome.run_dir / "a" / "status.json").read_text())
    assert status["state"] == "interrupted" and status["server"]["pid"] == spawned[0]
    assert session_alive(spawned[0]) == []

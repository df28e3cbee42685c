"""An interrupt of a side-by-side run (``--gpus``) leaves no server behind, even when a variant's
thread restarts its server (the ``storage_restart`` workload) just after the interrupt stopped it.

Found by SIGTERM to ``harness run scenarios/sim_storage_restart.yaml --gpus 0`` at the instant
the restart began (simulated start-up 8 s): exit 130, and the restarted server still alive after
the harness had gone — the interrupt had stopped the lane's server, then the lane's restart
started a new one nobody would stop (the lane went on with its workloads against it until the
harness exited 30 s later). A lane that is interrupted now refuses to start a server.
"""

from __future__ import annotations

import asyncio
import threading
import time

from harness.run import lanes
from harness.run.launch import launch_spec
from harness.run.restart import Restarter
from harness.run.variant_io import RunState
from harness.scenario import load_scenario
from harness.server.process import ServerProcess, find_marked_servers, free_port, stop_processes
from harness.store.secrets import Redactor
from tests.conftest import sim_scenario, write_scenario


def _marked(run_dir) -> list:
    return [m for m in find_marked_servers() if m.run == str(run_dir.resolve())]


def test_a_restart_just_after_the_interrupt_starts_no_server(tmp_path):
    scenario = load_scenario(write_scenario(tmp_path, sim_scenario("- name: on\n  hicache: {ratio: 2}\n")))
    variant = scenario.expand_variants()[0]
    run_dir = tmp_path / "run"
    ready = threading.Event()
    restarted: list = []

    def run_one(lane: lanes.Lane):
        server = ServerProcess(launch_spec(scenario, variant, free_port()), tmp_path / "server.log", run_dir=run_dir)
        lane.state.server = server
        with lanes.current_spawn_guard():
            server.start()
        assert server.wait_ready(30).ready
        ready.set()
        deadline = time.monotonic() + 30
        while lane.state.server is not None and time.monotonic() < deadline:  # the interrupt stops it
            time.sleep(0.01)
        restart = Restarter(
            variant,
            server,
            None,
            lambda phase: None,
            lambda: None,
            lambda: None,
            scenario_dir=None,
            enable_metrics=False,
        )
        try:
            asyncio.run(restart())  # what the lane's storage_restart workload does next
        finally:
            restarted.append(server.alive())
        return None, False

    side_by_side = lanes.Lanes(["0"], run_one, lambda: RunState(Redactor()))
    scheduler = threading.Thread(target=side_by_side.run, args=([variant],), daemon=True)
    scheduler.start()
    try:
        assert ready.wait(60), "the server never came up"
        side_by_side.interrupt()  # the main thread's interrupt: stops the lane's server, waits for the lane
        scheduler.join(10)
        assert restarted == [False]  # the restart did not bring a server back
        assert _marked(run_dir) == []
    finally:
        stop_processes([p for m in _marked(run_dir) for p in _psutil(m.pid)], term_timeout_s=5)


def _psutil(pid: int) -> list:
    import psutil

    try:
        return [psutil.Process(pid)]
    except psutil.Error:
        return []

"""Each --sim-fault switch does what the lifecycle tests rely on."""

import os
import signal
import time

import httpx
import psutil
import pytest

from harness.sim.testing import SimProcess, generate, run_sim


def test_exit_before_ready_exits_0_without_ready():
    t0 = time.monotonic()
    p = run_sim(["--sim-fault", "exit_before_ready=0.5"])
    assert p.returncode == 0
    assert time.monotonic() - t0 >= 0.5
    assert "fired up" not in p.stdout


def test_cuda_fault_at_startup():
    p = run_sim(["--sim-fault", "cuda_fault_at_startup"])
    assert p.returncode != 0
    assert "CUDA error: an illegal memory access was encountered" in p.stdout
    assert "fired up" not in p.stdout


def test_hang_at_startup_never_ready_but_killable():
    with SimProcess(["--sim-fault", "hang_at_startup"], wait_ready=False) as sim:
        time.sleep(1.5)
        assert sim.proc.poll() is None
        with pytest.raises(httpx.HTTPError):
            httpx.get(sim.url + "/health", timeout=0.5)
        assert "fired up" not in sim.output()
    assert sim.proc.poll() is not None


def test_crash_at_request_mid_request():
    with SimProcess(["--sim-fault", "crash_at_request=2"]) as sim:
        generate(sim.url, [300, 301, 302, 303], 2)
        with pytest.raises(httpx.HTTPError):
            generate(sim.url, [400, 401, 402, 403], 2)
        assert sim.wait_exit(10) != 0
        assert "CUDA error: an illegal memory access was encountered" in sim.output()


def test_ignore_sigterm_survives_sigterm():
    with SimProcess(["--sim-fault", "ignore_sigterm"]) as sim:
        os.kill(sim.proc.pid, signal.SIGTERM)
        time.sleep(0.5)
        assert sim.proc.poll() is None
        assert httpx.get(sim.url + "/health", timeout=2).status_code == 200
    assert sim.proc.poll() is not None  # SIGKILL still works


def test_sigterm_stops_a_normal_server():
    with SimProcess([]) as sim:
        os.kill(sim.proc.pid, signal.SIGTERM)
        assert sim.wait_exit(10) == 0


def test_spawn_child_launcher_exits_child_serves():
    with SimProcess(["--sim-fault", "spawn_child"], wait_ready=False) as sim:
        assert sim.wait_exit(10) == 0  # the launcher is gone at once
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                if httpx.get(sim.url + "/health_generate", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.05)
        else:
            pytest.fail("child never served:\n" + sim.output())
        members = [p for p in psutil.process_iter(["pid"]) if _pgid(p.pid) == sim.pgid]
        assert members, "the child must live on in the launcher's process group"
    time.sleep(0.2)
    assert not [p for p in psutil.process_iter(["pid"]) if _pgid(p.pid) == sim.pgid and p.status() != "zombie"]


def _pgid(pid):
    try:
        return os.getpgid(pid)
    except OSError:
        return None


def test_die_after_idle():
    with SimProcess(["--sim-fault", "die_after_idle=1"]) as sim:
        httpx.get(sim.url + "/health_generate", timeout=5)
        time.sleep(1.3)
        assert sim.proc.poll() is None  # health checks are not responses: clock not started
        generate(sim.url, [300, 301, 302], 1)
        t0 = time.monotonic()
        code = sim.wait_exit(10)
        assert code != 0 and 0.9 <= time.monotonic() - t0 <= 3.0


def test_reject_requests_answers_every_generation_with_the_status():
    with SimProcess(["--sim-fault", "reject_requests=400"]) as sim:
        r = httpx.post(sim.url + "/generate", json={"input_ids": [5, 6, 7], "sampling_params": {"max_new_tokens": 2}})
        assert r.status_code == 400 and "reject_requests" in r.json()["error"]["message"]
        assert httpx.get(sim.url + "/health_generate").status_code == 200  # the server itself is fine


def test_hang_at_request_deadlocks_the_scheduler_but_not_the_process():
    with SimProcess(["--sim-fault", "hang_at_request=2"]) as sim:
        generate(sim.url, [300, 301, 302, 303], 2)  # the first request is answered
        with pytest.raises(httpx.ReadTimeout):  # the second never is
            httpx.post(
                sim.url + "/generate",
                json={"input_ids": [400, 401, 402, 403], "sampling_params": {"max_new_tokens": 2}},
                timeout=2.0,
            )
        assert sim.proc.poll() is None  # alive: only the scheduler is stuck
        assert httpx.get(sim.url + "/health", timeout=2).status_code == 200  # the HTTP layer answers
        with pytest.raises(httpx.ReadTimeout):  # anything that needs the scheduler does not
            httpx.get(sim.url + "/health_generate", timeout=2.0)
        os.kill(sim.proc.pid, signal.SIGTERM)
        assert sim.wait_exit(10) == 0  # and SIGTERM still stops it

"""A server that is alive but no longer serving (SIGSTOPped, a deadlocked scheduler) is given up
as ``server_hung``: the rest of its variant is skipped, its rows are kept, its tree is stopped and
the next variant runs (harness/run/serving_window.py, ``server.watchdog``).

The decision rules are tested on `HangWatch` with a scripted probe; the whole path with the
simulator (its ``hang_at_request`` fault, and a real SIGSTOP of its process)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import threading
import time
from pathlib import Path

from harness.core.exit_codes import ExitCode
from harness.run.launch import launch_spec
from harness.run.serving_window import HangWatch, final_liveness
from harness.scenario import load_scenario
from harness.scenario.server_models import Watchdog
from harness.server import logscan
from harness.server.process import ServerProcess, free_port
from harness.store.records import RequestRecord
from tests.conftest import run_in_process, session_alive, start_harness, write_sim_scenario

# ------------------------------------------------------------------------------ the rules


def _record(error: str | None = None, ran_s: float = 0.0, chunks: int = 0) -> RequestRecord:
    now = time.perf_counter_ns()
    return RequestRecord(
        variant="v",
        workload="w",
        phase="p",
        repeat=0,
        index=0,
        rid="r",
        warmup=False,
        concurrency_group=None,
        prompt_len=4,
        input_hash="h",
        wall_start=time.time(),
        sent_ns=now - int(ran_s * 1e9),
        chunk_ns=[now] * chunks,
        error=error,
    )


class Script:
    """A probe that answers from a list (None: 200; a string: what went wrong) and counts calls."""

    def __init__(self, *answers, during=None):
        self.answers = list(answers)
        self.calls = 0
        self.during = during  # called while a probe is in flight

    async def __call__(self, timeout_s: float):
        self.calls += 1
        if self.during is not None:
            self.during()
        await asyncio.sleep(0)
        return self.answers.pop(0) if self.answers else None


class Stalls:
    """The harness's own stalls as `harness.core.stall` counts them, scripted: ``pause(s)``."""

    def __init__(self) -> None:
        self.total = 0.0

    def pause(self, seconds: float) -> None:
        self.total += seconds

    def __call__(self) -> float:
        return self.total


def _watch(probe=None, alive=lambda: True, stalls=None, **cfg) -> tuple[HangWatch, list[dict]]:
    given_up: list[dict] = []
    defaults = {"probe_after_s": 0.05, "probe_timeout_s": 1, "failed_probes": 2, "consecutive_timeouts": 3}
    watch = HangWatch(
        Watchdog(**{**defaults, **cfg}),
        10.0,
        probe or Script(),
        alive,
        given_up.append,
        tick_s=0.01,
        stalled=stalls or Stalls(),
    )
    return watch, given_up


async def _run_for(watch: HangWatch, seconds: float, every=None) -> None:
    task = asyncio.create_task(watch.run())
    end = time.monotonic() + seconds
    while time.monotonic() < end and not task.done():
        if every is not None:
            every()
        await asyncio.sleep(0.01)
    task.cancel()


def test_no_probe_while_requests_keep_finishing():
    probe = Script()
    watch, given_up = _watch(probe, probe_after_s=0.2)
    asyncio.run(_run_for(watch, 0.6, every=lambda: watch.note(_record())))
    assert probe.calls == 0 and not given_up  # a serving server is never disturbed


def test_silence_then_failed_probes_give_the_server_up():
    probe = Script("no answer in 1s", "no answer in 1s")
    watch, given_up = _watch(probe)
    asyncio.run(_run_for(watch, 5))
    assert probe.calls == 2
    assert len(given_up) == 1 and given_up[0]["detected_by"] == "health_probe"
    assert given_up[0]["probes"] == ["no answer in 1s", "no answer in 1s"]


def test_one_failed_probe_is_not_enough_and_an_answer_resets():
    probe = Script("answered 503", None, "answered 503", None)
    watch, given_up = _watch(probe)
    asyncio.run(_run_for(watch, 0.5))
    assert probe.calls >= 4 and not given_up  # never two failures in a row


def test_a_request_finishing_during_a_failed_probe_is_not_a_strike():
    """A busy server may be slow to answer the probe; a finished request shows it serves."""
    watch, given_up = _watch(failed_probes=1)
    watch.probe = Script(*["no answer in 1s"] * 100, during=lambda: watch.note(_record()))
    asyncio.run(_run_for(watch, 0.5))
    assert watch.probes_sent >= 2 and not given_up


def test_the_harness_s_own_stall_is_no_silence_of_the_server():
    """The harness paused (SIGSTOP, a stalled box) between two finished requests: no request had
    finished for longer than probe_after_s by the clock, but the server was not silent for it."""
    stalls, probe = Stalls(), Script()
    watch, given_up = _watch(probe, stalls=stalls, probe_after_s=0.3)
    t0 = time.monotonic()

    def paused_all_along() -> None:  # every second that passes, the harness was not running
        stalls.total = time.monotonic() - t0

    asyncio.run(_run_for(watch, 0.8, every=paused_all_along))
    assert probe.calls == 0 and not given_up


def test_a_probe_the_harness_stalled_through_is_no_strike():
    """The harness paused while its probe waited: the probe's time limit passed in the harness's
    clock, not in the server's. The probe says nothing; the next one judges."""
    stalls = Stalls()
    watch, given_up = _watch(stalls=stalls, failed_probes=1)
    watch.probe = Script(*["no answer in 1s"] * 3, during=lambda: stalls.pause(14))
    asyncio.run(_run_for(watch, 0.3))
    assert watch.probes_sent >= 2 and not given_up


def test_breaker_counts_only_requests_that_ran_into_the_request_timeout():
    watch, given_up = _watch(probe_after_s=1000)
    watch.note(_record("timeout", ran_s=10))
    watch.note(_record("timeout", ran_s=10))
    watch.note(_record(None))  # an answer resets the count
    watch.note(_record("timeout", ran_s=10))
    watch.note(_record("timeout", ran_s=10))
    watch.note(_record("timeout", ran_s=1))  # cut short by its workload's timeout_s: not counted
    assert not given_up
    watch.note(_record("timeout", ran_s=10))
    assert [g["detected_by"] for g in given_up] == ["consecutive_timeouts"]
    assert given_up[0]["timeouts"] == 3


def test_budget_gives_the_variant_up():
    watch, given_up = _watch(probe_after_s=1000, variant_budget_s=0.05)
    asyncio.run(_run_for(watch, 5, every=lambda: watch.note(_record())))
    assert [g["detected_by"] for g in given_up] == ["variant_budget_s"]


def test_a_dead_server_is_never_called_hung():
    probe = Script("failed: ConnectError", "failed: ConnectError")
    watch, given_up = _watch(probe, alive=lambda: False)
    asyncio.run(_run_for(watch, 0.3))
    watch.note(_record("timeout", ran_s=10))
    watch.note(_record("timeout", ran_s=10))
    watch.note(_record("timeout", ran_s=10))
    assert probe.calls == 0 and not given_up  # the death watchdog's case


# ------------------------------------------------------------------------------ with the simulator


def _scenario(tmp_path: Path, variants: str, workloads: str, watchdog: str, request_timeout_s: float = 600) -> Path:
    """``hang.yaml``: the variants and workloads under ``server.watchdog: <watchdog>``; by default
    a request timeout nothing reaches (600 s), so what ends a hang is the watchdog."""
    return write_sim_scenario(
        tmp_path,
        variants,
        workloads,
        name="hang",
        watchdog=watchdog,
        request_timeout_s=request_timeout_s,
        liveness_idle_s=0.2,
    )


SEQUENTIAL = """\
- kind: cold_prefill
  n: 6
  prompt_tokens: 256
- kind: decode
  batch: 1
  prompt_tokens: 64
  output_tokens: 16
"""


def _errors(rows: list[dict]) -> list:
    return [r["error"] for r in rows]


def test_a_deadlocked_scheduler_is_given_up_by_the_health_probe_and_the_run_goes_on(tmp_path):
    path = _scenario(
        tmp_path,
        """\
        - name: stuck
          sim_faults: [hang_at_request=3]
        - name: healthy
        """,
        SEQUENTIAL,
        "{probe_after_s: 0.5, probe_timeout_s: 1, failed_probes: 2}",
    )
    outcome, loaded = run_in_process(path, tmp_path)
    stuck = loaded.variant("stuck")
    assert stuck.status.state == "partial" and stuck.status.cause == logscan.SERVER_HUNG
    assert stuck.status.cause_detail["detected_by"] == "health_probe"
    rows = loaded.requests("stuck")
    assert _errors(rows)[:2] == [None, None]  # what was measured before the hang is kept
    assert _errors(rows)[2:] == ["server_hung"]  # the one in flight; nothing more was sent
    assert "timeout" not in _errors(rows)  # nothing waited out request_timeout_s (600 s)
    assert stuck.summary.state == "partial"
    assert loaded.variant("healthy").status.state == "ok"  # the next variant ran
    assert session_alive(stuck.status.server["sid"]) == []
    assert outcome.exit_code == ExitCode.FAILED


def test_consecutive_request_timeouts_trip_the_breaker(tmp_path):
    path = _scenario(
        tmp_path,
        """\
        - name: stuck
          sim_faults: [hang_at_request=2]
        """,
        SEQUENTIAL,
        "{probe_after_s: 1000, consecutive_timeouts: 2}",
        request_timeout_s=1,
    )
    _, loaded = run_in_process(path, tmp_path)
    status = loaded.variant("stuck").status.to_json()
    assert status["cause"] == logscan.SERVER_HUNG and status["cause_detail"]["detected_by"] == "consecutive_timeouts"
    rows = loaded.requests("stuck")
    assert _errors(rows) == [None, "timeout", "timeout"]  # the breaker opened at the second: nothing more sent


def test_the_variant_budget_ends_a_variant_that_runs_too_long(tmp_path):
    path = _scenario(
        tmp_path,
        "- name: slow\n",
        """\
        - kind: decode
          batch: 1
          prompt_tokens: 64
          output_tokens: 4000
        """,
        "{variant_budget_s: 0.5}",
    )
    _, loaded = run_in_process(path, tmp_path)
    status = loaded.variant("slow").status.to_json()
    assert status["cause"] == logscan.SERVER_HUNG and status["cause_detail"]["detected_by"] == "variant_budget_s"
    assert _errors(loaded.requests("slow")) == ["server_hung"]


def test_a_sigstopped_server_is_given_up_continued_and_stopped(tmp_path):
    """SIGSTOP the simulator's process mid-workload from outside (the harness runs as its own
    process, as in CI): the probe gives it up, the stop continues it so it acts on SIGTERM
    (nothing needed SIGKILL), and the next variant runs."""
    path = _scenario(
        tmp_path,
        """\
        - name: frozen
        - name: healthy
        """,
        """\
        - kind: decode
          batch: 1
          prompt_tokens: 64
          output_tokens: 4000
        """,
        "{probe_after_s: 0.5, probe_timeout_s: 1, failed_probes: 2}",
    )
    proc = start_harness("run", path, "--results-dir", tmp_path / "results", "--no-report")
    try:
        status_path, pid = None, None
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and proc.poll() is None:
            found = list((tmp_path / "results").glob("hang/*/frozen/status.json"))
            if found:
                status = json.loads(found[0].read_text())
                if status.get("ready_s") is not None:
                    status_path, pid = found[0], status["server"]["pid"]
                    break
            time.sleep(0.05)
        assert pid is not None, "the server never got ready"
        time.sleep(0.5)  # inside the decode workload
        os.kill(pid, signal.SIGSTOP)
        out, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == ExitCode.FAILED, out
    status = json.loads(status_path.read_text())
    assert status["state"] == "partial" and status["cause"] == logscan.SERVER_HUNG, status
    assert status["cause_detail"]["detected_by"] == "health_probe"
    assert status["stop"]["killed"] == []  # continued, it stopped on SIGTERM (pinned memory freed)
    assert session_alive(status["server"]["sid"]) == []
    healthy = json.loads((status_path.parent.parent / "healthy" / "status.json").read_text())
    assert healthy["state"] == "ok"


def test_a_harness_paused_longer_than_the_request_timeout_keeps_a_healthy_server(tmp_path):
    """The harness itself SIGSTOPped (a stalled box, a debugger) for longer than the request timeout,
    while streams are in flight, then continued: every deadline had passed in the harness's clock,
    so every in-flight request was a "timeout" and the breaker gave a healthy server up as
    `server_hung`. The hang detection measures the server: the harness's own stall is not its
    silence, and a request's time limit counts the time the harness was running."""
    path = _scenario(
        tmp_path,
        "- name: healthy\n",
        """\
        - kind: decode
          batch: 4
          prompt_tokens: 64
          output_tokens: 1500
        - kind: cold_prefill
          n: 3
          prompt_tokens: 256
        """,
        "{probe_after_s: 1, probe_timeout_s: 1, failed_probes: 1, consecutive_timeouts: 1}",
        request_timeout_s=4,
    )
    proc = start_harness("run", path, "--results-dir", tmp_path / "results", "--no-report")
    lines: list[str] = []
    inside = threading.Event()

    def read() -> None:
        for line in proc.stdout:
            lines.append(line)
            if "decode/decode" in line:
                inside.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        assert inside.wait(120), "".join(lines)[-2000:]
        time.sleep(0.3)  # inside the four streams (each about 2 s)
        os.kill(proc.pid, signal.SIGSTOP)
        time.sleep(6)  # longer than request_timeout_s, probe_after_s and probe_timeout_s
        os.kill(proc.pid, signal.SIGCONT)
        proc.wait(timeout=120)
        reader.join(timeout=5)
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGCONT)
            proc.kill()
            proc.wait()
    out = "".join(lines)
    (status_path,) = (tmp_path / "results").glob("hang/*/healthy/status.json")
    status = json.loads(status_path.read_text())
    found = list(status_path.parent.glob("requests.jsonl"))
    rows = [json.loads(x) for x in found[0].read_text().splitlines() if x.strip()] if found else []
    assert status["state"] == "ok", (status.get("cause"), status.get("cause_detail"), _errors(rows), out[-2000:])
    # no request waited out its limit and none was given up: the harness's stall is not the server's;
    # and the streams in flight across the pause end whole (the simulator dropped the last chunk of
    # a request that finished while its client was slow to read: tests/unit/sim/test_stream_end.py)
    assert rows and _errors(rows) == [None] * len(rows), _errors(rows)
    assert "server_hung" not in out
    assert proc.returncode == ExitCode.OK, out[-2000:]


class _Proc:
    """What final_liveness needs of a ServerProcess, for a SimProcess."""

    def __init__(self, popen):
        self.popen = popen

    def alive(self) -> bool:
        return self.popen.poll() is None

    def exit_code(self):
        return self.popen.poll()


def test_final_check_tells_a_hung_server_from_a_dead_one():
    from harness.sim.testing import SimProcess

    with SimProcess([]) as sim:
        assert final_liveness(_Proc(sim.proc), sim.url, 0.0, 2.0) == (None, "ok")
        os.kill(sim.proc.pid, signal.SIGSTOP)
        try:
            cause, why = final_liveness(_Proc(sim.proc), sim.url, 0.0, 1.0)
        finally:
            os.kill(sim.proc.pid, signal.SIGCONT)
        assert cause == logscan.SERVER_HUNG and "/health_generate" in why
        sim.proc.kill()
        sim.proc.wait()
        cause, _ = final_liveness(_Proc(sim.proc), sim.url, 0.0, 1.0)
        assert cause == logscan.SERVER_DIED


def test_stop_continues_a_stopped_tree_so_sigterm_reaches_it(tmp_path):
    scenario = load_scenario(_scenario(tmp_path, "- name: a\n", SEQUENTIAL, "{}"))
    (variant,) = scenario.expand_variants()
    server = ServerProcess(launch_spec(scenario, variant, free_port()), tmp_path / "server.log")
    server.start()
    try:
        assert server.wait_ready(20).ready
        os.killpg(server.pid, signal.SIGSTOP)
        stop = server.stop(term_timeout_s=20)
    finally:
        server.stop(term_timeout_s=1)
    assert stop.killed == [] and stop.survivors == []

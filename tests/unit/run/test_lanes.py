"""Variants side by side on one host's GPUs (harness run --gpus; harness.run.lanes): the scheduler,
CUDA_VISIBLE_DEVICES per variant, one results folder, parity's OFF/ON pairing, the interrupt."""

from __future__ import annotations

import json
import signal
import threading
from dataclasses import dataclass

import psutil
import pytest

from harness.core.errors import BadInput
from harness.core.exit_codes import ExitCode
from harness.run import lanes
from harness.run.runner import RunOptions, run_scenario
from harness.scenario import load_scenario
from harness.store import results, run_folder
from tests.conftest import (
    TINY_QUALITY,
    alive,
    run_dirs,
    sim_scenario,
    start_harness,
    status_state,
    wait_for,
    write_scenario,
)


def test_parse_and_resolve_the_gpu_set():
    assert lanes.parse_gpus("0,1, 3") == ["0", "1", "3"]
    assert lanes.parse_gpus("auto") is None
    for bad in ("", "0,,1", "0,0", "0 1"):
        with pytest.raises(BadInput):
            lanes.parse_gpus(bad)
    assert lanes.host_gpus({"CUDA_VISIBLE_DEVICES": "2,5"}, lambda: []) == ["2", "5"]
    assert lanes.host_gpus({}, lambda: [{"index": 0}, {"index": 1}]) == ["0", "1"]
    with pytest.raises(BadInput, match="no GPU"):
        lanes.host_gpus({}, lambda: [])


@dataclass
class V:
    name: str
    tp_size: int = 1


class FakeState:
    vpaths = status = None

    def __init__(self):
        self.interrupted = False

    def interrupt(self):
        self.interrupted = True


def test_the_scheduler_fills_free_gpus_in_order_and_backfills():
    """tp 1, tp 2, tp 1 on two GPUs: a and c run together first (b waits for two), then b alone;
    no GPU is ever given twice at once; an unclean cooldown marks the next variant on that GPU."""
    held: dict[str, str] = {}
    lock = threading.Lock()
    overlaps: list[set[str]] = []
    release = {n: threading.Event() for n in "abcd"}

    def run_one(lane):
        with lock:
            for g in lane.gpu_ids:
                assert g not in held, f"GPU {g} given to {lane.variant.name} while {held[g]} has it"
                held[g] = lane.variant.name
            overlaps.append(set(held.values()))
        release[lane.variant.name].wait(10)
        with lock:
            for g in lane.gpu_ids:
                del held[g]
        return (lane.variant.name, lane.env_not_clean), lane.variant.name == "a"

    started: list[tuple[str, list[str]]] = []
    sched = lanes.Lanes(
        ["0", "1"], run_one, FakeState, on_start=lambda lane: started.append((lane.variant.name, lane.gpu_ids))
    )
    t = threading.Thread(target=lambda: setattr(t, "done", sched.run([V("a"), V("b", 2), V("c"), V("d")])))
    t.start()
    wait_for(lambda: len(started) == 2, 10, "a and c")
    assert started == [("a", ["0"]), ("c", ["1"])]
    release["a"].set()
    # d is later in the queue than b, but b cannot start with one GPU free: d takes it
    wait_for(lambda: len(started) == 3, 10, "d")
    assert started[2] == ("d", ["0"])
    release["c"].set()
    release["d"].set()
    wait_for(lambda: len(started) == 4, 10, "b")
    assert started[3] == ("b", ["0", "1"])
    release["b"].set()
    t.join(10)
    outcomes = {lane.outcome[0]: lane.outcome[1] for lane in t.done}
    assert outcomes == {"a": False, "c": False, "d": True, "b": False}  # d followed a's unclean GPU 0
    assert {"a", "c"} in overlaps


def test_a_variant_wider_than_the_set_is_refused_before_anything_starts():
    with pytest.raises(BadInput, match="needs 4 GPUs"):
        lanes.check_fits([V("a"), V("big", 4)], ["0", "1"])


# a prefix that shows, in the server's log, the CUDA_VISIBLE_DEVICES it was started with
SHOW_GPUS = """\
  command_prefix: [sh, -c, 'echo "[launch] CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES"; exec "$@"', sh]
"""


def _scenario(tmp_path, n_on: int = 2, workloads: str | None = None, quality: bool = True):
    variants = '- name: "off"\n' + "".join(f"- name: on-r{r}\n  hicache: {{ratio: {r}}}\n" for r in range(2, 2 + n_on))
    text = sim_scenario(
        variants,
        workloads or "- kind: cold_prefill\n  n: 2\n  prompt_tokens: 256\n",
        name="side",
        time_scale=0.01,
        startup_s=0.5,
        preflight="off",
        extra=TINY_QUALITY if quality else "",
    ).replace("  startup_timeout_s:", SHOW_GPUS + "  startup_timeout_s:")
    return write_scenario(tmp_path, text)


def test_a_run_on_two_gpus_runs_variants_at_once_each_with_its_own(tmp_path):
    path = _scenario(tmp_path)
    sampled = "sampling: {enabled: true, interval_s: 0.2, idle_window_s: 0, gpu: false, cooldown_timeout_s: 1}"
    path.write_text(path.read_text().replace("sampling: {enabled: false, cooldown_timeout_s: 1}", sampled))
    outcome = run_scenario(
        load_scenario(path),
        RunOptions(results_dir=tmp_path / "results", live_progress=False, gpus=["0", "1"]),
    )
    assert outcome.exit_code == ExitCode.OK, outcome.verdict
    run = run_folder.load_run(outcome.run_dir)
    assert run.manifest.raw["gpus"] == {"ids": ["0", "1"], "side_by_side": True}
    spans = {}
    for v in run.variants:
        st = v.status.to_json()
        assert st["state"] == "ok"
        (gpu,) = st["gpu_ids"]
        log = (
            (run.paths.root / v.name / "server.log").read_text()
            if (run.paths.root / v.name / "server.log").exists()
            else ""
        )
        if not log:
            log = "".join(p.read_text() for p in (run.paths.root / v.name).glob("server*.log"))
        assert f"[launch] CUDA_VISIBLE_DEVICES={gpu}\n" in log  # set for the server, as recorded
        assert st["timing"]["gpu_ids"] == [gpu] and st["timing"]["gpus"] == 1
        assert st["cooldown"]["reason"].endswith("shared with the variants running side by side)")
        spans[v.name] = (st["server"]["create_time"], gpu)
    # off and on-r2 started together, one on each GPU; on-r3 waited for one of them
    assert {spans["off"][1], spans["on-r2"][1]} == {"0", "1"}
    assert abs(spans["off"][0] - spans["on-r2"][0]) < spans["on-r3"][0] - min(spans["off"][0], spans["on-r2"][0])
    # the samples are the host's, shared: labelled so
    for v in run.variants:
        assert "ran on this host meanwhile" in v.summary.sampling["system_shared"]
        samples = list(results.read_jsonl(run.paths.root / v.name / "samples.jsonl"))
        assert samples and all(x["system_shared"] is True for x in samples)
    # parity still pairs OFF with each ON from their files
    for v in run.variants[1:]:
        assert v.summary.parity["verdict"] == "PASS", v.summary.quality


def _sim_pids(root_pid: int) -> list[int]:
    try:
        return [p.pid for p in psutil.Process(root_pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def test_an_interrupt_stops_every_concurrent_server_and_marks_them(tmp_path):
    long = "- kind: decode\n  batch: 1\n  output_tokens: 4000\n  prompt_tokens: 64\n"
    path = _scenario(tmp_path, n_on=1, workloads=long, quality=False)
    results_dir = tmp_path / "results"
    proc = start_harness("run", path, "--results-dir", results_dir, "--no-report", "--gpus", "0,1", cwd=tmp_path)
    servers: set[int] = set()
    try:

        def both_serving() -> bool:
            servers.update(_sim_pids(proc.pid))
            runs = run_dirs(results_dir)
            if proc.poll() is not None:
                raise AssertionError(proc.stdout.read())
            return bool(runs) and all(
                (runs[0] / n / "requests.jsonl").exists() and status_state(runs[0], n) == "running"
                for n in ("off", "on-r2")
            )

        wait_for(both_serving, 120, "both variants serving at once")
        servers.update(_sim_pids(proc.pid))
        proc.send_signal(signal.SIGINT)
        rc = proc.wait(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
    out = proc.stdout.read()
    assert rc == ExitCode.INTERRUPTED, out[-3000:]
    (run,) = run_dirs(results_dir)
    assert (run / results.INTERRUPTED_MARKER).exists()
    for name in ("off", "on-r2"):
        assert json.loads((run / name / "status.json").read_text())["state"] == "interrupted"
    wait_for(lambda: not [p for p in servers if alive(p)], 20, "every server stopped")


def test_the_rule_and_the_planned_wall_time_agree_with_the_scheduler():
    """take() is the scheduler's rule; planned_wall_s replays it on estimated durations (--dry-run --gpus)."""
    assert lanes.take([1, 2, 1, 1], ["0", "1"], ["0", "1"]) == [(0, ["0"]), (2, ["1"])]
    assert lanes.take([2], ["1"], ["0", "1"]) == []
    # a (10 s) and c (5 s) first; d backfills c's GPU at 5 s; b (both GPUs) once a and d end at 10 s
    assert lanes.planned_wall_s([(10, 1), (20, 2), (5, 1), (5, 1)], ["0", "1"]) == 30
    assert lanes.planned_wall_s([(10, 1)] * 3, ["0", "1", "2"]) == 10
    assert lanes.planned_wall_s([(10, 1)] * 3, ["0"]) == 30


def test_dry_run_says_the_wall_time_side_by_side(monkeypatch):
    from harness.run.estimate import estimate_run
    from tests.conftest import REPO

    monkeypatch.setenv("MODEL_PATH", "/nonexistent")
    est = estimate_run(load_scenario(REPO / "scenarios" / "wsl_tp2.yaml"))
    seq = sum(v.expected_seconds for v in est.variants) / 60
    line = est.side_by_side_line(["0", "1", "2", "3"])  # TP2 variants: two at a time
    assert line.startswith("side by side on GPUs 0,1,2,3: expected wall ")
    wall = float(line.split("expected wall ")[1].split(" min")[0])
    assert seq / 2 <= wall + 0.05 < seq and f"one after another {seq:.1f} min" in line


def test_the_cli_refuses_a_bad_gpu_set_in_one_line_exit_2(tmp_path):
    from tests.conftest import run_harness

    text = sim_scenario('- name: "off"\n').replace(
        "  model_path: models/llama-tiny", "  model_path: models/llama-tiny\n  tp_size: 2"
    )
    path = write_scenario(tmp_path, text)
    for gpus, says in (("0", "needs 2 GPUs (tp_size) but --gpus gives 1"), ("0,0", "a GPU is named twice")):
        r = run_harness("run", path, "--results-dir", tmp_path / "results", "--no-report", "--gpus", gpus)
        assert r.returncode == ExitCode.BAD_INPUT, r.stderr
        assert says in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "results").exists() or not run_dirs(tmp_path / "results")  # nothing written

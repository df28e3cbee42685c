"""Signals at any instant: SIGTERM, SIGINT or SIGHUP wherever the run is — starting a server,
inside a stream, in the quality arm, in cooldown, finishing, drawing the report — stop the server
tree, mark the run INTERRUPTED (or, once COMPLETE, say the report is missing), print how to resume
and exit 130. SIGTERM used to be swallowed inside a stream (recorded as a request error, exit 0).

Each case runs `harness run` on the simulator in a subprocess, reads its progress lines, and sends
the signal a little after the named phase begins. The default suite runs a few cases; the whole
set (`-m slow`) covers 24 instants over two variants.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from harness.core.exit_codes import ExitCode
from harness.store import results
from tests.conftest import MODELS, alive, harness_command, harness_env, start_harness

DATASETS = Path(__file__).parents[1] / "fixtures" / "datasets"

SCENARIO = """\
name: signals
server:
  backend: sim
  model_path: {model}
  args: {{--max-total-tokens: 4096, --enable-metrics: true}}
  startup_timeout_s: 30
  request_timeout_s: 30
  liveness_idle_s: 0.5
  sim: {{time_scale: 0.05, startup_s: 0.5}}
variants:
  - name: off
  - name: on
    hicache: {{ratio: 2}}
workloads:
  - kind: cold_prefill
    n: 2
    prompt_tokens: 1500
    warmup: 0
  - kind: decode
    batch: 16             # many streams at once: the client's reader keeps the main thread busy,
    prompt_tokens: 64     # where a signal used to land inside a stream's code and be swallowed
    output_tokens: 300
sampling: {{interval_s: 0.2, idle_window_s: 0.5, gpu: false, cooldown_timeout_s: 2}}
quality:
  enabled: true
  tasks: [needle]
  lengths: [1200]
  samples_per_task: 1
  reasks: 1
  max_new_tokens: 8
  mode: token_ids
"""

# (phase text in a progress line, seconds after it, signal); "COMPLETE" waits for the run's marker
# (the report is being drawn then), "final" is the finishing step after the last variant.
ALL_CASES = [
    ("variant 1/2 off | preflight", 0.0, signal.SIGTERM),
    ("variant 1/2 off | starting", 0.05, signal.SIGHUP),
    ("variant 1/2 off | starting", 0.3, signal.SIGINT),
    ("variant 1/2 off | idle", 0.1, signal.SIGTERM),
    ("off | cold_prefill/cold", 0.05, signal.SIGTERM),
    ("off | cold_prefill/cold", 0.25, signal.SIGHUP),
    ("off | decode/decode", 0.1, signal.SIGTERM),  # inside two streams
    ("off | decode/decode", 0.6, signal.SIGINT),
    ("off | decode/decode", 1.0, signal.SIGTERM),
    ("off | quality", 0.05, signal.SIGTERM),
    ("off | quality", 0.4, signal.SIGHUP),
    ("off | final_check", 0.1, signal.SIGTERM),
    ("off | stopping", 0.0, signal.SIGTERM),
    ("off | cooldown", 0.1, signal.SIGTERM),
    ("variant 2/2 on | starting", 0.2, signal.SIGTERM),
    ("on | cold_prefill/cold", 0.1, signal.SIGINT),
    ("on | decode/decode", 0.3, signal.SIGTERM),
    ("on | decode/decode", 0.9, signal.SIGHUP),
    ("on | quality_churn", 0.1, signal.SIGTERM),
    ("on | quality", 0.6, signal.SIGTERM),
    ("on | final_check", 0.2, signal.SIGINT),
    ("on | cooldown", 0.3, signal.SIGTERM),
    ("finishing the run", 0.0, signal.SIGTERM),
    ("COMPLETE", 0.0, signal.SIGTERM),  # drawing the report
]
QUICK = {6, 9}  # inside streams, in the quality arm (of the first variant: the second's is `-m slow`)


def _descendants(pid: int) -> list[int]:
    try:
        return [p.pid for p in psutil.Process(pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def _run_case(tmp_path: Path, when: str, delay_s: float, sig: int) -> dict:
    scenario = tmp_path / "s.yaml"
    scenario.write_text(SCENARIO.format(model=MODELS / "llama-tiny"))
    results_dir, reports_dir = tmp_path / "results", tmp_path / "reports"
    proc = start_harness("run", scenario, "--results-dir", results_dir, "--reports-dir", reports_dir, cwd=tmp_path)
    lines: list[str] = []
    seen = threading.Event()

    def read() -> None:
        for line in proc.stdout:
            lines.append(line)
            if when in line:
                seen.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    deadline = time.monotonic() + 180
    servers: set[int] = set()
    while time.monotonic() < deadline and proc.poll() is None:
        servers.update(_descendants(proc.pid))
        if when == "COMPLETE":
            if list(results_dir.glob("signals/*/COMPLETE")):
                break
        elif seen.is_set():
            break
        time.sleep(0.01)
    else:
        proc.kill()
        pytest.fail(f"never reached {when!r}: {''.join(lines)[-2000:]}")
    time.sleep(delay_s)
    servers.update(_descendants(proc.pid))
    proc.send_signal(sig)
    rc = proc.wait(timeout=90)
    reader.join(timeout=5)
    (run,) = results_dir.glob("signals/*")
    return {"rc": rc, "out": "".join(lines), "run": run, "servers": servers}


def _check(case: dict, when: str) -> None:
    out, run = case["out"], case["run"]
    assert case["rc"] == ExitCode.INTERRUPTED, out[-3000:]
    assert not [p for p in case["servers"] if alive(p)], "a server outlived the interrupted run"
    if when == "COMPLETE":  # the run had finished: it stays COMPLETE, the report is what is missing
        assert (run / results.COMPLETE_MARKER).exists()
        assert "report interrupted" in out
        return
    assert (run / results.INTERRUPTED_MARKER).exists() and not (run / results.COMPLETE_MARKER).exists()
    assert "resume:  harness run" in out and f"--resume {run}" in out
    verdict = json.loads((run / "verdict.json").read_text())
    assert verdict["outcome"] == "INTERRUPTED" and verdict["exit_code"] == 130
    for status_file in run.glob("*/status.json"):
        state = json.loads(status_file.read_text())["state"]
        assert state != "running", f"{status_file} left running"
    for requests in run.glob("*/requests.jsonl"):  # the signal never became a request's error
        errors = [json.loads(line)["error"] for line in requests.read_text().splitlines() if line.strip()]
        assert not [e for e in errors if e and ("Interrupt" in e or "SIG" in e or "signal" in e.lower())]


@pytest.mark.parametrize("index", sorted(QUICK), ids=lambda i: ALL_CASES[i][0].replace(" ", "_"))
def test_signal_at_an_instant(tmp_path, index):
    when, delay_s, sig = ALL_CASES[index]
    _check(_run_case(tmp_path, when, delay_s, sig), when)


@pytest.mark.slow
@pytest.mark.parametrize(
    "index",
    [i for i in range(len(ALL_CASES)) if i not in QUICK],
    ids=lambda i: f"{i}-{ALL_CASES[i][0].replace(' ', '_')}+{ALL_CASES[i][1]}s",
)
def test_signal_at_every_instant(tmp_path, index):
    when, delay_s, sig = ALL_CASES[index]
    _check(_run_case(tmp_path, when, delay_s, sig), when)


# ----------------------------------------------------------------------------- rows on a signal

CLOCKED = """\
name: signals
server:
  backend: sim
  model_path: {model}
  args: {{--max-total-tokens: 65536}}
  startup_timeout_s: 30
  request_timeout_s: 30
  liveness_idle_s: 0.5
  sim: {{time_scale: 0.02, startup_s: 0.3}}
variants:
  - name: off
workloads:
{workload}
sampling: {{interval_s: 0.5, idle_window_s: 0.5, gpu: false, cooldown_timeout_s: 2}}
"""
# kind → (its workload block, the phase text of a progress line inside its load point)
CLOCKED_KINDS = {
    "open_loop": (
        "  - {kind: open_loop, rate: 40, duration_s: 30, prompt_tokens: 64, output_tokens: 4, warmup_s: 0}",
        "open_loop/rate",
    ),
    "replay": (
        f"  - {{kind: dataset_replay, format: mooncake, path: {DATASETS / 'mooncake_mini.jsonl'}, "
        f"tokenizer: {DATASETS / 'tokenizer.json'}, arrivals: trace, speed: 0.5, max_prompt_tokens: 2000, max_output_tokens: 4}}",
        "dataset_replay/trace",
    ),
    "chat_clients": (
        "  - {kind: multi_turn_clients, clients: 4, rounds: 200, first_turn_tokens: 64, turn_tokens: 16,"
        " output_tokens: 4, think_time_s: 0.05}",
        "multi_turn_clients/rounds",
    ),
}
# (kind, seconds into its point): the default suite runs one; -m slow the rest
ROW_INSTANTS = [(k, d) for k in CLOCKED_KINDS for d in (0.4, 1.7)]
ROW_QUICK = {1}


def _rows_case(tmp_path: Path, kind: str, delay_s: float) -> None:
    block, phase = CLOCKED_KINDS[kind]
    scenario = tmp_path / "s.yaml"
    scenario.write_text(CLOCKED.format(model=MODELS / "llama-tiny", workload=block))
    results_dir = tmp_path / "results"
    proc = start_harness("run", scenario, "--results-dir", results_dir, "--no-report", cwd=tmp_path)
    lines: list[str] = []
    seen = threading.Event()

    def read() -> None:
        for line in proc.stdout:
            lines.append(line)
            if phase in line:
                seen.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    if not seen.wait(180):
        proc.kill()
        pytest.fail(f"never reached {phase!r}: {''.join(lines)[-2000:]}")
    time.sleep(delay_s)
    proc.send_signal(signal.SIGTERM)
    rc = proc.wait(timeout=90)
    reader.join(timeout=5)
    out = "".join(lines)
    assert rc == ExitCode.INTERRUPTED, out[-3000:]
    (run,) = results_dir.glob("signals/*")
    rows = [json.loads(x) for x in (run / "off" / "requests.jsonl").read_text().splitlines() if x.strip()]
    point = [
        r
        for r in rows
        if r["workload"] == kind.replace("replay", "dataset_replay").replace("chat_clients", "multi_turn_clients")
    ]
    answered = [r for r in point if r["error"] is None and r["done_ns"] is not None]
    # the point was cut short, but every request it had answered is a row (there were none before)
    assert answered, f"no row of the interrupted {kind} point reached requests.jsonl: {out[-1500:]}"
    keys = [(r["phase"], r["index"], r.get("repeat")) for r in point]
    assert len(keys) == len(set(keys)), "a row written twice"


@pytest.mark.parametrize("index", sorted(ROW_QUICK), ids=lambda i: f"{ROW_INSTANTS[i][0]}+{ROW_INSTANTS[i][1]}s")
def test_sigterm_inside_a_clocked_point_keeps_its_rows(tmp_path, index):
    _rows_case(tmp_path, *ROW_INSTANTS[index])


@pytest.mark.slow
@pytest.mark.parametrize(
    "index",
    [i for i in range(len(ROW_INSTANTS)) if i not in ROW_QUICK],
    ids=lambda i: f"{ROW_INSTANTS[i][0]}+{ROW_INSTANTS[i][1]}s",
)
def test_sigterm_at_many_instants_inside_clocked_points_keeps_their_rows(tmp_path, index):
    _rows_case(tmp_path, *ROW_INSTANTS[index])


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_a_signal_outside_a_run_exits_130(tmp_path, sig):
    """SIGTERM or SIGHUP while a command that is not a run waits (here validate, reading a
    scenario from a FIFO nobody writes to) killed the harness: exit -15, no line. Now 130."""
    fifo = tmp_path / "scenario.yaml"
    os.mkfifo(fifo)
    proc = subprocess.Popen(harness_command("validate", fifo), env=harness_env(), stderr=subprocess.PIPE, text=True)
    fd = None
    try:
        while fd is None and proc.poll() is None:  # the harness has the FIFO open for reading
            try:
                fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
            except OSError as exc:
                if exc.errno != errno.ENXIO:
                    raise
                time.sleep(0.05)
        time.sleep(0.3)  # now blocked reading it
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
    finally:
        if fd is not None:
            os.close(fd)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err
    assert "Traceback" not in err


# a console script as pip writes it for `[project.scripts] harness = "MODULE:FUNC"`, with an import
# hook that sends SIGTERM the instant `harness.cli` starts being imported (a deterministic instant)
CONSOLE_SCRIPT = """\
import importlib.abc, os, signal, sys

class SigtermOnImport(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "harness.cli":
            os.kill(os.getpid(), signal.SIGTERM)
        return None

sys.meta_path.insert(0, SigtermOnImport())
from {module} import {func}
sys.argv[0] = "harness"
sys.exit({func}())
"""


def test_the_installed_command_exits_130_on_sigterm_while_the_cli_is_imported(tmp_path):
    """The installed `harness` script was `harness.cli:main`: it imported the whole CLI before any
    handler was set, and a SIGTERM then (a `docker stop` right after the start) ended it -15."""
    import tomllib

    entry = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())["project"]["scripts"]["harness"]
    module, func = entry.split(":")
    script = tmp_path / "harness"
    script.write_text(CONSOLE_SCRIPT.format(module=module, func=func))
    proc = subprocess.run(
        [sys.executable, str(script), "--version"], env=harness_env(), capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == ExitCode.INTERRUPTED, (entry, proc.returncode, proc.stderr[-2000:])
    assert "Traceback" not in proc.stderr


def _ignoring(*sigs):
    def preexec() -> None:  # as a non-interactive shell starts `harness &` (SIGINT), or nohup (SIGHUP)
        for sig in sigs:
            signal.signal(sig, signal.SIG_IGN)

    return preexec


def test_a_signal_set_to_be_ignored_stays_ignored_during_the_run(tmp_path):
    """`harness run ... &` from a script starts with SIGINT ignored, `nohup harness run` with SIGHUP
    ignored: the run's own handlers took both anyway once a run began (a hang-up ended a nohup'd
    night with 130, while the same SIGHUP a moment earlier was ignored). Now an ignored signal stays
    ignored all along, and SIGTERM still ends the run with 130."""
    scenario = tmp_path / "s.yaml"
    scenario.write_text(CLOCKED.format(model=MODELS / "llama-tiny", workload=CLOCKED_KINDS["open_loop"][0]))
    results_dir = tmp_path / "results"
    proc = subprocess.Popen(
        harness_command("run", scenario, "--results-dir", results_dir, "--no-report"),
        cwd=tmp_path,
        env=harness_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        preexec_fn=_ignoring(signal.SIGINT, signal.SIGHUP),
    )
    lines: list[str] = []
    seen = threading.Event()

    def read() -> None:
        for line in proc.stdout:
            lines.append(line)
            if "open_loop/rate" in line:
                seen.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    if not seen.wait(180):
        proc.kill()
        pytest.fail(f"never reached the load point: {''.join(lines)[-2000:]}")
    for sig in (signal.SIGHUP, signal.SIGINT):
        proc.send_signal(sig)
        time.sleep(0.5)
        assert proc.poll() is None, f"{sig.name} (ignored) ended the run: {''.join(lines)[-2000:]}"
    proc.send_signal(signal.SIGTERM)
    rc = proc.wait(timeout=90)
    reader.join(timeout=5)
    assert rc == ExitCode.INTERRUPTED, "".join(lines)[-2000:]
    assert "SIGTERM" in "".join(lines)

"""Shared kit for the shard/merge/resume tests: a tiny simulated scenario that runs in about a
second per variant, a `harness` launcher for subprocesses, and clean-up of orphaned servers.

The launcher is the real CLI (`harness.cli.main`); the scenario cuts the post-run liveness idle
(`server.liveness_idle_s`) to 0.3 s, so that end-to-end runs stay fast.
"""

from __future__ import annotations

import collections
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

REPO = Path(__file__).resolve().parents[1]
MODEL = REPO / "scenarios" / "models" / "llama-tiny"

SHIM = "import sys; from harness.cli import main; sys.exit(main(sys.argv[1:]))"


def scenario_text(n_on: int = 3, quality: bool = False, max_total_tokens: int = 8192, name: str = "tiny",
                  reverse: bool = False) -> str:
    variants = ['  - name: "off"'] + [f"  - name: on-r{r}\n    hicache: {{ratio: {r}}}" for r in range(2, 2 + n_on)]
    if reverse:
        variants.reverse()
    q = """quality:
  enabled: true
  baseline_variant: "off"
  control: false
  tasks: [needle]
  lengths: [1024]
  samples_per_task: 1
  max_new_tokens: 4
  reasks: 1
  mode: token_ids
""" if quality else ""
    return f"""name: {name}
server:
  backend: sim
  model_path: {MODEL}
  args:
    --max-total-tokens: {max_total_tokens}
    --skip-tokenizer-init: true
  startup_timeout_s: 30
  startup_retries: 0
  request_timeout_s: 30
  liveness_idle_s: 0.3
  sim:
    time_scale: 0.01
    startup_s: 0
variants:
{chr(10).join(variants)}
workloads:
  - kind: cold_prefill
    n: 2
    prompt_tokens: 256
sampling:
  enabled: false
  cooldown_timeout_s: 1
preflight:
  mode: "off"
{q}"""


def write_scenario(dir_: Path, **kw) -> Path:
    path = Path(dir_) / f"{kw.get('name', 'tiny')}.yaml"
    path.write_text(scenario_text(**kw))
    return path


def harness_argv(*args: str) -> list[str]:
    return [sys.executable, "-c", SHIM, *map(str, args)]


def env_with_repo(extra: dict | None = None) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    env.update(extra or {})
    return env


def run_harness(*args: str, env: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(harness_argv(*args), cwd=REPO, env=env_with_repo(env), capture_output=True, text=True,
                          timeout=timeout)


def start_harness(*args: str, env: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen(harness_argv(*args), cwd=REPO, env=env_with_repo(env), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def harness_bin(dir_: Path) -> Path:
    """A `harness` executable (for scripts that call it by name) that runs the fast launcher."""
    b = Path(dir_) / "bin"
    b.mkdir(exist_ok=True)
    exe = b / "harness"
    exe.write_text(f"#!/bin/sh\nPYTHONPATH={REPO}${{PYTHONPATH:+:$PYTHONPATH}} exec {sys.executable} -c '{SHIM}' \"$@\"\n")
    exe.chmod(0o755)
    return b


def run_dirs(results_dir: Path) -> list[Path]:
    return sorted(p.parent for p in Path(results_dir).glob("*/*/manifest.json"))


def only_run(results_dir: Path) -> Path:
    runs = run_dirs(results_dir)
    assert len(runs) == 1, runs
    return runs[0]


def status_state(run_dir: Path, variant: str) -> str | None:
    try:
        return json.loads((run_dir / variant / "status.json").read_text())["state"]
    except (OSError, ValueError, KeyError):
        return None


def wait_for(pred, timeout: float = 60.0, what: str = "condition") -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def wait_state(results_dir: Path, variant: str, state: str, proc: subprocess.Popen | None = None,
               timeout: float = 60.0) -> Path:
    """Wait until some run under ``results_dir`` has ``variant`` in ``state``; return that run."""
    found: list[Path] = []

    def pred() -> bool:
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"harness exited ({proc.returncode}) before {variant} was {state}: "
                                 f"{proc.stdout.read() if proc.stdout else ''}")
        for r in run_dirs(results_dir):
            if status_state(r, variant) == state:
                found.append(r)
                return True
        return False

    wait_for(pred, timeout, f"{variant} {state}")
    return found[0]


def kill_hard(proc: subprocess.Popen) -> None:
    """SIGKILL the harness like the OOM killer would, then reap the servers it orphaned (they run
    in their own sessions), each by its own id."""
    try:
        children = psutil.Process(proc.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        children = []
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    for c in children:
        try:
            os.killpg(c.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            try:
                c.kill()
            except psutil.NoSuchProcess:
                pass


def request_rows(run_dir: Path) -> dict[str, list[dict]]:
    """variant -> request rows, from the variant folders the manifest names."""
    from harness import results

    run = results.load_run(run_dir)
    return {v.name: run.requests(v.name) for v in run.variants}


def row_key(row: dict) -> tuple:
    return (row["variant"], row["workload"], row["phase"], row["repeat"], row["index"], row["warmup"])


def assert_no_duplicate_rows(rows: dict[str, list[dict]]) -> None:
    for name, rs in rows.items():
        dup = [k for k, n in collections.Counter(map(row_key, rs)).items() if n > 1]
        assert not dup, f"{name}: duplicate request rows {dup}"


def shape(run_dir: Path) -> dict[str, tuple[str, int]]:
    """variant -> (state, number of request rows): what must equal an uninterrupted run's."""
    from harness import results

    run = results.load_run(run_dir)
    rows = request_rows(run_dir)
    assert_no_duplicate_rows(rows)
    return {v.name: (v.status.get("state"), len(rows[v.name])) for v in run.variants}


def reap_orphans(root: Path) -> list[int]:
    """Simulated servers started by runs under ``root`` that are still alive (each server.log names
    its pid): kill them by id and return their pids, so a test can fail on a leak (P15)."""
    import re

    leaked = []
    for log in Path(root).rglob("server*.log"):
        for m in re.finditer(r"Started server process \[(\d+)\]", log.read_text(errors="replace")):
            pid = int(m.group(1))
            try:
                p = psutil.Process(pid)
                if "harness.sim" in " ".join(p.cmdline()):
                    p.kill()
                    leaked.append(pid)
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
    return leaked


# ------------------------------------------------------------------------------ the kit's own test

def test_tiny_scenario_validates(tmp_path):
    from harness.scenario import load_scenario

    s = load_scenario(write_scenario(tmp_path, quality=True))
    assert [v.name for v in s.expand_variants()] == ["off", "on-r2", "on-r3", "on-r4"]
    assert s.quality.baseline_variant == "off"


@pytest.fixture(autouse=True)
def no_leaked_servers(tmp_path):
    """Imported by the shard/merge/resume tests: each fails if a simulated server outlived its run."""
    yield
    assert reap_orphans(tmp_path) == [], "a simulated server outlived its harness run"

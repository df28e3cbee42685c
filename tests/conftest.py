"""Shared fixtures and helpers of the test suite: one home, test modules never import each other
(tests/rules/test_suite_rules.py fails when one does). Helper modules (not tests) live next to it:
`tests/factories.py` builds records and run folders, `tests/hostile_server.py` is a misbehaving server,
`tests/session_reaper.py` (started by ``pytest_configure``) kills what a killed pytest left running.

Import the helpers with ``from tests.conftest import ...`` (``tests`` is a package, so this is the
very module pytest loaded as the conftest, not a second copy):

* scenarios: ``write_scenario(dir, text)`` writes a scenario next to a copy of the llama-tiny model
  (``model_path: models/llama-tiny`` in the text resolves to it); ``sim_scenario(variants, ...)``
  and ``tiny_scenario(n_on=..., quality=...)`` build fast simulated scenarios' text;
  ``write_sim_scenario(dir, variants, workloads, **options)`` writes a ``sim_scenario``.
* the CLI: ``run_harness(*args)`` / ``start_harness(*args)`` run ``python -m harness`` in a
  subprocess (this checkout on PYTHONPATH, cwd the repository), to completion or in the background;
  ``harness_bin(dir)`` is a ``harness`` executable for scripts that call it by name.
* running: ``run_in_process(scenario_path, tmp_path)`` (the real runner in this process).
* run folders: ``run_dirs``, ``only_run``, ``status_state``, ``wait_for``, ``wait_state``, ``shape``.
* processes: ``alive(pid)``, ``session_alive(sid)`` (a server's tree), ``kill_hard`` (SIGKILL the harness like the OOM killer, reap its servers),
  ``reap_orphans`` (simulated servers of a test still alive).

Fixtures: ``golden_run`` (copy a committed run folder), ``tiny_quality_scenario`` and
``tiny_quality_reference`` (that scenario run once, uninterrupted: session-wide), ``no_leaked_servers`` (autouse: no process
the test started, and no simulated server logged under its ``tmp_path``, outlives the test), and
pytest's ``pytester``.
"""

from __future__ import annotations

import collections
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from harness.run.runner import RunOptions, RunOutcome, run_scenario
from harness.scenario import load_scenario
from harness.sim.cache import TwoTierCache
from harness.sim.cost import CostModel
from harness.sim.engine import Engine, EngineConfig
from harness.sim.metrics import SimMetrics
from harness.sim.tokens import TokenModel
from harness.store import run_folder

pytest_plugins = ["pytester"]  # tests/rules/test_suite_rules.py runs the suite's own fixtures in a nested session

REPO = Path(__file__).resolve().parents[1]
MODELS = REPO / "scenarios" / "models"
GOLDEN_RUNS = Path(__file__).parent / "golden" / "runs"
GOLDEN_EXPECTED = Path(__file__).parent / "golden" / "expected"

# How long a simulated server may take to go after its test ended (its harness stops the tree with
# SIGTERM, then SIGKILL; a loaded machine is slow at both) before it counts as leaked.
SERVER_STOP_GRACE_S = 20.0


# ------------------------------------------------------------------------------------ scenarios


def write_scenario(dir_: Path, text: str, name: str | None = None) -> Path:
    """Write scenario ``text`` to ``dir_/<name>.yaml`` (``name`` defaults to the scenario's own
    ``name:``) next to a copy of ``scenarios/models/llama-tiny`` at ``dir_/models/llama-tiny``: the
    simulator sizes its pools from a readable config.json, and ``model_path: models/llama-tiny``
    resolves next to the scenario file. Returns the file's path."""
    dir_ = Path(dir_)
    dir_.mkdir(parents=True, exist_ok=True)
    model = dir_ / "models" / "llama-tiny"
    if not model.exists():
        shutil.copytree(MODELS / "llama-tiny", model)
    if name is None:
        m = re.search(r"^name:\s*['\"]?([\w.-]+)", text, re.M)
        name = m.group(1) if m else "scenario"
    path = dir_ / f"{name}.yaml"
    path.write_text(text)
    return path


def sim_scenario(
    variants: str,
    workloads: str = "",
    *,
    name: str = "lifecycle",
    retries: int = 0,
    timeout_s: float = 20,
    max_total_tokens: int | str = 4096,
    liveness_idle_s: float = 0.1,
    time_scale: float = 0.05,
    startup_s: float = 0.05,
    preflight: str = "warn",
    request_timeout_s: float = 20,
    watchdog: str | None = None,
    extra: str = "",
) -> str:
    """A simulated scenario's text: ``variants`` and ``workloads`` are YAML list items (dedented
    here), ``watchdog`` the flow-style ``server.watchdog`` mapping, ``extra`` is appended as
    top-level YAML. The defaults keep a variant to about a second: a 20x faster cost model, a 0.1 s
    post-run liveness idle (a test of a death while idle sets its own), sampling off, a 16 GiB host."""
    text = (
        textwrap.dedent(f"""\
        name: {name}
        server:
          backend: sim
          model_path: models/llama-tiny
          args:
            --max-total-tokens: {max_total_tokens}
            --skip-tokenizer-init: true
          startup_timeout_s: {timeout_s}
          startup_retries: {retries}
          request_timeout_s: {request_timeout_s}
          liveness_idle_s: {liveness_idle_s}
          sim: {{time_scale: {time_scale}, startup_s: {startup_s}, host_mem_scale: 0.001, mem_available_gib: 16}}
        """)
        + (f"  watchdog: {watchdog}\n" if watchdog else "")
        + textwrap.dedent(f"""\
        sampling: {{enabled: false, cooldown_timeout_s: 1}}
        preflight: {{mode: "{preflight}"}}
        """)
        + "variants:\n"
        + textwrap.indent(textwrap.dedent(variants), "  ")
    )
    if workloads:
        text += "workloads:\n" + textwrap.indent(textwrap.dedent(workloads), "  ")
    return text + textwrap.dedent(extra)


def write_sim_scenario(dir_: Path, variants: str, workloads: str = "", **options: Any) -> Path:
    """``write_scenario(dir_, sim_scenario(variants, workloads, **options))``: the file is
    ``dir_/<name>.yaml`` (``name`` defaults to ``lifecycle``)."""
    return write_scenario(dir_, sim_scenario(variants, workloads, **options))


TINY_QUALITY = """\
quality:
  enabled: true
  baseline_variant: "off"
  control: false
  tasks: [needle]
  lengths: [1024]
  samples_per_task: 1
  max_new_tokens: 4
  reasks: 1
  mode: token_ids
"""


def tiny_scenario(
    n_on: int = 3, quality: bool = False, max_total_tokens: int | str = 8192, name: str = "tiny", reverse: bool = False
) -> str:
    """The shard/merge/resume scenario: ``off`` then ``on-r2`` .. ``on-r<n_on+1>`` (HiCache ratio
    r), two cold 256-token prompts each, optionally a one-sample quality arm; about a second a
    variant on an idle machine."""
    variants = ['- name: "off"'] + [f"- name: on-r{r}\n  hicache: {{ratio: {r}}}" for r in range(2, 2 + n_on)]
    if reverse:
        variants.reverse()
    return sim_scenario(
        "\n".join(variants) + "\n",
        "- kind: cold_prefill\n  n: 2\n  prompt_tokens: 256\n",
        name=name,
        timeout_s=30,
        max_total_tokens=max_total_tokens,
        time_scale=0.01,
        startup_s=0,
        preflight="off",
        extra=TINY_QUALITY if quality else "",
    )


# ------------------------------------------------------------------------------------- the CLI


def harness_command(*args: object) -> list[str]:
    """``python -m harness ARGS``, as a user runs it."""
    return [sys.executable, "-m", "harness", *map(str, args)]


def harness_env(extra: dict | None = None) -> dict:
    """This process's environment with this checkout first on PYTHONPATH, plus ``extra``."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    env.update(extra or {})
    return env


def run_harness(
    *args: object, env: dict | None = None, cwd: Path = REPO, timeout: float = 300
) -> subprocess.CompletedProcess:
    """Run ``harness ARGS`` to completion in a subprocess; stdout and stderr captured apart.
    ``timeout`` only keeps a hung run from hanging the suite."""
    return subprocess.run(
        harness_command(*args), cwd=cwd, env=harness_env(env), capture_output=True, text=True, timeout=timeout
    )


def start_harness(*args: object, env: dict | None = None, cwd: Path = REPO) -> subprocess.Popen:
    """Start ``harness ARGS`` in the background; stdout and stderr together on ``proc.stdout``."""
    return subprocess.Popen(
        harness_command(*args),
        cwd=cwd,
        env=harness_env(env),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def harness_bin(dir_: Path) -> Path:
    """A folder holding a ``harness`` executable (for scripts that call it by name) that runs
    this checkout's harness; put it first on PATH."""
    b = Path(dir_) / "bin"
    b.mkdir(exist_ok=True)
    exe = b / "harness"
    exe.write_text(f'#!/bin/sh\nPYTHONPATH={REPO}${{PYTHONPATH:+:$PYTHONPATH}} exec {sys.executable} -m harness "$@"\n')
    exe.chmod(0o755)
    return b


def run_in_process(scenario_path: Path, tmp_path: Path) -> tuple[RunOutcome, run_folder.LoadedRun]:
    """Run a scenario file through the real runner in this process (results under
    ``tmp_path/results``, no report, no live progress); return the outcome and the loaded run."""
    outcome = run_scenario(
        load_scenario(scenario_path),
        RunOptions(results_dir=Path(tmp_path) / "results", live_progress=False),
    )
    return outcome, run_folder.load_run(outcome.run_dir)


# ----------------------------------------------------------------------------------- run folders


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


def wait_for(pred, timeout: float = 120.0, what: str = "condition") -> None:
    """Poll ``pred`` until true. ``timeout`` is a hang guard, not a promise under test."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def wait_state(
    results_dir: Path, variant: str, state: str, proc: subprocess.Popen | None = None, timeout: float = 120.0
) -> Path:
    """Wait until some run under ``results_dir`` has ``variant`` in ``state``; return that run."""
    found: list[Path] = []

    def pred() -> bool:
        if proc is not None and proc.poll() is not None:
            raise AssertionError(
                f"harness exited ({proc.returncode}) before {variant} was {state}: "
                f"{proc.stdout.read() if proc.stdout else ''}"
            )
        for r in run_dirs(results_dir):
            if status_state(r, variant) == state:
                found.append(r)
                return True
        return False

    wait_for(pred, timeout, f"{variant} {state}")
    return found[0]


def request_rows(run_dir: Path) -> dict[str, list[dict]]:
    """variant -> request rows, from the variant folders the manifest names."""
    run = run_folder.load_run(run_dir)
    return {v.name: run.requests(v.name) for v in run.variants}


def row_key(row: dict) -> tuple:
    return (row["variant"], row["workload"], row["phase"], row["repeat"], row["index"], row["warmup"])


def assert_no_duplicate_rows(rows: dict[str, list[dict]]) -> None:
    for name, rs in rows.items():
        dup = [k for k, n in collections.Counter(map(row_key, rs)).items() if n > 1]
        assert not dup, f"{name}: duplicate request rows {dup}"


def shape(run_dir: Path) -> dict[str, tuple[str, int]]:
    """variant -> (state, number of request rows): what must equal an uninterrupted run's."""
    run = run_folder.load_run(run_dir)
    rows = request_rows(run_dir)
    assert_no_duplicate_rows(rows)
    return {v.name: (v.status.state, len(rows[v.name])) for v in run.variants}


# ------------------------------------------------------------------------------------- processes


def kill_hard(proc: subprocess.Popen) -> None:
    """SIGKILL the harness like the OOM killer would, then reap the servers it orphaned (they run
    in their own sessions), each by its own id. The harness is stopped (SIGSTOP) before its
    children are listed, so it cannot start a server between the listing and the kill."""
    try:
        proc.send_signal(signal.SIGSTOP)
        children = psutil.Process(proc.pid).children(recursive=True)
    except (ProcessLookupError, psutil.NoSuchProcess):
        children = []
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)
    for c in children:
        try:
            os.killpg(c.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            try:
                c.kill()
            except psutil.NoSuchProcess:
                pass


def alive(pid: int) -> bool:
    """The process exists and is not a zombie."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def session_alive(sid: int) -> list[int]:
    """Pids of the live (not zombie) processes of session ``sid`` (a server's tree)."""
    out = []
    for p in psutil.process_iter(["pid"]):
        try:
            if os.getsid(p.pid) == sid and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p.pid)
        except (OSError, psutil.Error):
            continue
    return out


def _server_pids(root: Path) -> set[int]:
    """Pids of the simulated servers started under ``root``: uvicorn's start line in each server
    log, and the identity each status.json records."""
    pids: set[int] = set()
    for log in Path(root).rglob("server*.log"):
        pids.update(
            int(m.group(1)) for m in re.finditer(r"Started server process \[(\d+)\]", log.read_text(errors="replace"))
        )
    for status in Path(root).rglob("status.json"):
        try:
            pid = json.loads(status.read_text()).get("server", {}).get("pid")
        except (OSError, ValueError, AttributeError):
            continue
        if isinstance(pid, int):
            pids.add(pid)
    return pids


def _live_sims(pids: set[int]) -> list[psutil.Process]:
    live = []
    for pid in pids:
        try:
            p = psutil.Process(pid)
            if p.status() != psutil.STATUS_ZOMBIE and "harness.sim" in " ".join(p.cmdline()):
                live.append(p)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return live


def _started_by(nodeid: str, pids: set[int]) -> list[psutil.Process]:
    """Of ``pids``, the live processes this pytest process started (directly or through a harness
    run) while ``nodeid``'s test function ran: pytest sets PYTEST_CURRENT_TEST, and the session
    mark below, in the environment every child inherits."""
    want = f"{nodeid} (call)"
    found = []
    for pid in pids:
        try:
            p = psutil.Process(pid)
            env = p.environ()
            if (
                env.get(_SESSION_VAR) == _SESSION
                and env.get("PYTEST_CURRENT_TEST") == want
                and p.status() != psutil.STATUS_ZOMBIE
            ):
                found.append(p)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


def _kill_group(p: psutil.Process) -> None:
    """SIGKILL ``p``'s process group when it leads one of its own (a server's session), else ``p``."""
    try:
        pgid = os.getpgid(p.pid)
        if pgid == p.pid and pgid != os.getpgrp():
            os.killpg(pgid, signal.SIGKILL)
        else:
            p.kill()
    except (ProcessLookupError, PermissionError, psutil.NoSuchProcess):
        pass


def _reap(live: list[psutil.Process], grace_s: float) -> list[int]:
    """Wait up to ``grace_s`` for ``live`` to exit; kill the survivors; return their pids."""
    if live and grace_s > 0:
        _, live = psutil.wait_procs(live, timeout=grace_s)
    survivors = []
    for p in live:
        try:
            if not p.is_running() or p.status() == psutil.STATUS_ZOMBIE:
                continue
        except psutil.NoSuchProcess:
            continue
        _kill_group(p)
        survivors.append(p.pid)
    return sorted(survivors)


def reap_orphans(root: Path, grace_s: float = 0.0) -> list[int]:
    """Simulated servers started under ``root`` (their logs are there) still alive after
    ``grace_s`` (time for a harness that is stopping its tree to finish): kill each one's process
    group by id and return their pids, so that a test can fail on a leak (P15) without leaving
    the leak to the next test."""
    return _reap(_live_sims(_server_pids(root)), grace_s)


# Marks this session's children (PYTEST_CURRENT_TEST alone would also match another session
# running the same test on this machine at the same time).
_SESSION_VAR = "HARNESS_TEST_SESSION"
_SESSION = f"{os.getpid()}-{time.time_ns()}"
os.environ[_SESSION_VAR] = _SESSION
_reaper: list[tuple[Any, subprocess.Popen]] = []  # (the config that started it, the reaper)


def pytest_configure(config):
    """Start the session's reaper (tests/session_reaper.py): when this pytest is gone, however it
    ended (a time limit's SIGTERM or a SIGKILL runs no finalizer), it kills what carries the
    session's mark, so that no simulated server outlives a killed pytest."""
    if _reaper or sys.platform != "linux":
        return
    reaper = subprocess.Popen(
        [sys.executable, str(Path(__file__).with_name("session_reaper.py")), _SESSION, str(os.getpid())],
        stdin=subprocess.PIPE,
        start_new_session=True,  # a signal to pytest's process group does not reach it
    )
    _reaper.append((config, reaper))


def pytest_unconfigure(config):
    """pytest ends: the reaper sweeps what is left (a leak: the per-test check names it first)."""
    if _reaper and _reaper[0][0] is config:  # not an inner pytest run in this process (pytester)
        _, reaper = _reaper.pop()
        if reaper.stdin is not None:
            reaper.stdin.close()
        reaper.wait(timeout=30)


# -------------------------------------------------------------------------------------- fixtures


@pytest.fixture(autouse=True)
def no_leaked_servers(request):
    """No process a test started outlives it: neither a process started while the test function
    ran (a harness run, a simulated server, a server's own child) nor a simulated server whose
    log is under the test's ``tmp_path``. One still stopping gets ``SERVER_STOP_GRACE_S``; one
    alive after that is killed, then the test fails. Cheap: the pids that appeared during the test
    are the only ones read."""
    root = request.getfixturevalue("tmp_path") if "tmp_path" in request.fixturenames else None
    before = set(psutil.pids())
    yield
    new = set(psutil.pids()) - before
    live = {p.pid: p for p in _started_by(request.node.nodeid, new)}
    if root is not None:
        live.update((p.pid, p) for p in _live_sims(_server_pids(root)))
    leaked = _reap(list(live.values()), SERVER_STOP_GRACE_S)  # read here: a test of the fixture shortens it
    assert leaked == [], f"process(es) {leaked} outlived the test (killed now)"


@pytest.fixture(scope="session")
def tiny_quality_scenario(tmp_path_factory) -> Path:
    """``tiny_scenario(n_on=3, quality=True)`` written once for the session (never edited)."""
    return write_scenario(tmp_path_factory.mktemp("tiny"), tiny_scenario(n_on=3, quality=True))


@pytest.fixture(scope="session")
def tiny_quality_reference(tiny_quality_scenario, tmp_path_factory) -> Path:
    """One uninterrupted, unsharded run of ``tiny_quality_scenario``, once for the session: what an
    interrupted-and-resumed or a sharded-and-merged run must equal (read it, never write to it)."""
    out = tmp_path_factory.mktemp("tiny_reference")
    r = run_harness("run", tiny_quality_scenario, "--results-dir", out, "--no-report")
    assert r.returncode == 0, r.stdout + r.stderr
    return only_run(out)


@pytest.fixture
def golden_run(tmp_path):
    """Copy a committed golden run folder (tests/golden/runs/<name>: healthy, regressed, merged,
    interrupted) into a temporary results tree and return its path: tests read real run files
    instead of starting servers, and may write next to them (report, comparison.json)."""

    def copy(name: str) -> Path:
        dst = tmp_path / "results" / "golden" / name
        shutil.copytree(GOLDEN_RUNS / name, dst)
        return dst

    return copy


# ------------------------------------------------------------------------- replaying the order


def pytest_terminal_summary(terminalreporter, config):
    """The random order's seed, printed at every verbosity (README's command runs with -q, which
    hides pytest-randomly's header line): the line to replay this run's order."""
    if not config.pluginmanager.hasplugin("randomly") or hasattr(config, "workerinput"):
        return
    seed = getattr(config.option, "randomly_seed", None)
    if isinstance(seed, int):
        terminalreporter.write_line(f"random order: replay it with --randomly-seed={seed}")


SIM_STEP_S = 0.01  # every batch of `make_sim_engine`'s engine: 10 ms modelled


def make_sim_engine() -> Engine:
    """An in-process simulated scheduler on a 4,096-token pool, every batch ``SIM_STEP_S``."""
    cfg = EngineConfig(
        max_total_tokens=4096,
        chunked_prefill_size=8192,
        max_running_requests=8,
        context_len=4096,
        kv_bytes_per_token=1024,
        mamba_bytes_per_slot=0,
        hybrid=False,
        deterministic=True,
        faults={},
        random_seed=0,
    )
    cost = CostModel(
        prefill_tok_s=1e9,
        prefill_overhead_s=SIM_STEP_S,
        decode_base_s=SIM_STEP_S,
        decode_per_req_s=0.0,
        h2d_bytes_s=1e12,
        d2h_bytes_s=1e12,
        hbm_bytes_s=1e15,
        backup_visible=0.0,
        time_scale=1.0,
    )
    return Engine(cfg, TwoTierCache(4096, 0), cost, TokenModel(32000), SimMetrics("m"))

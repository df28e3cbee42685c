"""Start, watch and stop one sglang (or simulated) server process tree.

* The server runs in its own process session (``start_new_session``) with stdout+stderr going to
  a log file — never an undrained PIPE, which would block sglang once the pipe fills.
* Readiness is ``GET /health_generate`` (it runs one token through the scheduler), with a
  liveness check of the process before and after each probe, so a server that exits — with any
  exit code — is noticed within one poll rather than at the timeout.
* Stopping takes a snapshot of the whole tree (descendants, plus every process still in the
  server's session: a launcher's child that outlived it is found there), sends SIGTERM first (so
  sglang frees pinned host memory and GPU memory cleanly) and SIGCONT (a stopped process acts on
  the SIGTERM only once continued), waits a bounded time, sends SIGKILL to survivors, and
  verifies that nothing of the snapshot is alive.
* Every server carries a marker in its environment (``HICACHE_HARNESS_SERVER``: the harness
  process, run folder and variant that started it), inherited by everything it spawns, from
  before its first instruction. A later run finds servers whose harness is gone (SIGKILLed, OOM
  killed) by that marker — even one started an instant before the harness died, before
  status.json could name it — and stops them (:func:`clear_orphans`), or refuses to start while
  another run's server holds one of its GPUs.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from harness.core.errors import BadInput
from harness.core.sglang_source import source_package_dir
from harness.host import nvml
from harness.server import logscan
from harness.server.info import NoAnswer, get_status
from harness.sim.args import SOURCE_ENV as SIM_SOURCE_ENV

log = logging.getLogger(__name__)

SGLANG_MODULE = "sglang.launch_server"
SIM_MODULE = "harness.sim"
MARKER_ENV = "HICACHE_HARNESS_SERVER"  # in every server's environment: who started it (JSON)


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free a moment ago on ``host``."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def port_is_bindable(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
        return True


@dataclass(frozen=True)
class LaunchSpec:
    """Everything needed to start one server: the exact argv and the environment additions."""

    argv: tuple[str, ...]
    env_overrides: Mapping[str, str]
    host: str
    port: int
    simulated: bool

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def full_env(self, base: Mapping[str, str] | None = None) -> dict[str, str]:
        env = dict(os.environ if base is None else base)
        env.update(self.env_overrides)
        return env


def _fmt(value) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def repo_root() -> Path:
    """The folder holding the ``harness`` package (put on the simulator's PYTHONPATH)."""
    return Path(__file__).resolve().parents[2]


def build_launch_spec(variant, port: int, *, enable_metrics: bool = False) -> LaunchSpec:
    """The argv and env of one variant's server (``enable_metrics``: its /metrics, for the sampler).

    The resolved ``variant`` carries the interpreter, prefix, model, TP size and its merged
    args/env (variant over server); ``variant.flag_argv()`` gives the HiCache flags and args.
    For ``backend: sim`` the same flags go to the simulator, plus its ``--sim-*`` knobs.
    """
    simulated = variant.backend == "sim"
    flags = variant.flag_argv()
    if enable_metrics and "--enable-metrics" not in flags:
        flags.append("--enable-metrics")
    core = ["--model-path", str(variant.model_path), "--host", variant.host, "--port", str(port)]
    if variant.tp_size > 1:
        core += ["--tp-size", str(variant.tp_size)]
    # the hicache block's environment (the file backend's directory), the variant's env over it
    env: dict[str, str] = {
        **(variant.hicache.env() if variant.hicache else {}),
        **{k: str(v) for k, v in variant.env.items()},
    }
    sim_flags: list[str] = []
    if simulated:
        python, module = sys.executable, SIM_MODULE
        sim = variant.sim
        sim_flags = [
            "--sim-time-scale",
            _fmt(sim.time_scale),
            "--sim-host-mem-scale",
            _fmt(sim.host_mem_scale),
            "--sim-startup-s",
            _fmt(sim.startup_s),
        ]
        if sim.mem_available_gib is not None:
            sim_flags += ["--sim-mem-available-gib", _fmt(sim.mem_available_gib)]
        for flag, value in (
            ("--sim-capture-s", sim.capture_s),
            ("--sim-register-s-per-gb", sim.register_s_per_gb),
            ("--sim-warmup-s", sim.warmup_s),
        ):
            if value:
                sim_flags += [flag, _fmt(value)]
        for flag, value in (
            ("--sim-storage-gb", sim.storage_gb),
            ("--sim-storage-read-gbs", sim.storage_read_gbs),
            ("--sim-storage-write-gbs", sim.storage_write_gbs),
            ("--sim-h2d-gbs", sim.h2d_gbs),
        ):
            if value is not None:
                sim_flags += [flag, _fmt(value)]
        if sim.host_split != "each":
            sim_flags += ["--sim-host-split", sim.host_split]
        if sim.storage_persist:
            sim_flags.append("--sim-storage-persist")
        if sim.host is not None:  # a simulated host (harness.sim.host); its files: the runner's sim_host/
            h = sim.host
            sim_flags += ["--sim-host-mem-total-gib", _fmt(h.mem_total_gib)]
            if h.reserve_gib != 10.0:
                sim_flags += ["--sim-host-reserve-gib", _fmt(h.reserve_gib)]
            for flag, value in (
                ("--sim-host-page-cache-gib", h.page_cache_gib),
                ("--sim-host-swap-gib", h.swap_gib),
                ("--sim-host-load-dip-gib", h.load_dip_gib),
                ("--sim-host-cgroup-limit-gib", h.cgroup_limit_gib),
            ):
                if value:
                    sim_flags += [flag, _fmt(value)]
        for fault in variant.all_sim_faults():
            sim_flags += ["--sim-fault", fault]
        env["PYTHONPATH"] = _prepend_path(str(repo_root()), env.get("PYTHONPATH", os.environ.get("PYTHONPATH")))
    else:
        python, module = variant.python, SGLANG_MODULE
    if variant.sglang_source:  # the simulator imports no sglang, but its build is checked alike
        pkg = source_package_dir(Path(variant.sglang_source))
        env["PYTHONPATH"] = _prepend_path(str(pkg), env.get("PYTHONPATH", os.environ.get("PYTHONPATH")))
        if simulated:  # the checkout is the simulated code under test: its declared --sim-* flags
            env[SIM_SOURCE_ENV] = str(pkg)
    argv = [*variant.command_prefix, python, "-m", module, *core, *flags, *sim_flags]
    return LaunchSpec(tuple(argv), env, variant.host, port, simulated)


def _prepend_path(first: str, rest: str | None) -> str:
    return first if not rest else f"{first}{os.pathsep}{rest}"


@dataclass
class ReadyResult:
    ready: bool
    seconds: float
    cause: str | None = None  # logscan cause when not ready
    exit_code: int | None = None
    detail: dict = field(default_factory=dict)
    line_number: int | None = None
    line: str | None = None


@dataclass
class StopResult:
    survivors: list[int]
    killed: list[int]  # pids that needed SIGKILL
    seconds: float
    exit_code: int | None


@dataclass(frozen=True)
class _ProcKey:
    pid: int
    create_time: float


def harness_marker(run_dir: Path | None = None, variant: str | None = None) -> dict:
    """What :data:`MARKER_ENV` holds for a server this process starts."""
    me = psutil.Process()
    return {
        "harness_pid": me.pid,
        "harness_started": me.create_time(),
        "host": socket.gethostname(),
        "run": str(Path(run_dir).resolve()) if run_dir is not None else None,
        "variant": variant,
    }


class ServerProcess:
    """One server process tree: start → wait_ready → (use) → stop.

    ``run_dir``/``variant``: written into the server's marker (:data:`MARKER_ENV`), so that a
    later run can say which run an orphaned server belongs to."""

    def __init__(
        self,
        spec: LaunchSpec,
        log_path: Path,
        poll_interval_s: float = 0.1,  # readiness: every 0.5 s cost a start 0.25 s on average, for nothing
        run_dir: Path | None = None,
        variant: str | None = None,
    ):
        self.spec = spec
        self.log_path = Path(log_path)
        self.poll_interval_s = poll_interval_s
        self.marker = harness_marker(run_dir, variant)
        self.proc: subprocess.Popen | None = None
        self.started_at: float | None = None
        self._seen: dict[int, _ProcKey] = {}
        self._sid: int | None = None
        self.start_error: str | None = None  # the command could not be executed at all

    # -- start ---------------------------------------------------------------------------------
    def start(self) -> None:
        """Spawn the server in its own session, marked (:data:`MARKER_ENV`). A caller that turns
        signals into exceptions defers them around this call (``harness.run.signals.Signals.deferred``), so
        that an interrupt cannot land between the fork and ``self.proc``."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        env = self.spec.full_env()
        env[MARKER_ENV] = json.dumps(self.marker, separators=(",", ":"))
        log_file = open(self.log_path, "ab", buffering=0)
        try:
            self.proc = subprocess.Popen(
                list(self.spec.argv),
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
                close_fds=True,
                restore_signals=True,
            )
        except OSError as exc:  # no such interpreter/prefix, not executable: a startup failure, not a crash
            self.start_error = f"{type(exc).__name__}: {exc}"
            log_file.write(f"harness: cannot execute the server command: {self.start_error}\n".encode())
            self.started_at = time.monotonic()
            return
        finally:
            log_file.close()  # the child holds its own descriptor
        self.started_at = time.monotonic()
        self._sid = self.proc.pid  # a new session's id is its leader's pid
        self.snapshot()

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def exit_code(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def read_log(self) -> str:
        try:
            return self.log_path.read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            return ""

    # -- readiness -----------------------------------------------------------------------------
    def wait_ready(self, timeout_s: float) -> ReadyResult:
        """Poll ``/health_generate`` until it answers 200, the process exits, or ``timeout_s``."""
        assert self.started_at is not None
        if self.proc is None:  # start() could not execute the command
            return ReadyResult(False, 0.0, logscan.EXITED_BEFORE_READY, None, {"error": self.start_error})
        deadline = self.started_at + timeout_s
        while True:
            elapsed = time.monotonic() - self.started_at
            self.snapshot()
            if not self.alive():  # liveness before the probe
                return self._failed_before_ready(elapsed)
            if time.monotonic() >= deadline:
                return self._timed_out(elapsed)
            probe_timeout = max(0.5, min(10.0, deadline - time.monotonic()))
            ok = False
            try:
                ok = get_status(self.spec.base_url + "/health_generate", timeout_s=probe_timeout) == 200
            except NoAnswer:
                ok = False
            if ok and self.alive():  # liveness after the probe
                return ReadyResult(True, time.monotonic() - self.started_at)
            self._sleep_while_alive(self.poll_interval_s)

    def _sleep_while_alive(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            if not self.alive():
                return
            time.sleep(min(0.05, max(0.0, end - time.monotonic())))

    def _failed_before_ready(self, elapsed: float) -> ReadyResult:
        code = self.exit_code()
        found = logscan.classify_failure(self.read_log())
        if found is not None:
            return ReadyResult(False, elapsed, found.cause, code, dict(found.detail), found.line_number, found.line)
        return ReadyResult(False, elapsed, logscan.EXITED_BEFORE_READY, code, {"exit_code": code})

    def _timed_out(self, elapsed: float) -> ReadyResult:
        found = logscan.classify_failure(self.read_log())
        detail = {"timeout_s": round(elapsed, 3)}
        if found is not None:  # e.g. a CUDA fault that hung the server instead of exiting it
            detail.update({"log_cause": found.cause, **found.detail})
            return ReadyResult(False, elapsed, logscan.TIMEOUT, None, detail, found.line_number, found.line)
        return ReadyResult(False, elapsed, logscan.TIMEOUT, None, detail)

    # -- the process tree ----------------------------------------------------------------------
    def snapshot(self) -> list[int]:
        """Remember every process of the tree seen so far (descendants and session members)."""
        found: list[psutil.Process] = []
        if self.proc is not None:
            try:
                root = psutil.Process(self.proc.pid)
                found.append(root)
                found.extend(root.children(recursive=True))
            except psutil.Error:
                pass
        found.extend(self._session_members())
        for p in found:
            try:
                if p.pid not in self._seen:
                    self._seen[p.pid] = _ProcKey(p.pid, p.create_time())
            except psutil.Error:
                continue
        return sorted(self._seen)

    def _session_members(self) -> list[psutil.Process]:
        return [] if self._sid is None else session_processes(self._sid)

    def _living(self) -> list[psutil.Process]:
        alive = []
        for key in list(self._seen.values()):
            try:
                p = psutil.Process(key.pid)
                if abs(p.create_time() - key.create_time) > 0.01:
                    continue  # the pid was reused by an unrelated process
                if p.status() == psutil.STATUS_ZOMBIE:
                    continue
                alive.append(p)
            except psutil.Error:
                continue
        return alive

    def identity(self) -> dict:
        """pid, session id, start time and host of the server, written to status.json (evidence;
        an orphan is found by its marker, :func:`find_marked_servers`)."""
        key = self._seen.get(self.pid) if self.pid is not None else None
        return {
            "pid": self.pid,
            "sid": self._sid,
            "create_time": key.create_time if key else None,
            "host": self.marker["host"],
        }

    def stop(self, term_timeout_s: float = 30.0, kill_timeout_s: float = 10.0) -> StopResult:
        """SIGTERM the whole tree, wait, SIGKILL what is left, verify nothing survives."""
        t0 = time.monotonic()
        if self.proc is None:
            return StopResult([], [], 0.0, None)
        self.snapshot()
        self._signal_all(signal.SIGTERM)
        self._signal_all(signal.SIGCONT)  # a SIGSTOPped process handles the TERM once continued
        self._wait_gone(term_timeout_s)
        killed = [p.pid for p in self._living()]
        if killed:
            self._signal_all(signal.SIGKILL)
            self._wait_gone(kill_timeout_s)
        survivors = [p.pid for p in self._living()]
        code = self.proc.poll()
        return StopResult(survivors, killed, time.monotonic() - t0, code)

    def _signal_all(self, sig: int) -> None:
        if self._sid is not None:
            try:
                os.killpg(self._sid, sig)
            except (ProcessLookupError, PermissionError):
                pass
        for p in self._living():
            try:
                p.send_signal(sig)
            except psutil.Error:
                pass

    def _wait_gone(self, timeout_s: float) -> None:
        end = time.monotonic() + timeout_s
        while time.monotonic() < end:
            if self.proc is not None:
                self.proc.poll()  # reap our direct child so it does not linger as a zombie
            if not self._living():
                return
            time.sleep(0.05)


# -- servers left behind by earlier runs -------------------------------------------------------


class ExternalServer:
    """A server somebody else started (``backend: external``): no lifecycle. It is never started,
    stopped, signalled or waited for; the harness cannot see its process, so it counts as alive
    (a server that stops answering is caught by the hang watch's ``/health_generate`` probes,
    harness/run/serving_window.py). It has no log. Stands in for both the ``LaunchSpec`` (``base_url``)
    and the ``ServerProcess`` of a launched server where the serving window uses them."""

    def __init__(self, url: str) -> None:
        self.base_url = url.rstrip("/")

    def alive(self) -> bool:
        return True

    def exit_code(self) -> int | None:
        return None

    def read_log(self) -> str:
        return ""

    def identity(self) -> dict:
        return {"url": self.base_url, "external": True}


class GpuBusy(BadInput, ValueError):
    """A GPU this run would use holds another run's server (the message names it)."""


@dataclass(frozen=True)
class MarkedServer:
    """A process carrying :data:`MARKER_ENV`: part of a server some harness run started."""

    pid: int
    sid: int | None
    marker: dict

    @property
    def run(self) -> str | None:
        return self.marker.get("run")

    @property
    def harness_alive(self) -> bool:
        """The harness process that started it still runs (same pid, same start time)."""
        try:
            pid, started = int(self.marker["harness_pid"]), float(self.marker["harness_started"])
            return abs(psutil.Process(pid).create_time() - started) < 0.05
        except (KeyError, TypeError, ValueError, psutil.Error):
            return False

    def describe(self) -> str:
        harness = f"harness pid {self.marker.get('harness_pid')}"
        return (
            f"pid {self.pid} (variant {self.marker.get('variant') or '?'} of run {self.run or '?'}, "
            f"started by {harness}, {'still running' if self.harness_alive else 'gone'})"
        )


def find_marked_servers() -> list[MarkedServer]:
    """Every process of this user whose environment carries the harness marker (servers and their
    children), except this process. Only the marker is read from each environment."""
    uid, me = os.getuid(), os.getpid()
    found = []
    for p in psutil.process_iter(["pid", "uids"]):
        try:
            uids = p.info["uids"]
            if p.pid == me or uids is None or uids.real != uid:
                continue
            raw = p.environ().get(MARKER_ENV)
            if not raw:
                continue
            marker = json.loads(raw)
            if not isinstance(marker, dict) or p.status() == psutil.STATUS_ZOMBIE:
                continue
            found.append(MarkedServer(p.pid, os.getsid(p.pid), marker))
        except (OSError, ValueError, psutil.Error):
            continue
    return found


def session_processes(sid: int) -> list[psutil.Process]:
    """Every process of session ``sid`` but this one."""
    found = []
    for p in psutil.process_iter(["pid"]):
        try:
            if p.pid != os.getpid() and os.getsid(p.pid) == sid:
                found.append(p)
        except (OSError, psutil.Error):
            continue
    return found


def stop_processes(procs: list[psutil.Process], term_timeout_s: float = 15.0) -> list[int]:
    """SIGTERM (then SIGCONT, for stopped ones) each of ``procs``, wait, SIGKILL what is left;
    returns the pids still alive after that."""

    def send(sig: int) -> None:
        for p in procs:
            try:
                p.send_signal(sig)
            except psutil.Error:
                pass

    send(signal.SIGTERM)
    send(signal.SIGCONT)
    _, alive = psutil.wait_procs(procs, timeout=term_timeout_s)
    if alive:
        send(signal.SIGKILL)
        _, alive = psutil.wait_procs(alive, timeout=5.0)
    return [p.pid for p in alive]


def clear_orphans(results_dir: Path, term_timeout_s: float = 15.0) -> list[dict]:
    """Before a run writes under ``results_dir``: stop every server of an earlier run of that
    folder whose harness is gone; refuse (:class:`GpuBusy`) while any other harness server holds
    memory on a GPU this process may use. Returns what was stopped: [{pids, run, variant, survivors}]."""
    root = Path(results_dir).resolve()
    orphans, others = [], []
    for m in find_marked_servers():
        mine = m.run is not None and Path(m.run).is_relative_to(root)
        if mine and not m.harness_alive:
            orphans.append(m)
        else:
            others.append(m)
            if not m.harness_alive:
                log.warning("server %s is not under %s: left alone", m.describe(), root)
    stopped = []
    by_session: dict[int | None, list[MarkedServer]] = {}
    for m in orphans:
        by_session.setdefault(m.sid, []).append(m)
    for sid, group in by_session.items():
        # A living marked member pins its session id (Linux never reuses it meanwhile): every
        # process of that session belongs to the same server, marked or not.
        procs = {p.pid: p for p in (session_processes(sid) if sid is not None else [])}
        for m in group:
            try:
                procs.setdefault(m.pid, psutil.Process(m.pid))
            except psutil.Error:
                continue
        first = min(group, key=lambda m: m.pid)
        log.warning("stopping %s: its harness is gone", first.describe())
        survivors = stop_processes(list(procs.values()), term_timeout_s)
        stopped.append(
            {"pids": sorted(procs), "run": first.run, "variant": first.marker.get("variant"), "survivors": survivors}
        )
        others += [m for m in group if m.pid in survivors]  # still there: judged like any other
    _refuse_busy_gpus(others)
    return stopped


def gpu_memory_of(pids: list[int]) -> dict[int, float] | None:
    """{NVML index: MiB} that ``pids`` hold on the GPUs this process may use (its
    ``CUDA_VISIBLE_DEVICES``); None without NVML or a process list."""
    reader = nvml.GpuReader()
    try:
        if not reader.available:
            return None
        return reader.process_memory(pids, reader.select(os.environ).indices)
    finally:
        reader.close()


def _refuse_busy_gpus(servers: list[MarkedServer]) -> None:
    busy = []
    for m in servers:
        held = gpu_memory_of([m.pid]) or {}
        for gpu, mib in sorted(held.items()):
            busy.append(f"GPU {gpu}: {mib:.0f} MiB held by server {m.describe()}")
    if busy:
        raise GpuBusy(
            "a GPU this run would use is busy; stop that server (or wait for its run) first:\n  " + "\n  ".join(busy)
        )

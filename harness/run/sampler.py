"""Background sampler of host memory, swap, server RSS, GPU memory and `sglang:*` /metrics while a
variant's server runs, each sample labelled with the current phase (its /metrics page: `harness.server.metrics_page`;
per-phase summaries of the samples: `harness.analysis.samples`).

GPU memory is read from the GPUs the variant's server uses, not every GPU of the host: those its
launch environment's ``CUDA_VISIBLE_DEVICES`` (indices or UUIDs) and its ``--base-gpu-id`` /
``--tp-size`` give it, or — when NVML lists the server's own processes on other GPUs — those
(`harness.host.nvml.GpuSelection`). The first sample, and any sample where the choice changes, carries
``gpu_selection`` ({indices, method, how, cuda_visible_devices, uuids}); each GPU entry also has
``server_mem_mib`` (the server's processes' share) where NVML lists processes.

The sampler runs in its own thread with its own blocking HTTP client, so the workload's asyncio loop
in the main thread is never blocked by it. One Sample per interval goes to a writer callback (the
runner's `results.JsonlWriter(path).append`); its fields are those of docs/architecture.md's Sample.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import math
import os
import threading
import time
from typing import Any, Callable, Mapping, Sequence

import psutil

from harness.analysis.samples import _round
from harness.host import procfs
from harness.host.nvml import GpuReader, GpuSelection
from harness.server.info import ServerAnswerError
from harness.server.metrics_page import (
    MAX_METRICS_BYTES,
    MetricsPage,
    MetricsUnavailable,
    checked_metric_values,
    parse_metrics_text,
)

log = logging.getLogger(__name__)

SampleWriter = Callable[[dict], Any]

# The /proc fields a sample records (`Sampler._take`) and the counters its rates need
# (`procfs.vmstat_rates`); read by name, not by parsing every line (`procfs.pick_fields`).
MEMINFO_FIELDS = ("MemAvailable", "MemFree", "Cached", "Mlocked", "Shmem", "SwapTotal", "SwapFree")
VMSTAT_FIELDS = ("pswpin", "pswpout", "pgmajfault", "pgfault")
STORAGE_EVERY_S = 2.0  # the storage directory's size: a walk of its files, not every tick


# ----------------------------------------------------------------------------- process tree


def process_tree_rss_kib(pid: int) -> int | None:
    """Sum of RSS over `pid` and all its descendants, in kiB, read once; processes that vanish
    while being read are skipped. None when `pid` itself is gone."""
    return ProcessTreeRss(pid).read_kib()


class ProcessTreeRss:
    """RSS of a process tree, read every tick. Finding the children walks all of /proc
    (milliseconds on a busy host) while reading known processes' RSS is cheap, so the tree is
    rescanned on a backoff: every `min_rescan_s` while it changes (a server spawning its
    scheduler and workers), doubling up to `max_rescan_s` while it stays the same, and at once
    when a known process vanishes."""

    def __init__(self, pid: int, min_rescan_s: float = 0.5, max_rescan_s: float = 8.0) -> None:
        self.pid = pid
        self.min_rescan_s = min_rescan_s
        self.max_rescan_s = max_rescan_s
        self._rescan_s = min_rescan_s
        self._procs: list[psutil.Process] = []
        self._scanned_at = -math.inf

    def _rescan(self) -> bool:
        self._scanned_at = time.monotonic()
        before = {p.pid for p in self._procs}
        try:
            root = psutil.Process(self.pid)
            self._procs = [root, *root.children(recursive=True)]
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            self._procs = []
            return False
        same = {p.pid for p in self._procs} == before
        self._rescan_s = min(self._rescan_s * 2, self.max_rescan_s) if same else self.min_rescan_s
        return True

    def pids(self) -> set[int]:
        """The pids of the tree as last scanned (the root included while it lives)."""
        return {p.pid for p in self._procs}

    def read_kib(self) -> int | None:
        if time.monotonic() - self._scanned_at >= self._rescan_s or not self._procs:
            if not self._rescan():
                return None
        total, vanished, root_alive = 0, False, False
        for p in self._procs:
            try:
                total += p.memory_info().rss
                root_alive = root_alive or p.pid == self.pid
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                vanished = True
        if vanished:  # the tree changed: rescan now so the next reading is whole again
            self._scanned_at = -math.inf
        return total // 1024 if root_alive else None


# ----------------------------------------------------------------------------- storage tier

FILE_BACKEND_DIR_ENV = "SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR"
FILE_BACKEND_DEFAULT_DIR = "/tmp/hicache"  # sglang 0.5.17's HiCacheFile default


def storage_dir_of(env: Mapping[str, str] | None, argv: Sequence[str] | None) -> str | None:
    """The directory sglang's ``file`` storage backend writes (``--hicache-storage-backend file``
    in the argv; the directory from the launch environment, else sglang's default); None for
    another backend or none."""
    args = list(argv or [])
    backend = None
    for i, a in enumerate(args):
        if a == "--hicache-storage-backend" and i + 1 < len(args):
            backend = args[i + 1]
        elif a.startswith("--hicache-storage-backend="):
            backend = a.split("=", 1)[1]
    if backend != "file":
        return None
    return (env or {}).get(FILE_BACKEND_DIR_ENV) or FILE_BACKEND_DEFAULT_DIR


def dir_size_kib(path: str, max_entries: int = 200_000) -> int | None:
    """Disk usage of a directory tree in KiB (allocated blocks, links not followed); None when it
    does not exist. Stops counting after ``max_entries`` entries (the figure is then a floor)."""
    total, seen, stack = 0, 0, [path]
    if not os.path.isdir(path):
        return None
    while stack and seen < max_entries:
        try:
            with os.scandir(stack.pop()) as it:
                for e in it:
                    seen += 1
                    try:
                        st = e.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    total += getattr(st, "st_blocks", 0) * 512
                    if e.is_dir(follow_symlinks=False):
                        stack.append(e.path)
        except OSError:
            continue
    return total // 1024


# ----------------------------------------------------------------------------- the sampler


class Sampler:
    """Samples every `interval_s` in a background thread until `stop()`.

    pid: the server's (launcher) pid; RSS is summed over its process tree. None → no RSS.
    base_url: e.g. "http://127.0.0.1:30000"; `/metrics` is scraped when `server_metrics` is true.
    write: called with each Sample dict (from the sampler thread; a failing writer is logged and
        counted in `write_errors`, sampling goes on).
    gpu: "auto" (NVML when present), True (same, but logs a warning when absent), False (never).
    launch_env, launch_argv: the server's whole environment and argv (``LaunchSpec.full_env()``,
        ``LaunchSpec.argv``): which GPUs it uses (module docstring). Default: this process's
        environment and no argv (every GPU ``CUDA_VISIBLE_DEVICES`` shows).

    `set_phase(name)` is thread-safe and by default never blocks: the sampler thread promptly
    takes one boundary sample still labelled with the previous phase, so per-phase counter deltas
    start where the previous phase ended. For exact deltas the caller waits for that sample
    before sending the next phase's requests: `set_phase(name, wait_s=2)` from a thread, or
    `await aset_phase(name)` from the workload's event loop (the loop stays free meanwhile).
    `stop()` takes a final sample in the current phase and joins within `timeout_s`.
    """

    def __init__(
        self,
        pid: int | None,
        base_url: str | None,
        write: SampleWriter,
        *,
        interval_s: float = 0.5,
        gpu: bool | str = "auto",
        server_metrics: bool = True,
        metrics_timeout_s: float = 1.0,
        phase: str = "startup",
        meminfo_path: str = "/proc/meminfo",
        vmstat_path: str = "/proc/vmstat",
        launch_env: Mapping[str, str] | None = None,
        launch_argv: Sequence[str] | None = None,
        on_stop: Callable[[], object] | None = None,
    ) -> None:
        if interval_s <= 0:
            raise ValueError(f"interval_s must be > 0, got {interval_s}")
        self.pid = pid
        self.on_stop = on_stop  # called once sampling stopped (the runner: close the samples' writer)
        self.base_url = base_url.rstrip("/") if base_url else None
        self._write = write
        self.interval_s = float(interval_s)
        self._gpu_mode = gpu
        self.server_metrics = bool(server_metrics and self.base_url)
        self.metrics_timeout_s = metrics_timeout_s
        self._meminfo_path = meminfo_path
        self._vmstat_path = vmstat_path
        self._page_size = procfs.page_size_bytes()

        self._lock = threading.Lock()
        self._phase = phase
        self.system_shared = False  # other variants run on this host meanwhile: set by the runner
        # previous phases still owed a boundary sample, with the event set once it is written
        self._boundaries: list[tuple[str, threading.Event]] = []
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._started_wall: float | None = None
        self._stopped_wall: float | None = None

        # vmstat readings (t_s, counters), newest last; rates use one at least half an interval old
        self._vm_hist: collections.deque[tuple[float, dict[str, int]]] = collections.deque(maxlen=8)

        self.samples_written = 0
        self.write_errors = 0
        self.metrics_errors = 0
        self._metrics_error_kinds: set[str] = set()
        self._cpu_s = 0.0
        self.setup_cpu_seconds = 0.0  # one-off: HTTP client, NVML, parser import (in start())
        self.last_error: str | None = None
        self._gpu: GpuReader | None = None
        self._launch_env = dict(launch_env) if launch_env is not None else None
        self._launch_argv = list(launch_argv) if launch_argv is not None else None
        self._gpu_static: GpuSelection | None = None  # from the launch env and argv
        self.gpu_selection: GpuSelection | None = None  # the GPUs sampled now
        self._gpu_selection_written: GpuSelection | None = None
        self._page: MetricsPage | None = None
        self._rss = ProcessTreeRss(pid) if pid is not None else None
        # the storage tier's directory (``file`` backend), walked at most every STORAGE_EVERY_S
        self.storage_dir = storage_dir_of(self._launch_env, self._launch_argv)
        self._storage_kib: int | None = None
        self._storage_at = -math.inf

    # -- public API ----------------------------------------------------------------------

    def follow(self, pid: int) -> None:
        """The server was restarted (harness.run.restart): its RSS is the new process tree's."""
        self.pid = pid
        self._rss = ProcessTreeRss(pid)

    @property
    def phase(self) -> str:
        with self._lock:
            return self._phase

    def set_phase(self, name: str, wait_s: float = 0.0) -> bool:
        """Label subsequent samples with `name` (startup, idle, workload/pass names, cooldown).
        With `wait_s` > 0, block up to that long until the previous phase's boundary sample is
        written; returns whether it was (True at once when not waiting or nothing changed)."""
        done = self._switch(name)
        if done is None or wait_s <= 0 or not self.running:
            return True
        return done.wait(wait_s)

    async def aset_phase(self, name: str, wait_s: float = 2.0) -> bool:
        """`set_phase` for asyncio code: awaits the boundary sample without blocking the loop."""
        done = self._switch(name)
        if done is None or not self.running:
            return True
        return await asyncio.to_thread(done.wait, wait_s)

    def _switch(self, name: str) -> threading.Event | None:
        with self._lock:
            if name == self._phase:
                return None
            done = threading.Event()
            self._boundaries.append((self._phase, done))
            self._phase = name
        self._wake.set()
        return done

    def start(self) -> "Sampler":
        if self._thread is not None:
            raise RuntimeError("Sampler already started")
        # One-off setup here, outside the sampling thread, so cpu_seconds is the steady cost.
        t0 = time.thread_time()
        self._gpu = self._open_gpu()
        if self.server_metrics:
            assert self.base_url is not None
            self._page = MetricsPage(
                self.base_url, self.metrics_timeout_s, MAX_METRICS_BYTES, 2 * self.metrics_timeout_s
            )
        self.setup_cpu_seconds = time.thread_time() - t0
        self._started_wall = time.monotonic()
        self._thread = threading.Thread(target=self._run, name="hicache-sampler", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 5.0) -> bool:
        """Stop sampling, then call ``on_stop`` (once); True when the thread ended within `timeout_s`."""
        ended = True
        if self._thread is not None:
            self._stop.set()
            self._wake.set()
            self._thread.join(timeout_s)
            if self._stopped_wall is None:
                self._stopped_wall = time.monotonic()
            ended = not self._thread.is_alive()
        on_stop, self.on_stop = self.on_stop, None
        if on_stop is not None:
            on_stop()
        return ended

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    @property
    def cpu_seconds(self) -> float:
        """CPU time (user + system) the sampling thread has used so far."""
        return self._cpu_s

    @property
    def wall_seconds(self) -> float:
        if self._started_wall is None:
            return 0.0
        end = self._stopped_wall if self._stopped_wall is not None else time.monotonic()
        return max(end - self._started_wall, 0.0)

    @property
    def cpu_fraction(self) -> float:
        """Sampler CPU as a fraction of one core over its wall time (0.01 = 1% of a core)."""
        wall = self.wall_seconds
        return self._cpu_s / wall if wall > 0 else 0.0

    def __enter__(self) -> "Sampler":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- the thread ----------------------------------------------------------------------

    def _run(self) -> None:
        cpu0 = time.thread_time()
        gpu, client = self._gpu, self._page
        try:
            with self._lock:  # phases switched before start() have no samples to close
                early, self._boundaries = self._boundaries, []
            for _, done in early:
                done.set()
            self._remember_vmstat()
            self._emit(self._take(self.phase, gpu, client))  # t=0 sample: the phase's start
            next_t = time.monotonic() + self.interval_s
            while True:
                self._wake.wait(max(next_t - time.monotonic(), 0.0))
                self._wake.clear()
                with self._lock:
                    owed, self._boundaries = self._boundaries, []
                for label, done in owed:
                    self._emit(self._take(label, gpu, client))
                    done.set()
                if self._stop.is_set():
                    self._emit(self._take(self.phase, gpu, client))
                    break
                now = time.monotonic()
                if now >= next_t:
                    self._emit(self._take(self.phase, gpu, client))
                    # skip missed ticks rather than bursting to catch up
                    next_t += self.interval_s * max(1, math.ceil((now - next_t) / self.interval_s))
                self._cpu_s = time.thread_time() - cpu0
        except Exception as e:  # the sampler must never take the run down
            self.last_error = f"{type(e).__name__}: {e}"
            log.exception("sampler thread failed")
        finally:
            with self._lock:  # release any waiter whose boundary will never be taken
                owed, self._boundaries = self._boundaries, []
            for _, done in owed:
                done.set()
            if client is not None:
                client.close()
            if gpu is not None:
                gpu.close()
            self._cpu_s = time.thread_time() - cpu0
            self._stopped_wall = time.monotonic()

    def _open_gpu(self) -> GpuReader | None:
        if self._gpu_mode is False or self._gpu_mode == "false":
            return None
        reader = GpuReader()
        if not reader.available:
            if self._gpu_mode is True or self._gpu_mode == "true":
                log.warning("sampling.gpu is true but NVML found no GPU; no GPU fields recorded")
            reader.close()
            return None
        self._gpu_static = self.gpu_selection = reader.select(self._launch_env, self._launch_argv)
        return reader

    def _read_gpus(self, gpu: GpuReader) -> list[dict] | None:
        """The selected GPUs' readings. The server's process tree, where NVML lists it, confirms
        the selection or — when its processes run on other GPUs — replaces it."""
        static = self._gpu_static
        assert static is not None
        pids = self._rss.pids() if self._rss is not None else set()
        own = gpu.process_memory(pids) if pids else None
        chosen = static
        if own and not set(own) <= set(static.indices):
            idx = tuple(sorted(own))
            uuids = gpu.uuids
            chosen = GpuSelection(
                idx,
                "processes",
                f"the server's processes run on NVML {list(idx)} (the launch environment "
                f"said {list(static.indices)}: {static.how})",
                static.cuda_visible_devices,
                tuple(uuids[i] for i in idx),
            )
        self.gpu_selection = chosen
        readings = gpu.read(chosen.indices, own if own else None)
        return None if readings is None else [g.to_dict() for g in readings]

    def _emit(self, sample: dict) -> None:
        try:
            self._write(sample)
            self.samples_written += 1
        except Exception as e:
            self.write_errors += 1
            self.last_error = f"write: {type(e).__name__}: {e}"
            if self.write_errors == 1:
                log.warning("sample writer failed: %s", e)

    def _remember_vmstat(self) -> dict[str, int] | None:
        try:
            vm = procfs.read_vmstat(self._vmstat_path, VMSTAT_FIELDS)
        except OSError:
            return None
        self._vm_hist.append((time.monotonic(), vm))
        return vm

    def _rates(self) -> procfs.VmstatRates | None:
        prev_hist = list(self._vm_hist)
        cur = self._remember_vmstat()
        if cur is None or not prev_hist:
            return None
        now = self._vm_hist[-1][0]
        # The newest earlier reading at least half an interval old: a boundary sample taken just
        # after a regular one would otherwise turn one swapped page into a huge rate.
        min_age = self.interval_s / 2
        for t, vm in reversed(prev_hist):
            if now - t >= min_age:
                return procfs.vmstat_rates(vm, cur, now - t, self._page_size)
        return None  # no reading old enough yet (the very first sample)

    def _scrape(self, client: MetricsPage | None) -> dict[str, float] | None:
        """One /metrics reading, or None: not ready, refused, gone, or a bad answer (longer than
        MAX_METRICS_BYTES, slower than twice the scrape timeout in all, not UTF-8, not Prometheus
        text, see `checked_metric_values`). The reason goes to `last_error` and `metrics_errors`
        (each new kind of bad answer logged once); never raises out of the sampler thread."""
        if client is None:
            return None
        try:
            return checked_metric_values(parse_metrics_text(client.fetch().decode("utf-8")))
        except Exception as e:  # noqa: BLE001 - this sample has no counters; sampling goes on
            self.metrics_errors += 1
            kind = "ServerAnswerError" if isinstance(e, ServerAnswerError) else type(e).__name__
            self.last_error = f"metrics: {kind}: {str(e)[:300]}"
            bad_answer = not isinstance(e, MetricsUnavailable)  # not "not up yet" / "metrics off"
            if bad_answer and kind not in self._metrics_error_kinds and len(self._metrics_error_kinds) < 16:
                self._metrics_error_kinds.add(kind)
                log.warning("/metrics sample skipped: %s", self.last_error)
            return None

    def _take(self, phase: str, gpu: GpuReader | None, client: MetricsPage | None) -> dict:
        t_ns = time.perf_counter_ns()
        wall = time.time()
        try:
            mi = procfs.read_meminfo(self._meminfo_path, MEMINFO_FIELDS)
        except OSError:
            mi = {}
        rates = self._rates()
        sample: dict[str, Any] = {
            "t_ns": t_ns,
            "wall_time": wall,
            "phase": phase,
            "mem_available_kib": mi.get("MemAvailable"),
            "mem_free_kib": mi.get("MemFree"),
            "cached_kib": mi.get("Cached"),
            "mlocked_kib": mi.get("Mlocked"),
            "shmem_kib": mi.get("Shmem"),
            "swap_total_kib": mi.get("SwapTotal"),
            "swap_free_kib": mi.get("SwapFree"),
            "pswpin_kib_s": _round(rates.pswpin_kib_s) if rates else None,
            "pswpout_kib_s": _round(rates.pswpout_kib_s) if rates else None,
            "pgmajfault_s": _round(rates.pgmajfault_s) if rates else None,
            "server_rss_kib": self._rss.read_kib() if self._rss is not None else None,
        }
        if self.storage_dir is not None:
            if time.monotonic() - self._storage_at >= STORAGE_EVERY_S:
                self._storage_at = time.monotonic()
                self._storage_kib = dir_size_kib(self.storage_dir)
            sample["storage_dir_kib"] = self._storage_kib
        if gpu is not None:
            readings = self._read_gpus(gpu)
            if readings is not None:
                sample["gpus"] = readings
            if self.gpu_selection is not None and self.gpu_selection != self._gpu_selection_written:
                sample["gpu_selection"] = self.gpu_selection.to_dict()
                self._gpu_selection_written = self.gpu_selection
        sample["counters"] = self._scrape(client)
        if self.system_shared:  # side by side (harness.run.lanes): /proc's figures are every variant's
            sample["system_shared"] = True
        return sample

"""Background sampler of host memory, swap, server RSS, GPU memory and `sglang:*` /metrics while a
variant's server runs, each sample labelled with the current phase; plus pure per-phase summaries.

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
import functools
import http.client
import logging
import math
import re
import threading
import time
from typing import Any, Callable, Iterable, Mapping, Sequence
from urllib.parse import urlsplit

import psutil

from harness.core.errors import Broken
from harness.host import procfs
from harness.host.nvml import GpuReader, GpuSelection
from harness.server.info import (
    BodyBounds,
    DeadlineConnection,
    DeadlineHTTPSConnection,
    ServerAnswerError,
    check_identity,
    request_headers,
)

log = logging.getLogger(__name__)

SampleWriter = Callable[[dict], Any]

# Counter-like /metrics series: deltas over a phase are meaningful. Everything else is a gauge.
_COUNTER_SUFFIXES = ("_total", "_sum", "_count")


# ----------------------------------------------------------------------------- /metrics parsing


def metric_key(name: str, labels: Mapping[str, str]) -> str:
    """`name{a="x",b="y"}` with labels sorted; bare `name` without labels."""
    if not labels:
        return name
    inner = ",".join(f'{k}="{labels[k]}"' for k in sorted(labels))
    return f"{name}{{{inner}}}"


# One sample line of the Prometheus text format: name, optional {labels}, value, optional timestamp.
_SAMPLE_LINE = re.compile(
    r'([a-zA-Z_:][a-zA-Z0-9_:]*)[ \t]*(?:\{((?:[^"}]|"(?:[^"\\]|\\.)*")*)\})?[ \t]+(\S+)(?:[ \t]+-?[0-9]+)?[ \t]*'
)
_LABEL = re.compile(r'[ \t]*([a-zA-Z_][a-zA-Z0-9_]*)[ \t]*=[ \t]*"((?:[^"\\]|\\.)*)"[ \t]*(?:,|$)')
_UNESCAPE = re.compile(r"\\(.)")
_SKIPPED_SUFFIXES = ("_bucket", "_created", "_gsum", "_gcount")


def _unescape(value: str) -> str:
    if "\\" not in value:
        return value
    return _UNESCAPE.sub(lambda m: "\n" if m.group(1) == "n" else m.group(1), value)


def parse_metrics_text(text: str, prefix: str = "sglang:") -> dict[str, float]:
    """Prometheus text exposition → {name with labels: value} for series whose name starts with
    `prefix`. Histogram buckets and `_created` timestamps are dropped; `_sum`/`_count` are kept.

    A reader of only the lines it keeps (no parser objects per family): the same keys and values
    as prometheus_client's parser (label values unescaped, labels sorted by `metric_key`), at a
    fraction of its CPU (the sampler's cost per tick is mostly this: docs/client-fidelity.md).
    sglang 0.5.17's /metrics is ~1,600 lines, most of them the buckets of its ~37 histograms, and
    the same series every reading; so a dropped line is recognised by its name alone (and the
    rest of that series' buckets skipped in one regex match, `_bucket_run`), and a kept series
    seen before (`_SERIES_KEYS`: the line up to its value, as the server wrote it) takes its
    key from there, with only its value read. A new series goes through the line's regular
    expression. (Every line through the regex: 8 ms a reading on the 2-core box, 1.3-1.6 % of a
    core at 0.5 s on the H200.) A kept line that is not a sample raises ValueError."""
    out: dict[str, float] = {}
    known = _SERIES_KEYS
    pos, n = 0, len(text)
    while pos < n:
        end = text.find("\n", pos)
        if end < 0:
            end = n
        start, pos = pos, end + 1
        if not text.startswith(prefix, start):
            continue  # comments, other prefixes, blank lines
        line = text[start:end]
        if line.endswith("\r"):
            line = line[:-1]
        brace = line.find("{")
        if brace > 0:
            series_end = line.rfind("}") + 1
            name = line[:brace].rstrip(" \t")
        else:
            series_end = brace = len(line.split(None, 1)[0])
            name = line[:brace]
        if name.endswith(_SKIPPED_SUFFIXES):
            if name.endswith("_bucket"):  # skip the rest of this series' buckets in one match
                pos = _bucket_run(name).match(text, pos).end()
            continue
        if series_end > 0:
            key = known.get(line[:series_end])
            if key is not None:
                tail = _VALUE_PART.fullmatch(line, series_end)
                if tail is not None:
                    try:
                        out[key] = float(tail.group(1))
                        continue
                    except ValueError:
                        pass  # the full reading below raises with the line
        key, value = _read_sample_line(line)
        out[key] = value
        if series_end > 0 and len(known) < _SERIES_KEYS_MAX:
            known[line[:series_end]] = key
    return out


@functools.lru_cache(maxsize=256)
def _bucket_run(name: str) -> re.Pattern[str]:
    """The lines that follow one of ``name``'s bucket lines and are buckets of the same name (the
    same name rule as `parse_metrics_text`: the name ends where a non-name character starts):
    matched by the regex engine, not line by line in Python (zero lines when the next line is
    something else)."""
    return re.compile(rf"(?:{re.escape(name)}(?![a-zA-Z0-9_:])[^\n]*(?:\n|$))*")


_SERIES_KEYS: dict[str, str] = {}  # a kept line up to its value, as written → its key (`metric_key`)
_SERIES_KEYS_MAX = 1 << 16  # series names and label sets of one server: hundreds; a bound anyway
_VALUE_PART = re.compile(r"[ \t]+(\S+)(?:[ \t]+-?[0-9]+)?[ \t]*")  # what `_SAMPLE_LINE` ends with


def _read_sample_line(line: str) -> tuple[str, float]:
    """One kept sample line → (its key, its value); ValueError naming the line when it is none."""
    m = _SAMPLE_LINE.fullmatch(line)
    if m is None:
        raise ValueError(f"not a Prometheus sample line: {line[:120]!r}")
    name, inner, value = m.groups()
    labels: dict[str, str] = {}
    if inner and inner.strip():
        pos = 0
        while pos < len(inner):
            lm = _LABEL.match(inner, pos)
            if lm is None or lm.end() == pos:
                raise ValueError(f"bad labels in /metrics line: {line[:120]!r}")
            labels[lm.group(1)] = _unescape(lm.group(2))
            pos = lm.end()
    try:
        return metric_key(name, labels), float(value)
    except ValueError:
        raise ValueError(f"bad value in /metrics line: {line[:120]!r}") from None


def is_counter_key(key: str) -> bool:
    name = key.split("{", 1)[0]
    return name.endswith(_COUNTER_SUFFIXES)


MAX_METRICS_BYTES = 8 << 20  # sglang's /metrics is ~100s of KB, histogram buckets included


def checked_metric_values(values: dict[str, float]) -> dict[str, float]:
    """A parsed /metrics answer, checked before it becomes a sample: no `sglang:` series at all
    (an error page served as 200, garbage) or a counter that is not a finite number >= 0 (every
    delta over it would be garbage) raises ValueError with the reason; a non-finite gauge (legal
    in Prometheus text, e.g. a quantile of nothing) is dropped."""
    if not values:
        raise ValueError("no sglang: series in the answer")
    out: dict[str, float] = {}
    for key, v in values.items():
        if math.isfinite(v) and (v >= 0 or not is_counter_key(key)):
            out[key] = v
        elif is_counter_key(key):
            raise ValueError(f"counter {key[:120]} is {v}")
    return out


class MetricsUnavailable(Broken):
    """/metrics did not answer with a page: not up yet, refused, metrics off (a status), the
    connection dropped. Expected while a server starts or stops: counted, not logged."""


class MetricsPage:
    """GET ``{base_url}/metrics`` over one kept-alive HTTP/1.1 connection (stdlib `http.client`,
    no proxy from the environment): the body, at most ``limit`` bytes within ``deadline_s`` in
    all (each socket operation bounded by ``timeout_s``), identity-encoded. Over a bound, or
    compressed: `ServerAnswerError`; no answer or not 200: `MetricsUnavailable`. For sglang's
    ~190 KB page this is a third of httpx's CPU (0.35 against 1.1 ms on the 2-core box), and the
    sampler reads it every 0.5 s. A kept connection the server has closed meanwhile is reopened
    once, at once. Used by one thread at a time."""

    def __init__(self, base_url: str, timeout_s: float, limit: int, deadline_s: float) -> None:
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {base_url!r}")
        self.base_url = base_url
        self._https = parts.scheme == "https"
        self._host, self._port = parts.hostname, parts.port
        self._path = (parts.path.rstrip("/") or "") + "/metrics"
        self.timeout_s, self.limit, self.deadline_s = timeout_s, limit, deadline_s
        self._conn: DeadlineConnection | DeadlineHTTPSConnection | None = None

    def _open(self) -> http.client.HTTPConnection:
        kind = DeadlineHTTPSConnection if self._https else DeadlineConnection
        return kind(self._host, self._port, self.timeout_s)

    def fetch(self) -> bytearray:
        reused = self._conn is not None
        try:
            try:
                return self._get()
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
                if not reused:
                    raise
                self.close()  # the server closed the idle connection: once more on a new one
                return self._get()
        except (ServerAnswerError, MetricsUnavailable):
            self.close()
            raise
        except (OSError, http.client.HTTPException) as e:
            self.close()
            raise MetricsUnavailable(f"{type(e).__name__}: {e}") from None
        except BaseException:
            self.close()
            raise

    def _get(self) -> bytearray:
        if self._conn is None:
            self._conn = self._open()
        self._conn.start(self.deadline_s)  # the head too: a dripping head is bounded
        body = BodyBounds(self.limit, self.deadline_s)
        self._conn.request("GET", self._path, headers=request_headers(self.base_url))
        resp = self._conn.getresponse()
        if resp.status != 200:
            resp.read(64 << 10)
            self.close()
            raise MetricsUnavailable(f"/metrics answered {resp.status}")
        check_identity(resp.getheader("content-encoding"))
        while chunk := resp.read1(1 << 16):
            body.add(chunk)
        resp.read()  # b"" by now; it marks the answer finished, so the connection can be reused
        if resp.will_close:
            self.close()
        return body.buf  # not copied: ~190 KB a reading

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


# The /proc fields a sample records (`Sampler._take`) and the counters its rates need
# (`procfs.vmstat_rates`); read by name, not by parsing every line (`procfs.pick_fields`).
MEMINFO_FIELDS = ("MemAvailable", "MemFree", "Cached", "Mlocked", "Shmem", "SwapTotal", "SwapFree")
VMSTAT_FIELDS = ("pswpin", "pswpout", "pgmajfault", "pgfault")


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
    ) -> None:
        if interval_s <= 0:
            raise ValueError(f"interval_s must be > 0, got {interval_s}")
        self.pid = pid
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

    # -- public API ----------------------------------------------------------------------

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
        """Stop sampling; True when the thread ended within `timeout_s`."""
        if self._thread is None:
            return True
        self._stop.set()
        self._wake.set()
        self._thread.join(timeout_s)
        if self._stopped_wall is None:
            self._stopped_wall = time.monotonic()
        return not self._thread.is_alive()

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


def _index_order(idx: str) -> tuple[int, str]:
    return (int(idx), idx) if idx.isdigit() else (1 << 30, idx)


def _round(x: float | None, nd: int = 2) -> float | None:
    return None if x is None else round(x, nd)


# ----------------------------------------------------------------------------- summaries


def _segments(samples: list[Mapping]) -> list[tuple[str, int, int]]:
    """Runs of consecutive samples with the same phase: (phase, first index, last index)."""
    segs: list[tuple[str, int, int]] = []
    for i, s in enumerate(samples):
        ph = s.get("phase")
        if segs and segs[-1][0] == ph:
            segs[-1] = (ph, segs[-1][1], i)
        else:
            segs.append((ph, i, i))
    return segs


def _counter_increase(readings: list[Mapping[str, float]]) -> dict[str, float]:
    """Increase of each counter over consecutive scrapes. A counter absent from a scrape is 0
    (labelled counters appear on first increment); a drop means the server restarted and the
    counter counts from zero again, as in Prometheus' increase()."""
    keys = {k for r in readings for k in r if is_counter_key(k)}
    out: dict[str, float] = {}
    for k in keys:
        total = 0.0
        for a_map, b_map in zip(readings, readings[1:]):
            a, b = a_map.get(k, 0.0), b_map.get(k, 0.0)
            total += b - a if b >= a else b
        out[k] = total
    return out


def _min(values: Iterable[float | None]) -> float | None:
    vs = [v for v in values if v is not None]
    return min(vs) if vs else None


def _max(values: Iterable[float | None]) -> float | None:
    vs = [v for v in values if v is not None]
    return max(vs) if vs else None


def _mean(values: Iterable[float | None]) -> float | None:
    vs = [v for v in values if v is not None]
    return sum(vs) / len(vs) if vs else None


# sglang's storage tier (L3) series (StorageMetricsCollector, labels storage_backend/tp_rank/dp_rank)
STORAGE_COUNTERS = {
    "prefetched_tokens": "sglang:prefetched_tokens_total",  # storage -> host
    "backuped_tokens": "sglang:backuped_tokens_total",  # host -> storage
}
STORAGE_BANDWIDTH_HISTOGRAMS = {"prefetch": "sglang:prefetch_bandwidth", "backup": "sglang:backup_bandwidth"}  # GB/s


def storage_io(counter_deltas: Mapping[str, float]) -> dict[str, float | None] | None:
    """A phase's storage-tier figures from its counter deltas (pure), None when the server
    exported no storage series: prefetched/backuped tokens, ``cached_storage_tokens``
    (``cached_tokens_total`` with a ``cache_source`` starting "storage"), and the mean GB/s of
    sglang's per-operation bandwidth histograms (``prefetch_gbs``, ``backup_gbs``: sum ÷ count)
    with their operation counts. Summed over label sets (ranks)."""
    sums: dict[str, float] = {}
    seen = False
    for key, v in counter_deltas.items():
        name = key.split("{", 1)[0]
        for field, series in STORAGE_COUNTERS.items():
            if name == series:
                sums[field] = sums.get(field, 0.0) + v
                seen = True
        for op, series in STORAGE_BANDWIDTH_HISTOGRAMS.items():
            for part in ("_sum", "_count"):
                if name == series + part:
                    sums[op + part] = sums.get(op + part, 0.0) + v
                    seen = True
        if name == "sglang:cached_tokens_total" and 'cache_source="storage' in key:
            sums["cached_storage_tokens"] = sums.get("cached_storage_tokens", 0.0) + v
            seen = True
    if not seen:
        return None
    out: dict[str, float | None] = {
        "prefetched_tokens": sums.get("prefetched_tokens", 0.0),
        "backuped_tokens": sums.get("backuped_tokens", 0.0),
        "cached_storage_tokens": sums.get("cached_storage_tokens", 0.0),
    }
    for op in STORAGE_BANDWIDTH_HISTOGRAMS:
        n = sums.get(op + "_count", 0.0)
        out[op + "_ops"] = n
        out[op + "_gbs"] = sums.get(op + "_sum", 0.0) / n if n > 0 else None
    return out


def summarize_samples(samples: Iterable[Mapping]) -> dict[str, dict]:
    """Samples (in time order) → {phase: summary}, phases in order of first appearance.

    Per phase: n_samples, duration_s, min_mem_available_kib, min_mem_free_kib, min_cached_kib,
    min_swap_free_kib, max_mlocked_kib, mean/max_pswpin_kib_s, mean/max_pswpout_kib_s,
    max_pgmajfault_s, max_server_rss_kib, peak_gpu_mem_used_mib ({gpu index (str): MiB}),
    max_gpu_util_pct ({index: %}), peak_server_gpu_mem_mib ({index: MiB} of the server's own
    processes, where NVML listed them), gpus_sampled (the GPU indices the phase's samples read,
    as strings), gpu_selection (the last ``gpu_selection`` record in effect during the phase, or
    None), counter_deltas ({series: increase}), gauges_max, and storage (`storage_io` of the
    deltas: the storage tier's tokens and GB/s, None without storage series).

    A phase may occur in several runs (e.g. idle again later); its figures cover all of them.
    Counter deltas of a run start at the last sample before it (the previous phase's last
    sample) when there is one, else at the run's first sample; a counter absent from a scrape
    is 0 (sglang creates labelled counters on first increment). Samples without counters
    (scrape failed or disabled) are ignored for deltas. duration_s spans the same start to the
    run's last sample.
    """
    samples = list(samples)
    segs = _segments(samples)
    out: dict[str, dict] = {}
    per_phase: dict[str, list[Mapping]] = {}
    deltas: dict[str, dict[str, float]] = {}
    durations: dict[str, float] = {}
    for ph, i0, i1 in segs:
        seg = samples[i0 : i1 + 1]
        per_phase.setdefault(ph, []).extend(seg)
        start_t = samples[i0 - 1]["t_ns"] if i0 > 0 else seg[0]["t_ns"]
        durations[ph] = durations.get(ph, 0.0) + (seg[-1]["t_ns"] - start_t) / 1e9
        # counters: last scraped sample before the run (or the run's first), to the run's last
        start_c = None
        for j in range(i0 - 1, -1, -1):
            if samples[j].get("counters") is not None:
                start_c = samples[j]["counters"]
                break
        with_c = [s["counters"] for s in seg if s.get("counters") is not None]
        acc = deltas.setdefault(ph, {})
        if with_c:
            readings = ([start_c] if start_c is not None else []) + with_c
            for k, v in _counter_increase(readings).items():
                acc[k] = acc.get(k, 0.0) + v

    selection_of: dict[str, dict | None] = {}
    in_effect: dict | None = None
    for s in samples:  # a selection record holds from its sample on
        in_effect = s.get("gpu_selection") or in_effect
        selection_of[s.get("phase")] = in_effect

    for ph, ss in per_phase.items():
        gpu_peak: dict[str, float] = {}
        gpu_util: dict[str, float] = {}
        own_peak: dict[str, float] = {}
        for s in ss:
            for g in s.get("gpus") or []:
                idx = str(g.get("index"))
                used = g.get("mem_used_mib")
                if used is not None and used > gpu_peak.get(idx, -math.inf):
                    gpu_peak[idx] = used
                util = g.get("util_pct")
                if util is not None and util > gpu_util.get(idx, -math.inf):
                    gpu_util[idx] = util
                own = g.get("server_mem_mib")
                if own is not None and own > own_peak.get(idx, -math.inf):
                    own_peak[idx] = own
        sampled = sorted({str(g.get("index")) for s in ss for g in s.get("gpus") or []}, key=_index_order)
        gauges: dict[str, float] = {}
        for s in ss:
            for k, v in (s.get("counters") or {}).items():
                if not is_counter_key(k) and (k not in gauges or v > gauges[k]):
                    gauges[k] = v
        out[ph] = {
            "n_samples": len(ss),
            "duration_s": round(durations[ph], 3),
            "min_mem_available_kib": _min(s.get("mem_available_kib") for s in ss),
            "min_mem_free_kib": _min(s.get("mem_free_kib") for s in ss),
            "min_cached_kib": _min(s.get("cached_kib") for s in ss),
            "min_swap_free_kib": _min(s.get("swap_free_kib") for s in ss),
            "max_mlocked_kib": _max(s.get("mlocked_kib") for s in ss),
            "mean_pswpin_kib_s": _mean(s.get("pswpin_kib_s") for s in ss),
            "max_pswpin_kib_s": _max(s.get("pswpin_kib_s") for s in ss),
            "mean_pswpout_kib_s": _mean(s.get("pswpout_kib_s") for s in ss),
            "max_pswpout_kib_s": _max(s.get("pswpout_kib_s") for s in ss),
            "max_pgmajfault_s": _max(s.get("pgmajfault_s") for s in ss),
            "max_server_rss_kib": _max(s.get("server_rss_kib") for s in ss),
            "peak_gpu_mem_used_mib": gpu_peak,
            "max_gpu_util_pct": gpu_util,
            "peak_server_gpu_mem_mib": own_peak,
            "gpus_sampled": sampled,
            "gpu_selection": selection_of.get(ph),
            "counter_deltas": dict(sorted(deltas.get(ph, {}).items())),
            "gauges_max": dict(sorted(gauges.items())),
            "storage": storage_io(deltas.get(ph, {})),
        }
    return out

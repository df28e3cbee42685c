"""A simulated host under the simulated server: its memory, page cache, swap and container limit,
written as /proc/meminfo- and /proc/vmstat-shaped files that the harness's sampler reads in place
of the real ones (``server.sim.host``; the runner points the sampler at them).

The model (seed 000: pinned host pools push out the page cache, then other processes' memory, and
the host swaps at idle):
- Before launch: ``MemTotal`` T, ``MemAvailable`` A (``--sim-mem-available-gib``), page cache C
  (``--sim-host-page-cache-gib``, the files the host's other work keeps warm), other processes'
  memory ``T - A`` (anonymous, swappable), free ``A - C``.
- While weights load, MemAvailable is ``--sim-host-load-dip-gib`` lower (the loader's memory);
  sglang's host-memory rule reads it then (`harness.sim.hostmem`). The dip ends once the pools
  are allocated.
- A pinned pool P (every rank's) is taken from free memory first, then from the page cache (which
  shrinks: page cache pushed out), then from other processes' memory (swapped out, up to the
  swap's size; past it the kernel's OOM killer ends the server). Pinned pages are neither
  reclaimable nor swappable.
- At idle the host's other work touches its memory again: every second ``REFAULT_PER_S`` of what
  was swapped out is swapped back in (``pswpin``) and out again (``pswpout``), and the same share
  of the page cache it lost is read back from disk (``pgmajfault``) -- the idle swap-in seed 000
  saw at ratio 2. Without pushed-out memory both rates are 0.
- The container (``--sim-host-cgroup-limit-gib``): pinned pages are charged to it; a pool past the
  limit is OOM-killed while it allocates. sglang's own check reads the host's MemAvailable (psutil
  reads /proc/meminfo), so it does not refuse such a pool.
MemAvailable is modelled as free + page cache (the kernel's estimate, without its watermarks).
"""

from __future__ import annotations

import os
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

GIB = 1024**3
PAGE = 4096
REFAULT_PER_S = 0.02  # share of pushed-out memory the host's other work touches again per second
HOST_DIR_ENV = "HARNESS_SIM_HOST_DIR"  # where the files go
HOST_DIR_NAME = "sim_host"  # the runner's choice: this folder in the variant's run folder
WRITE_INTERVAL_S = 0.1


class CgroupOomKill(RuntimeError):
    """The container's limit was passed while a pool was pinned: the kernel kills the server."""


@dataclass
class HostState:
    mem_total: int
    mem_available: int  # before launch
    page_cache: int
    swap_total: int
    load_dip: int
    cgroup_limit: int | None
    pinned: int = 0
    loading: bool = False

    def figures(self) -> dict[str, int]:
        """Free, cache, swapped and available bytes now."""
        free0 = self.mem_available - self.page_cache
        deficit = self.pinned + (self.load_dip if self.loading else 0) - free0
        free = max(0, -deficit)
        cache = self.page_cache - max(0, min(self.page_cache, deficit))
        swapped = max(0, deficit - self.page_cache)
        return {
            "free": free,
            "cache": cache,
            "swapped": min(swapped, self.swap_total),
            "over": max(0, swapped - self.swap_total),
            "available": free + cache,
            "cache_lost": self.page_cache - cache,
        }


def meminfo_text(s: HostState) -> str:
    f = s.figures()
    kib = lambda b: int(b) // 1024  # noqa: E731
    rows = [
        ("MemTotal", s.mem_total),
        ("MemFree", f["free"]),
        ("MemAvailable", f["available"]),
        ("Buffers", 0),
        ("Cached", f["cache"]),
        ("Mlocked", 0),
        ("Shmem", 0),
        ("SwapTotal", s.swap_total),
        ("SwapFree", s.swap_total - f["swapped"]),
    ]
    return "".join(f"{name}:{kib(v):>16} kB\n" for name, v in rows)


class SimulatedHost:
    """The host's state and a thread writing its files every `WRITE_INTERVAL_S`."""

    def __init__(self, state: HostState, directory: Path) -> None:
        self.state = state
        self.dir = directory
        self.dir.mkdir(parents=True, exist_ok=True)
        self._counters = {"pswpin": 0.0, "pswpout": 0.0, "pgmajfault": 0.0}
        self._lock = threading.Lock()
        self._io = threading.Lock()  # one writer of the files at a time (the thread, pin, close)
        self._stop = threading.Event()
        self._last = time.monotonic()
        self.write()
        self._thread = threading.Thread(target=self._run, name="sim-host", daemon=True)
        self._thread.start()

    @classmethod
    def from_args(cls, args) -> SimulatedHost | None:
        if args.host_mem_total_gib is None:
            return None
        directory = os.environ.get(HOST_DIR_ENV) or tempfile.mkdtemp(prefix="harness-sim-host-")
        state = HostState(
            mem_total=int(args.host_mem_total_gib * GIB),
            mem_available=int((args.mem_available_gib or args.host_mem_total_gib) * GIB),
            page_cache=int(args.host_page_cache_gib * GIB),
            swap_total=int(args.host_swap_gib * GIB),
            load_dip=int(args.host_load_dip_gib * GIB),
            cgroup_limit=int(args.host_cgroup_limit_gib * GIB) if args.host_cgroup_limit_gib is not None else None,
        )
        return cls(state, Path(directory))

    def mem_available_at_load(self) -> int:
        """What sglang's rule reads while weights load."""
        return max(0, self.state.mem_available - self.state.load_dip)

    def set_loading(self, loading: bool) -> None:
        with self._lock:
            self.state.loading = loading
        self.write()

    def pin(self, nbytes: int) -> None:
        """Pin `nbytes` more (every rank's pool); raises CgroupOomKill past the container's limit
        or past what swap can make room for."""
        with self._lock:
            self.state.pinned += int(nbytes)
            over_cgroup = self.state.cgroup_limit is not None and self.state.pinned > self.state.cgroup_limit
            over_host = self.state.figures()["over"] > 0
        self.write()
        if over_cgroup:
            raise CgroupOomKill(
                f"Memory cgroup out of memory: {self.state.pinned / 1e9:.2f} GB pinned over the container's "
                f"{self.state.cgroup_limit / 1e9:.2f} GB limit; oom-kill of the server (SIMULATED)"
            )
        if over_host:
            raise CgroupOomKill(
                f"Out of memory: {self.state.pinned / 1e9:.2f} GB pinned and no swap left; oom-kill of the server (SIMULATED)"
            )

    def _tick(self) -> None:
        now = time.monotonic()
        dt, self._last = now - self._last, now
        f = self.state.figures()
        if not self.state.loading:
            self._counters["pswpin"] += f["swapped"] / PAGE * REFAULT_PER_S * dt
            self._counters["pswpout"] += f["swapped"] / PAGE * REFAULT_PER_S * dt
            self._counters["pgmajfault"] += f["cache_lost"] / PAGE * REFAULT_PER_S * dt

    def write(self) -> None:
        """Both files, each replaced whole (a reader never sees half a file)."""
        with self._lock:
            self._tick()
            mem = meminfo_text(self.state)
            vm = "".join(f"{k} {int(v)}\n" for k, v in self._counters.items())
        with self._io:
            for name, text in (("meminfo", mem), ("vmstat", vm)):
                tmp = self.dir / f".{name}.tmp"
                tmp.write_text(text, encoding="ascii")
                os.replace(tmp, self.dir / name)

    def _run(self) -> None:
        while not self._stop.wait(WRITE_INTERVAL_S):
            try:
                self.write()
            except OSError:
                return  # the folder went away (the run was removed): nothing more to show

    def close(self) -> None:
        """The server exits: its pools are unpinned."""
        self._stop.set()
        with self._lock:
            self.state.pinned = 0
            self.state.loading = False
        try:
            self.write()
        except OSError:
            pass

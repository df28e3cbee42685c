"""Variants side by side on one host: ``harness run --gpus 0,1,...`` (or ``--gpus auto``).

The variants of a run are independent (each its own server, its own folder; parity pairs OFF
with ON from their files once all have run), so a host with several GPUs need not run them one
after another. The scheduler here gives each variant as many GPUs of the set as its ``tp_size``
asks, in the scenario's order, starting every variant that fits while others run (a later,
smaller variant fills GPUs an earlier, larger one is waiting for). Each variant runs in its own
thread, its server launched with ``CUDA_VISIBLE_DEVICES`` set to its GPUs (the simulator ignores
the variable; the harness sets and records it all the same: status.json ``gpu_ids``, the
manifest's ``gpus``). Its cooldown checks its own GPUs only; MemAvailable, page cache and swap
are the host's, shared by every variant that runs meanwhile: the samples say ``system_shared``,
the summary's sampling says so, and the cooldown does not judge host memory.

Signals stay the main thread's (`harness.run.signals.Signals`): the main thread schedules and waits;
an interrupt there reaches :meth:`Lanes.interrupt`, which, for every running variant, waits for
its thread to be out of a server spawn (:meth:`Lane.spawning`, the lane's form of
``Signals.defer``), stops its server and sampler and marks it ``interrupted``; then it waits a
bounded time for the threads to unwind: a lane's serving window ends as an interrupt within
0.1 s of its lane being stopped (`harness.run.serving_window.until_stopped`, `LaneStopped`: the rows it recorded
are kept, nothing more is sent). Nothing new starts after an interrupt: no variant, and
no server in a running one (a ``storage_restart`` restart or a start-up retry in the lane's thread
is refused: the harness may exit before that lane ends, and the server would outlive it).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from harness.core.errors import BadInput

if TYPE_CHECKING:
    from harness.scenario.models import Variant

log = logging.getLogger(__name__)

JOIN_AFTER_INTERRUPT_S = 30.0  # how long an interrupted run waits for its variants' threads to unwind
_local = threading.local()


def parse_gpus(text: str) -> list[str] | None:
    """``--gpus``: ``auto`` (None: ask the host) or a comma-separated list of GPU ids as
    ``CUDA_VISIBLE_DEVICES`` takes them (indices or UUIDs), no repeats. BadInput on anything else."""
    text = (text or "").strip()
    if text == "auto":
        return None
    ids = [x.strip() for x in text.split(",")]
    if not ids or any(not x or any(c.isspace() for c in x) for x in ids):
        raise BadInput(f"--gpus {text!r}: give GPU ids separated by commas (0,1,2,3) or auto")
    if len(set(ids)) != len(ids):
        raise BadInput(f"--gpus {text!r}: a GPU is named twice")
    return ids


def host_gpus(environ: dict[str, str] | None = None, inventory: Callable[[], list[dict]] | None = None) -> list[str]:
    """``--gpus auto``: the GPUs this harness may use — its own ``CUDA_VISIBLE_DEVICES`` when
    set, else every GPU NVML lists. BadInput when there is none."""
    from harness.host import nvml

    env = os.environ if environ is None else environ
    visible = nvml.parse_cuda_visible_devices(env.get("CUDA_VISIBLE_DEVICES"))
    if visible is not None:
        ids = [x for x in visible if x]
    else:
        ids = [str(g["index"]) for g in (inventory or nvml.gpu_inventory)()]
    if not ids:
        raise BadInput("--gpus auto: no GPU found (NVML lists none); give the ids, e.g. --gpus 0,1")
    return ids


def gpus_needed(variant: Variant) -> int:
    return max(1, variant.tp_size)


def check_fits(variants: Sequence[Any], gpu_ids: Sequence[str]) -> None:
    """BadInput (exit 2, before anything starts) naming a variant that needs more GPUs than the set has."""
    for v in variants:
        if gpus_needed(v) > len(gpu_ids):
            raise BadInput(
                f"variant {v.name} needs {gpus_needed(v)} GPUs (tp_size) but --gpus gives {len(gpu_ids)}: "
                + ",".join(gpu_ids)
            )


def take(needs: Sequence[int], free: Sequence[str], gpu_ids: Sequence[str]) -> list[tuple[int, list[str]]]:
    """The scheduling rule (pure): which of the waiting variants (their GPU counts ``needs``, in
    the run's order) start now on the ``free`` GPUs, and on which — each in turn that fits, the
    lowest free ids of the set first. A later, smaller variant takes GPUs an earlier one is too
    wide for yet."""
    left = [g for g in gpu_ids if g in free]
    out = []
    for i, need in enumerate(needs):
        if need <= len(left):
            out.append((i, left[:need]))
            left = left[need:]
    return out


def planned_wall_s(variants: Sequence[tuple[float, int]], gpu_ids: Sequence[str]) -> float:
    """The wall time of variants (``(seconds, gpus)`` each, in the run's order) run side by side
    on ``gpu_ids`` by :func:`take` (``--dry-run --gpus``)."""
    queue = list(range(len(variants)))
    free = list(gpu_ids)
    running: list[tuple[float, int, list[str]]] = []  # (ends at, index, gpus)
    now = 0.0
    while queue or running:
        for i, ids in take([variants[j][1] for j in queue], free, gpu_ids):
            j = queue[i]
            running.append((now + variants[j][0], j, ids))
            free = [g for g in free if g not in ids]
        queue = [j for j in queue if not any(r[1] == j for r in running)]
        if not running:  # nothing fits at all (check_fits refuses this before a run)
            raise BadInput("a variant needs more GPUs than the set has")
        running.sort()
        end, _, ids = running.pop(0)
        now = end
        free += ids
    return now


def current_spawn_guard():
    """The running lane's :meth:`Lane.spawning` in a lane's thread, else None (the main thread
    defers signals instead)."""
    lane = getattr(_local, "lane", None)
    return lane.spawning() if lane is not None else None


class LaneStopped(Exception):
    """A lane's serving window ended because the run's interrupt stopped the lane (raised as
    KeyboardInterrupt once its event loop has closed)."""


def current_lane_stopped() -> Callable[[], bool] | None:
    """In a lane's thread, whether the run's interrupt has stopped this lane (its server is gone:
    what the lane would send after it measures nothing); None in the main thread (there the signal
    itself interrupts)."""
    lane = getattr(_local, "lane", None)
    return (lambda: lane.stopped) if lane is not None else None


@dataclass
class Lane:
    """One variant running on its GPU set, in its own thread."""

    index: int  # 1-based position in the run
    variant: Any
    gpu_ids: list[str]
    state: Any  # the runner's per-variant run state (server, sampler, status to stop and mark)
    env_not_clean: bool = False
    outcome: Any = None
    unclean: bool = False
    error: BaseException | None = None
    thread: threading.Thread | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)
    stopped: bool = False  # the run's interrupt (or a harness error) stopped this lane's server

    @contextmanager
    def spawning(self) -> Iterator[None]:
        """Held while the lane's thread starts a server and records who it is: an interrupt
        waits for it, so it never stops a server half-known. Once the lane is stopped it starts
        none (KeyboardInterrupt in the lane's thread): a restart or a retry after the interrupt
        would bring up a server that nobody stops (the harness exits meanwhile)."""
        with self.lock:
            if self.stopped:
                raise KeyboardInterrupt("the run was interrupted: no server starts after it")
            yield


class LaneProgress:
    """What a side-by-side variant tells the run's one `harness.run.progress.Progress`: its phases as
    lines that name it and its GPUs (the run's status line is shared), its notes, its requests."""

    def __init__(self, progress: Any, lane: Lane) -> None:
        self.progress = progress
        self.label = f"{lane.variant.name} [GPU {','.join(lane.gpu_ids)}]"
        self._last: str | None = None

    def phase(self, name: str) -> None:
        if name != self._last:
            self._last = name
            self.progress.note(f"{self.label}: {name}")

    def note(self, text: str) -> None:
        self.progress.note(text)

    def request_done(self, n: int = 1) -> None:
        self.progress.request_done(n)


class Lanes:
    """The scheduler (see the module docstring). ``run_one(lane) -> (outcome, unclean)`` runs one
    variant (in the lane's thread); ``on_start(lane)`` / ``on_end(lane)`` are called in the main
    thread."""

    def __init__(
        self,
        gpu_ids: Sequence[str],
        run_one: Callable[[Lane], tuple[Any, bool]],
        make_state: Callable[[], Any],
        on_start: Callable[[Lane], None] = lambda lane: None,
        on_end: Callable[[Lane], None] = lambda lane: None,
        poll_s: float = 0.1,
    ) -> None:
        self.gpu_ids = list(gpu_ids)
        self.run_one = run_one
        self.make_state = make_state
        self.on_start = on_start
        self.on_end = on_end
        self.poll_s = poll_s
        self.running: list[Lane] = []
        self.cancelled = threading.Event()
        self.unclean_gpus: set[str] = set()  # GPUs whose last variant's cooldown did not come back

    def _thread(self, lane: Lane) -> None:
        _local.lane = lane
        try:
            lane.outcome, lane.unclean = self.run_one(lane)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the main thread
            lane.error = exc
            with lane.lock:  # a harness error in this lane: its own server goes now, not with the run
                try:
                    lane.state.stop_processes()
                except Exception:  # noqa: BLE001
                    log.exception("could not stop variant %s", lane.variant.name)
        finally:
            with lane.lock:
                lane.state.vpaths = lane.state.status = None  # finished: an interrupt must not relabel it
            _local.lane = None

    def run(self, variants: Sequence[Any]) -> list[Lane]:
        """Run every variant; the lanes in the order they finished. A harness error in a lane
        (not a server failure: those are results) stops the others and is raised here."""
        queue = list(enumerate(variants, 1))
        free = list(self.gpu_ids)
        done: list[Lane] = []
        while (queue or self.running) and not self.cancelled.is_set():
            started: list = []
            for k, ids in take([gpus_needed(v) for _, v in queue], free, self.gpu_ids):
                item = queue[k]
                i, v = item
                free = [g for g in free if g not in ids]
                lane = Lane(i, v, ids, self.make_state(), env_not_clean=any(g in self.unclean_gpus for g in ids))
                started.append(item)
                self.on_start(lane)
                lane.thread = threading.Thread(target=self._thread, args=(lane,), name=f"variant-{v.name}", daemon=True)
                self.running.append(lane)
                lane.thread.start()
            queue = [item for item in queue if item not in started]
            for lane in list(self.running):
                lane.thread.join(timeout=self.poll_s / max(1, len(self.running)))
                if lane.thread.is_alive():
                    continue
                self.running.remove(lane)
                free += lane.gpu_ids
                if lane.error is not None:
                    self.stop_processes()
                    raise lane.error
                self.unclean_gpus.difference_update(lane.gpu_ids)
                if lane.unclean:
                    self.unclean_gpus.update(lane.gpu_ids)
                done.append(lane)
                self.on_end(lane)
        return done

    # -- what the runner's interrupt and error paths call (the main thread) ------------------
    def _each_running(self, what: Callable[[Any], None], stop: bool = True) -> None:
        self.cancelled.set()
        for lane in list(self.running):
            with lane.lock:
                lane.stopped = lane.stopped or stop
                try:
                    what(lane.state)
                except Exception:  # noqa: BLE001 - every other lane is still stopped
                    log.exception("could not stop variant %s", lane.variant.name)

    def interrupt(self) -> None:
        """Stop every running variant's server, mark it interrupted, and give the threads a bounded
        time to unwind."""
        self._each_running(lambda state: state.interrupt())
        self.join(JOIN_AFTER_INTERRUPT_S)

    def stop_processes(self) -> None:
        self._each_running(lambda state: state.stop_processes())

    def scrub_logs(self) -> None:
        self._each_running(lambda state: state.scrub_logs(), stop=False)

    def join(self, timeout_s: float) -> None:
        import time

        end = time.monotonic() + timeout_s
        for lane in list(self.running):
            if lane.thread is not None:
                lane.thread.join(timeout=max(0.0, end - time.monotonic()))

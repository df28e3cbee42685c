"""Where a variant's GPU time goes: each variant holds its GPUs (its ``tp_size``, or the GPU set
``harness run --gpus`` gave it) from the moment it starts to the moment its cooldown ends, and
that span is split into five buckets that always add up to it:

startup   launching the server until it is ready (every attempt, a failed attempt's stop included)
work      the workloads (every repeat): what the verdict is computed from
quality   the quality arm (asks, churn, re-asks, the control)
cooldown  stopping the server and waiting for host and GPU memory to come back
idle      everything else the harness waits for: preflight, the idle window, asking the server
          its info, the final liveness check

Inside the buckets, the harness's own waits are named (``waits_s``): the idle window, the final
liveness wait, the server's stop, the cooldown's wait for memory, the quality arm's churn —
what item 4 of issue 28 cuts where it buys no measurement (benchmarks/gpu_minutes.py).

GPU-minutes = seconds x GPUs / 60, per bucket. :class:`PhaseClock` is switched from bucket to
bucket by the runner and the serving window (one bucket at a time, so the buckets add up to the
wall time exactly); its ``to_json()`` is ``status.json``'s ``timing``. :func:`run_gpu_time` adds a
run's variants up (the report, the console's end-of-run table, ``harness history``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from harness.store import results
from harness.store.manifest import read_manifest

STARTUP = "startup"
WORK = "work"
QUALITY = "quality"
COOLDOWN = "cooldown"
IDLE = "idle"
BUCKETS = (STARTUP, WORK, QUALITY, COOLDOWN, IDLE)


class PhaseClock:
    """Seconds per bucket of one variant, on the monotonic clock. ``enter(bucket)`` charges the
    time since the last switch to the bucket that was current and makes ``bucket`` current;
    ``stop()`` charges the last stretch and freezes the clock. Thread-safe (the serving window's
    event loop and the runner may switch it)."""

    def __init__(self, gpus: int, gpu_ids: Iterable[str] | None = None, clock=time.monotonic, start: str = IDLE):
        if start not in BUCKETS:
            raise ValueError(f"unknown bucket {start!r}")
        self.gpus = max(0, int(gpus))
        self.gpu_ids = list(gpu_ids) if gpu_ids is not None else None
        self._clock = clock
        self._lock = threading.Lock()
        self._t0 = self._last = clock()
        self._current: str | None = start
        self._wait: str | None = None
        self.seconds = dict.fromkeys(BUCKETS, 0.0)
        self.waits: dict[str, float] = {}

    @property
    def current(self) -> str | None:
        return self._current

    def enter(self, bucket: str, wait: str | None = None) -> None:
        """From now on charge ``bucket``; ``wait``: the harness wait this stretch is (its seconds
        also go to ``waits_s[wait]``)."""
        if bucket not in BUCKETS:
            raise ValueError(f"unknown bucket {bucket!r}")
        with self._lock:
            if self._current is None:  # stopped: nothing more is charged
                return
            self._charge_locked()
            self._current, self._wait = bucket, wait

    def stop(self) -> None:
        with self._lock:
            if self._current is not None:
                self._charge_locked()
                self._current = None

    def _charge_locked(self) -> None:
        now = self._clock()
        self.seconds[self._current] += now - self._last
        if self._wait is not None:
            self.waits[self._wait] = self.waits.get(self._wait, 0.0) + now - self._last
        self._last = now

    def wall_s(self) -> float:
        with self._lock:
            return (self._last if self._current is None else self._clock()) - self._t0

    def to_json(self) -> dict[str, Any]:
        """``status.json``'s ``timing``: wall seconds, seconds and GPU-minutes per bucket."""
        with self._lock:
            seconds, waits = dict(self.seconds), dict(self.waits)
            if self._current is not None:  # still running: the open stretch counts where it is
                seconds[self._current] += self._clock() - self._last
                if self._wait is not None:
                    waits[self._wait] = waits.get(self._wait, 0.0) + self._clock() - self._last
        out = timing_json(seconds, self.gpus, self.gpu_ids)
        out["waits_s"] = {k: round(v, 3) for k, v in waits.items()}
        return out


def timing_json(seconds: Mapping[str, float], gpus: int, gpu_ids: list[str] | None = None) -> dict[str, Any]:
    """The ``timing`` object of a variant from its seconds per bucket (also the estimate's form)."""
    secs = {b: round(float(seconds.get(b, 0.0)), 3) for b in BUCKETS}
    wall = round(sum(secs.values()), 3)
    out: dict[str, Any] = {
        "wall_s": wall,
        "gpus": int(gpus),
        "seconds": secs,
        "gpu_minutes": {b: round(s * gpus / 60.0, 4) for b, s in secs.items()},
        "gpu_minutes_total": round(wall * gpus / 60.0, 4),
    }
    if gpu_ids is not None:
        out["gpu_ids"] = list(gpu_ids)
    return out


def variant_gpus(variant: Any, gpu_ids: list[str] | None = None) -> int:
    """How many GPUs a variant holds: its GPU set where it has one, else its ``tp_size``."""
    if gpu_ids:
        return len(gpu_ids)
    return max(1, int(getattr(variant, "tp_size", 1) or 1))


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


@dataclass(frozen=True)
class StoredTiming:
    """A ``timing`` object read back (what `PhaseClock.to_json` / `timing_json` wrote)."""

    gpus: Any  # as stored (an int; absent in a damaged file)
    gpu_ids: tuple[str, ...]
    gpu_minutes: Mapping[str, float]  # {bucket: GPU-minutes}, numbers only
    gpu_minutes_total: float | None
    waits_s: Mapping[str, float]  # {wait: seconds}, numbers only
    raw: Mapping[str, Any]

    @classmethod
    def from_json(cls, data: Any) -> StoredTiming | None:
        if not isinstance(data, Mapping):
            return None

        def numbers(key: str) -> dict[str, float]:
            block = data.get(key)
            return {k: v for k, v in block.items() if _number(v)} if isinstance(block, Mapping) else {}

        total = data.get("gpu_minutes_total")
        return cls(
            gpus=data.get("gpus"),
            gpu_ids=tuple(data.get("gpu_ids") or ()),
            gpu_minutes=numbers("gpu_minutes"),
            gpu_minutes_total=total if _number(total) else None,
            waits_s=numbers("waits_s"),
            raw=data,
        )


def run_gpu_time(timings: Mapping[str, Mapping | None], run_wall_s: float | None = None) -> dict[str, Any]:
    """A run's GPU time from its variants' status.json ``timing`` (``{name: timing}``, None where
    the status has none): per variant its timing, the sum of GPU-minutes per bucket, and the run's
    wall time where given. GPU-minutes add up across variants whether they ran one after another
    or side by side; the wall time does not."""
    per: dict[str, Any] = {}
    total = dict.fromkeys(BUCKETS, 0.0)
    waits: dict[str, float] = {}
    for name, stored in timings.items():
        timing = StoredTiming.from_json(stored)
        if timing is None:
            per[name] = None
            continue
        per[name] = dict(timing.raw)
        for w, s in timing.waits_s.items():
            waits[w] = waits.get(w, 0.0) + float(s) * int(timing.gpus or 0) / 60.0
        for b in BUCKETS:
            if b in timing.gpu_minutes:
                total[b] += float(timing.gpu_minutes[b])
    measured = total[WORK] + total[QUALITY]
    all_minutes = sum(total.values())
    return {
        "variants": per,
        "gpu_minutes": {b: round(v, 4) for b, v in total.items()},
        "gpu_minutes_total": round(all_minutes, 4),
        "measured_fraction": round(measured / all_minutes, 4) if all_minutes > 0 else None,
        "waits_gpu_minutes": {w: round(v, 4) for w, v in waits.items()},
        "wall_s": None if run_wall_s is None else round(float(run_wall_s), 3),
    }


def run_folder_gpu_time(run: results.RunPaths) -> dict[str, Any]:
    """`run_gpu_time` of a run folder: its variants' status.json (the
    manifest's order) and its wall time from the manifest's ``created_at`` to COMPLETE."""
    manifest = read_manifest(run.root)
    timings: dict[str, Any] = {}
    for entry in manifest.variants:
        vpaths = run.variant(entry.name)
        try:
            status = results.read_json_object(vpaths.status) if vpaths.status.exists() else {}
        except results.ResultsError:
            status = {}
        timings[entry.name] = status.get("timing")
    wall = None
    try:
        start = datetime.fromisoformat(str(manifest.created_at))
        end = datetime.fromisoformat(str(results.read_json(run.complete)["at"]))
        wall = (end - start).total_seconds()
    except (KeyError, ValueError, OSError, results.ResultsError):
        pass
    return run_gpu_time(timings, wall)


HISTORY_PREFIX = "gpu_time."  # history's series of a variant's GPU time (lower is better)


def history_values(timing: Mapping | None) -> dict[str, float]:
    """{series name: value} of one variant's status.json ``timing`` for ``harness history``: its
    GPU-minutes in all and per bucket (``gpu_time.gpu_minutes_total``, ``gpu_time.startup_gpu_minutes``,
    ...); nothing without one."""
    stored = StoredTiming.from_json(timing)
    if stored is None:
        return {}
    out = {}
    if stored.gpu_minutes_total is not None:
        out[HISTORY_PREFIX + "gpu_minutes_total"] = float(stored.gpu_minutes_total)
    for b, v in stored.gpu_minutes.items():
        if b in BUCKETS:
            out[f"{HISTORY_PREFIX}{b}_gpu_minutes"] = float(v)
    return out


def table_lines(gpu_time: Mapping[str, Any]) -> list[str]:
    """The console's GPU-minutes table (of `run_gpu_time`'s result): one row per variant, then the total."""
    head = ("variant", "GPUs", *BUCKETS, "total")
    rows: list[tuple[str, ...]] = []
    for name, stored in gpu_time["variants"].items():
        t = StoredTiming.from_json(stored) if stored else None
        if t is None:
            rows.append((name, "-", *("-" for _ in BUCKETS), "-"))
            continue
        rows.append(
            (
                name,
                f"{t.gpus} ({','.join(t.gpu_ids)})" if t.gpu_ids else str(t.raw.get("gpus", "")),
                *(f"{float(t.gpu_minutes.get(b, 0.0)):.2f}" for b in BUCKETS),
                f"{float(t.gpu_minutes_total or 0.0):.2f}",
            )
        )
    tot = gpu_time["gpu_minutes"]
    rows.append(
        (
            "total",
            "",
            *(f"{float(tot.get(b, 0.0)):.2f}" for b in BUCKETS),
            f"{gpu_time.get('gpu_minutes_total', 0.0):.2f}",
        )
    )
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]

    def fmt(r: tuple[str, ...]) -> str:
        return "  ".join(c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))).rstrip()

    lines = ["GPU-minutes by where they went:", fmt(head), *(fmt(r) for r in rows)]
    waits = gpu_time["waits_gpu_minutes"]
    if waits:
        lines.append("of them the harness's own waits: " + ", ".join(f"{w} {v:.2f}" for w, v in waits.items()))
    share = gpu_time.get("measured_fraction")
    wall = gpu_time.get("wall_s")
    tail = []
    if share is not None:
        tail.append(f"{share * 100:.0f} % of them measured (work + quality)")
    if wall is not None:
        tail.append(f"run wall time {wall / 60:.1f} min")
    if tail:
        lines.append("; ".join(tail))
    return lines

"""The harness's own stalls: time this process was not running at all (SIGSTOPped, a frozen VM or
container, a box too loaded to schedule it).

Time limits on a server (a request's ``request_timeout_s``, the hang watch's silence and probes)
are measured on the monotonic clock, which runs on while the harness itself is stopped: a harness
paused 14 s found every in-flight request past its deadline and gave a healthy server up as
``server_hung``. So one daemon thread ticks every :data:`TICK_S`; a tick that comes more than
:data:`GAP_S` late is a stall, and :func:`stalled_s` is their running total (a stall still going
on, seen by whichever thread wakes first, included). A limit on the server waits out the stalls
that fell inside it, so it measures the server and never the harness.
"""

from __future__ import annotations

import threading
import time

TICK_S = 0.05
GAP_S = 0.5  # a tick this late is the harness not running (a busy interpreter switches in 5 ms)


class _Meter:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last = time.monotonic()
        self._total = 0.0
        self._thread: threading.Thread | None = None

    def _late(self, now: float) -> float:
        gap = now - self._last
        return gap - TICK_S if gap > GAP_S else 0.0

    def _tick(self) -> None:
        while True:
            time.sleep(TICK_S)
            with self._lock:
                now = time.monotonic()
                self._total += self._late(now)
                self._last = now

    def stalled_s(self) -> float:
        with self._lock:
            if self._thread is None:
                self._last = time.monotonic()
                self._thread = threading.Thread(target=self._tick, name="harness-stall-meter", daemon=True)
                self._thread.start()
            return self._total + self._late(time.monotonic())


_METER = _Meter()


def stalled_s() -> float:
    """Seconds this process has been stalled since the meter started (on the first call): take it
    at the start of a limit and again at its end; the difference is the harness's, not the server's."""
    return _METER.stalled_s()

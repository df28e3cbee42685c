"""Show where a run is: variant i of N, its workload/phase, requests done of total, the request
rate, the elapsed time and an ETA.

A nightly matrix takes hours; nobody should have to wonder whether it hangs, or how long it has
left. On a terminal one status line is redrawn every second (cut to the terminal's width, so
that it never wraps). In a CI log (not a TTY) a plain line is printed at every phase change and
the same line, with the rate, the ETA and the time spent in the phase, every ``heartbeat_s``
seconds while a phase lasts. Under GitHub Actions (``GITHUB_ACTIONS=true``) each variant's lines
sit in a collapsible ``::group::``; its outcome line (:meth:`Progress.end_variant`) comes after
the group, so a collapsed log still shows every variant's outcome.

The request counts: the runner gives each variant's expected total
(``harness.run.estimate.request_counts``) to :meth:`Progress.variant`, and every recorded request
calls :meth:`Progress.request_done`. The rate is measured from the variant's first finished
request (server start-up is not in it); the ETA is the variant's remaining requests at that rate.
"""

from __future__ import annotations

import os
import shutil
import sys
import threading
import time
from typing import TextIO


def fmt_duration(seconds: float) -> str:
    """``MM:SS``, or ``H:MM:SS`` from an hour on."""
    seconds = max(0, int(seconds))
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m:02d}:{s:02d}"


_fmt_elapsed = fmt_duration  # the older name


def plural(n: int, word: str, words: str | None = None) -> str:
    """``1 variant``, ``2 variants`` (``words``: an irregular plural)."""
    return f"{n} {word if n == 1 else (words or word + 's')}"


class Progress:
    """The run's console progress (see the module docstring). Thread-safe: requests finish on the
    workloads' event loop while a ticker thread redraws the line."""

    def __init__(
        self,
        total_variants: int,
        stream: TextIO | None = None,
        live: bool | None = None,
        heartbeat_s: float = 30.0,
        groups: bool | None = None,
        width: int | None = None,
        clock=time.monotonic,
    ):
        self.stream = stream or sys.stderr
        self.live = _isatty(self.stream) if live is None else live
        self.groups = (not self.live and os.environ.get("GITHUB_ACTIONS") == "true") if groups is None else groups
        self.total = total_variants
        self.heartbeat_s = heartbeat_s
        self._width = width
        self._clock = clock
        self.t0 = clock()
        self._lock = threading.Lock()
        self._variant = ""
        self._index = 0
        self._phase = "starting"
        self._phase_t0 = self.t0
        self._last_beat = self.t0
        self._expected: int | None = None
        self._done = 0
        self._first_done_t: float | None = None
        self._last_done_t: float | None = None
        self._group_open = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._tick, name="progress", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------ what the runner calls

    def variant(self, index: int, name: str, requests: int | None = None, start_phase: str = "launching") -> None:
        """Variant ``index`` of the run starts; ``requests``: how many it will record (None:
        unknown, then no total and no ETA are shown); ``start_phase``: what the harness does first
        (`harness.store.variant_status.ServerOrigin.start_phase`: launching, or attaching to a running
        server)."""
        with self._lock:
            self._close_group_locked()
            self._index, self._variant = index, name
            self._expected = requests
            self._done = 0
            self._first_done_t = self._last_done_t = None
            if self.groups:
                self._write(f"::group::variant {index}/{self.total} {name}")
                self._group_open = True
            self._set_phase_locked(start_phase)

    def phase(self, name: str) -> None:
        with self._lock:
            self._set_phase_locked(name)

    def request_done(self, n: int = 1) -> None:
        """``n`` more requests of the current variant finished (recorded, with or without error)."""
        with self._lock:
            now = self._clock()
            if self._first_done_t is None:
                self._first_done_t = now
            self._last_done_t = now
            self._done += n

    def end_variant(self, text: str) -> None:
        """The variant's outcome line, after its ``::group::`` (so it shows when collapsed)."""
        with self._lock:
            self._close_group_locked()
            self._emit(f"[{fmt_duration(self._clock() - self.t0)}] {text}", newline=True)

    def note(self, text: str) -> None:
        """A line that stays (e.g. a variant's outcome)."""
        with self._lock:
            self._emit(f"[{fmt_duration(self._clock() - self.t0)}] {text}", newline=True)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)
        with self._lock:
            if self.live:  # the status line goes; the notes (outcomes) stay
                self.stream.write("\r\x1b[2K")
                self.stream.flush()
            self._close_group_locked()

    # ------------------------------------------------------------------ the line

    def rate(self) -> float | None:
        """Requests per second since the variant's first finished request (None before two)."""
        if self._first_done_t is None or self._last_done_t is None or self._done < 2:
            return None
        span = self._clock() - self._first_done_t
        return (self._done - 1) / span if span > 0 else None

    def eta_s(self) -> float | None:
        """Seconds until the variant's expected requests are done at the current rate."""
        r = self.rate()
        if r is None or r <= 0 or self._expected is None:
            return None
        return max(0, self._expected - self._done) / r

    def line(self, detail: bool) -> str:
        """The status line; ``detail``: with the rate, the ETA and the time in the phase (the
        heartbeat and the live line; a phase-change line has only counts)."""
        now = self._clock()
        parts = [
            f"[{fmt_duration(now - self.t0)}] variant {self._index}/{self.total} {self._variant}",
            self._phase + (f" {fmt_duration(now - self._phase_t0)}" if detail else ""),
        ]
        if self._expected or self._done:
            req = f"requests {self._done}" + (f"/{self._expected}" if self._expected else "")
            if detail:
                r, eta = self.rate(), self.eta_s()
                if r is not None:
                    req += f" {r:.1f} req/s"
                if eta is not None:
                    req += f" ETA {fmt_duration(eta)}"
            parts.append(req)
        return " | ".join(parts)

    # ------------------------------------------------------------------ output

    def _set_phase_locked(self, name: str) -> None:
        self._phase = name
        self._phase_t0 = self._last_beat = self._clock()
        self._emit(self.line(detail=self.live), newline=not self.live)

    def _close_group_locked(self) -> None:
        if self._group_open:
            self._write("::endgroup::")
            self._group_open = False

    def _columns(self) -> int:
        if self._width is not None:
            return self._width
        return shutil.get_terminal_size((120, 24)).columns

    def _write(self, text: str) -> None:
        if self.live:
            text = "\r\x1b[2K" + text
        self.stream.write(text + "\n")
        self.stream.flush()

    def _emit(self, text: str, newline: bool) -> None:
        if self.live:
            if not newline:
                text = text[: max(10, self._columns() - 1)]
            self.stream.write("\r\x1b[2K" + text + ("\n" if newline else ""))
        else:
            self.stream.write(text + "\n")
        self.stream.flush()

    def _tick(self) -> None:
        while not self._stop.wait(1.0):
            self.tick()

    def tick(self) -> None:
        """Redraw the live line, or print a heartbeat line when one is due (the ticker thread
        calls this every second)."""
        with self._lock:
            now = self._clock()
            if self.live:
                self._emit(self.line(detail=True), newline=False)
            elif now - self._last_beat >= self.heartbeat_s:
                self._last_beat = now
                self._emit(self.line(detail=True), newline=True)


def _isatty(stream: TextIO) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False

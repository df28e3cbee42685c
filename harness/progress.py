"""Show where a run is: variant i of N, phase, elapsed time.

A nightly matrix takes hours; nobody should have to wonder whether it hangs. On a terminal one
status line is redrawn every second; in a CI log (not a TTY) a plain line is printed at every
phase change and a heartbeat line every ``heartbeat_s`` seconds while a phase lasts.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import TextIO


def _fmt_elapsed(seconds: float) -> str:
    seconds = int(seconds)
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m:02d}:{s:02d}"


class Progress:
    def __init__(self, total_variants: int, stream: TextIO | None = None, live: bool | None = None,
                 heartbeat_s: float = 30.0):
        self.stream = stream or sys.stderr
        self.live = self.stream.isatty() if live is None else live
        self.total = total_variants
        self.heartbeat_s = heartbeat_s
        self.t0 = time.monotonic()
        self._lock = threading.Lock()
        self._variant = ""
        self._index = 0
        self._phase = "starting"
        self._phase_t0 = self.t0
        self._last_beat = self.t0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._tick, name="progress", daemon=True)
        self._thread.start()

    def _line(self) -> str:
        now = time.monotonic()
        return (f"[{_fmt_elapsed(now - self.t0)}] variant {self._index}/{self.total} {self._variant}"
                f" | {self._phase} ({_fmt_elapsed(now - self._phase_t0)})")

    def _emit(self, text: str, newline: bool) -> None:
        if self.live:
            self.stream.write("\r\x1b[2K" + text + ("\n" if newline else ""))
        else:
            self.stream.write(text + "\n")
        self.stream.flush()

    def variant(self, index: int, name: str) -> None:
        with self._lock:
            self._index, self._variant = index, name
            self._set_phase_locked("launching")

    def phase(self, name: str) -> None:
        with self._lock:
            self._set_phase_locked(name)

    def _set_phase_locked(self, name: str) -> None:
        self._phase = name
        self._phase_t0 = self._last_beat = time.monotonic()
        self._emit(self._line(), newline=not self.live)

    def note(self, text: str) -> None:
        """A line that stays (e.g. a variant's outcome)."""
        with self._lock:
            self._emit(f"[{_fmt_elapsed(time.monotonic() - self.t0)}] {text}", newline=True)

    def _tick(self) -> None:
        while not self._stop.wait(1.0):
            with self._lock:
                now = time.monotonic()
                if self.live:
                    self._emit(self._line(), newline=False)
                elif now - self._last_beat >= self.heartbeat_s:
                    self._last_beat = now
                    self._emit(self._line() + " ...still running", newline=True)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)
        if self.live:
            with self._lock:
                self.stream.write("\n")
                self.stream.flush()

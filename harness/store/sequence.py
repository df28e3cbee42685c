"""The order of a scenario's runs, whatever the wall clock did.

Run ids and ``created_at`` are stamps of the wall clock; a clock set back between nights (an NTP
step, a box restored from a snapshot) gave the next night an older id than the night before, and
``--baseline latest`` found no earlier run. So each run folder is numbered when it is made
(:data:`SEQUENCE_FILE`: 1, 2, ... after every run of its scenario already there, under a lock on
the scenario's folder, `harness.store.results.create_run_dir`) and runs sort by that number.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

SEQUENCE_FILE = ".sequence"


def run_sequence(root: Path) -> int:
    """The run's number among its scenario's runs; 0 for a run made before runs were numbered, or
    whose number cannot be read (it then sorts by its id, before the numbered ones)."""
    try:
        with open(Path(root) / SEQUENCE_FILE, "rb") as f:
            text = f.read(32).decode("ascii").strip()
    except (OSError, UnicodeDecodeError):
        return 0
    return int(text) if text.isdigit() and len(text) <= 18 else 0


def run_order(root: Path) -> tuple[int, str]:
    """The key that sorts runs of one scenario oldest first: the run's number, then its id."""
    return run_sequence(root), Path(root).name


@contextmanager
def numbering(scenario_dir: Path) -> Iterator[int]:
    """Hold the scenario folder's lock and give the next run's number (two harnesses starting at
    once get two numbers); the run's folder and its :data:`SEQUENCE_FILE` are made inside."""
    fd = os.open(scenario_dir, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield 1 + max((run_sequence(p) for p in Path(scenario_dir).iterdir() if p.is_dir()), default=0)
    finally:
        os.close(fd)  # closing the descriptor drops the lock

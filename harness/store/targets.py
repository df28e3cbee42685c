"""Where the harness writes a file it was asked to write (a report, `--junit`, `--markdown`): a
regular file or a path where nothing is yet, replaced atomically. Anything else is refused before
a byte is written, in one line naming it (exit 2): an atomic replace would turn /dev/null into a
file, a symbolic link into a copy beside what it pointed at, and a FIFO nobody reads would hang."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from harness.store.results import ResultsError


def file_kind(mode: int) -> str:
    """What an ``lstat`` mode is, in words."""
    for test, name in (
        (stat.S_ISLNK, "a symbolic link"),
        (stat.S_ISDIR, "a folder"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return name
    return "not a regular file"


def regular_target(path: Path, what: str, under: Path | None = None) -> Path:
    """``path`` when it is a regular file or not there yet; `ResultsError` (exit 2) naming
    ``what`` otherwise. ``under``: the folder the caller was given (it may be a link, the user's
    choice); every folder between it and ``path`` that is there must be a real folder, not a
    link that would carry the write elsewhere."""
    path = Path(path)
    folders = []
    if under is not None:
        parent = path.parent
        while parent != Path(under) and parent != parent.parent:
            folders.append(parent)
            parent = parent.parent
    for p in [*reversed(folders), path]:
        try:
            st = os.lstat(p)
        except FileNotFoundError:
            break
        ok = stat.S_ISREG(st.st_mode) if p == path else stat.S_ISDIR(st.st_mode)
        if not ok:
            need = "a regular file: give a file path" if p == path else "a folder: nothing was written"
            raise ResultsError(f"{what} {p}: {file_kind(st.st_mode)}, not {need}")
    return path

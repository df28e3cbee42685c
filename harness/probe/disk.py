"""Sequential write and read bandwidth of the disk under a directory (the storage tier's, L3).

One job: measure what the filesystem holding sglang's file storage backend can do at best, so a
run's storage I/O (sglang's prefetch/backup GB/s) can be read as a fraction of it
(`harness.analysis.bandwidth.storage_fraction`). No GPU, no subprocess: plain file I/O in this process.

Method: one temporary file in the directory (or its nearest existing parent), written in 4 MiB
blocks of random bytes and read back, each timed once. ``O_DIRECT`` where the filesystem takes it
(the page cache is bypassed both ways; the write ends with ``fsync``); else buffered writes ending
with ``fsync`` and a read after ``posix_fadvise(DONTNEED)`` (``method`` says which: on tmpfs the
"disk" is memory). The file is removed afterwards whatever happens.
"""

from __future__ import annotations

import mmap
import os
import time
from pathlib import Path
from typing import Any

BLOCK = 4 << 20  # bytes per write/read call (aligned: O_DIRECT needs aligned buffers and sizes)


def existing_dir(path: str | os.PathLike) -> Path:
    """``path`` if it is a directory, else its nearest existing parent (sglang creates the file
    backend's directory at start-up, so before a run it may not exist yet)."""
    p = Path(path).expanduser().absolute()
    while not p.is_dir() and p != p.parent:
        p = p.parent
    return p


def _open(path: Path, flags: int, direct: bool) -> int:
    return os.open(path, flags | (getattr(os, "O_DIRECT", 0) if direct else 0), 0o600)


def _write(path: Path, buf: mmap.mmap, blocks: int, direct: bool) -> float:
    fd = _open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, direct)
    try:
        t0 = time.perf_counter()
        for _ in range(blocks):
            if os.write(fd, buf) != BLOCK:
                raise OSError("short write")
        os.fsync(fd)
        return time.perf_counter() - t0
    finally:
        os.close(fd)


def _read(path: Path, buf: mmap.mmap, blocks: int, direct: bool) -> float:
    fd = _open(path, os.O_RDONLY, direct)
    try:
        if not direct and hasattr(os, "posix_fadvise"):
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)  # drop the cached pages first
        t0 = time.perf_counter()
        for _ in range(blocks):
            if os.readv(fd, [buf]) != BLOCK:
                raise OSError("short read")
        return time.perf_counter() - t0
    finally:
        os.close(fd)


def disk_bandwidth(path: str | os.PathLike, nbytes: int) -> dict[str, Any]:
    """{ok, path, nbytes, method, write_gbs, read_gbs, write_s, read_s, error}: GB/s are 10^9
    bytes per second of one sequential pass each way over ``nbytes`` (rounded up to 4 MiB)."""
    where = existing_dir(path)
    blocks = max(1, -(-int(nbytes) // BLOCK))
    out: dict[str, Any] = {
        "ok": False,
        "path": str(where),
        "requested_path": str(path),
        "nbytes": blocks * BLOCK,
        "method": None,
        "write_gbs": None,
        "read_gbs": None,
        "write_s": None,
        "read_s": None,
        "error": None,
    }
    target = where / f".harness-disk-probe-{os.getpid()}"
    buf = mmap.mmap(-1, BLOCK)  # page-aligned, as O_DIRECT needs
    try:
        buf.write(os.urandom(BLOCK))  # incompressible
        try:
            w = _write(target, buf, blocks, direct=True)
            direct = True
        except OSError:  # EINVAL: the filesystem refuses O_DIRECT (tmpfs, some overlays)
            target.unlink(missing_ok=True)
            w = _write(target, buf, blocks, direct=False)
            direct = False
        r = _read(target, buf, blocks, direct)
        total = blocks * BLOCK
        out.update(
            ok=True,
            method="O_DIRECT" if direct else "buffered+fsync",
            write_s=round(w, 6),
            read_s=round(r, 6),
            write_gbs=round(total / w / 1e9, 3) if w > 0 else None,
            read_gbs=round(total / r / 1e9, 3) if r > 0 else None,
        )
    except OSError as e:
        out["error"] = f"{type(e).__name__}: {e}"
    finally:
        buf.close()
        try:
            target.unlink(missing_ok=True)
        except OSError:
            pass
    return out

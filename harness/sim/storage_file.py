"""The storage tier's files, as sglang's file backend (``HiCacheFile``) keeps them, so the tier
outlives the server process (``--sim-storage-persist``; a restart keeps the directory).

As read in sglang's ``mem_cache/hicache_storage.py`` (HiCacheFile): one file per page,
``<page key><suffix>.bin`` in ``$SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR``, the suffix
``_<model name with / as ->_<tp rank>_<tp size>`` (MLA models: the model name only); the page key
is a hash chained over the page's token ids and every page before it, so the page size is in it.
Neither the KV dtype nor the host layout is in the key: a read fills a buffer of the page's
expected bytes (``readinto``) and only a *short* file is refused ("Short read"); a longer one
(written with a wider dtype) is served as if it were this server's. The simulator does the same
with sparse files of the page's byte size: another model (or TP size) finds no file, a narrower
dtype's file is refused, a wider dtype's is served -- which is what the harness's
``storage_restart`` workload must catch.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

log = logging.getLogger("sglang.srt.mem_cache.hicache_storage")

MASK = (1 << 64) - 1


class FileStorage:
    """The files of one server's storage tier (rank 0's view; every rank keys alike)."""

    def __init__(self, directory: str, model_name: str, tp_size: int, page_bytes: int, mla: bool = False) -> None:
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        name = "-".join(str(model_name).split("/"))
        self.suffix = f"_{name}" if mla else f"_{name}_0_{tp_size}"
        self.page_bytes = int(page_bytes)
        self.refused_short = 0

    def path(self, chain: int) -> Path:
        return self.dir / f"{chain & MASK:016x}{self.suffix}.bin"

    def write(self, chain: int) -> None:
        """A page backed up: its file, the page's bytes long (sparse), replaced whole."""
        path = self.path(chain)
        tmp = path.with_name(path.name + f".tmp.{os.getpid()}")
        with open(tmp, "wb") as f:
            f.truncate(self.page_bytes)
        os.replace(tmp, path)

    def remove(self, chain: int) -> None:
        try:
            self.path(chain).unlink()
        except FileNotFoundError:
            pass

    def existing(self) -> list[int]:
        """The chains of this server's files already in the directory (oldest first) that a read
        would serve: a file shorter than this server's page is refused, as sglang's short read."""
        found: list[tuple[float, int]] = []
        for entry in os.scandir(self.dir):
            name = entry.name
            if not (name.endswith(self.suffix + ".bin") and entry.is_file()):
                continue
            try:
                chain = int(name[: -len(self.suffix + ".bin")], 16)
                st = entry.stat()
            except (ValueError, OSError):
                continue
            if st.st_size < self.page_bytes:
                self.refused_short += 1
                continue
            found.append((st.st_mtime, chain - (1 << 64) if chain >= 1 << 63 else chain))  # hash() is signed
        if self.refused_short:
            log.warning(
                "HiCacheFile: %d pages under %s are shorter than this server's %d-byte page (Short read): not served",
                self.refused_short,
                self.dir,
                self.page_bytes,
            )
        return [chain for _, chain in sorted(found)]

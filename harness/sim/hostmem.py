"""Host-pool sizing, sglang's host-memory rule, and a real (scaled) allocation.

One job: decide whether a HiCache host pool may be allocated, exactly as sglang decides it,
and then really take a scaled share of that memory so a sampler watching MemAvailable sees
the pool arrive and leave.

The rule (sglang ``pool_host/base.py``): ``budget = (MemAvailable - 10 GiB) // ranks_per_host``;
a pool whose ``size * bytes_per_token`` exceeds it raises
``ValueError: Not enough host memory available. Requesting X GB but only have Y GB free.
Please reduce the size of the hierarchical cache.`` (GB = 1e9 bytes, 2 decimals).  The KV pool
is checked first, then (hybrid models) the mamba pool, which is how seed 000 failed: KV
succeeded on both ranks, mamba did not.  Newer sglang takes one MemAvailable snapshot and
deducts the pools already granted; we do the same, so the outcome does not depend on how much
of a pool the simulator really touches (``--sim-host-mem-scale``).
"""

from __future__ import annotations

import mmap
from dataclasses import dataclass
from pathlib import Path

import numpy as np

RESERVE_BYTES = 10 * 1024**3  # sglang HICACHE_HOST_MEMORY_RESERVE_BYTES
_PAGE = 4096


def read_mem_available_bytes(meminfo: Path = Path("/proc/meminfo")) -> int:
    """MemAvailable from /proc/meminfo, in bytes (0 when unreadable)."""
    try:
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def not_enough_message(requested_bytes: int, available_bytes: int) -> str:
    """sglang's exact refusal text."""
    return (
        f"Not enough host memory available. Requesting "
        f"{requested_bytes / 1e9:.2f} GB but only have "
        f"{available_bytes / 1e9:.2f} GB free. Please reduce the "
        f"size of the hierarchical cache."
    )


class HostMemoryError(ValueError):
    """Raised with sglang's message when a pool does not fit the budget."""


@dataclass
class HostBudget:
    """One MemAvailable snapshot shared by all pools of this server (all TP ranks)."""

    mem_available_bytes: int
    ranks: int
    granted_bytes_per_rank: int = 0
    reserve_bytes: int = RESERVE_BYTES  # a patched build may lower it (seed 000's fork did)

    def available_per_rank(self) -> int:
        return (self.mem_available_bytes - self.reserve_bytes) // max(1, self.ranks) - self.granted_bytes_per_rank

    def claim(self, requested_bytes: int) -> None:
        """Grant ``requested_bytes`` (per rank) or raise HostMemoryError with sglang's text."""
        available = self.available_per_rank()
        if requested_bytes > available:
            raise HostMemoryError(not_enough_message(requested_bytes, available))
        self.granted_bytes_per_rank += requested_bytes


def host_pool_tokens(device_tokens: int, ratio: float, size_gb: float, bytes_per_token: int, page_size: int) -> int:
    """Host pool size in tokens, as sglang computes it (ratio or GB, then one page more)."""
    if size_gb > 0:
        size = int(size_gb * 1e9 // max(1, bytes_per_token))
    else:
        size = int(device_tokens * ratio)
    return (size // page_size + 1) * page_size


class TouchedBuffer:
    """An anonymous mapping of ``nbytes`` with every page written, freed by ``close``."""

    def __init__(self, nbytes: int) -> None:
        self.nbytes = max(0, int(nbytes))
        self._map: mmap.mmap | None = None
        if self.nbytes >= _PAGE:
            self._map = mmap.mmap(-1, self.nbytes)
            # writing one byte per page faults every page in: RSS and MemAvailable move
            np.frombuffer(self._map, dtype=np.uint8)[::_PAGE] = 1

    def close(self) -> None:
        if self._map is not None:
            self._map.close()
            self._map = None

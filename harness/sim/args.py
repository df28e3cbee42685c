"""The simulator's resolved command line: what ``cli`` builds from argv and ``server`` runs.

A module of its own so that data flows one way: ``cli`` (argv -> SimArgs, then hands it to
``server.run``) and ``server`` both import it, and ``server`` never imports ``cli``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from harness.sim.faults import Fault, FaultArg

# --sim-step-ms-per-request: how much each running request adds to a decode step (ms), the cost
# model's batch-size-dependent term (harness.sim.engine.CostModel; docs/simulator.md)
DEFAULT_STEP_MS_PER_REQUEST = 0.1
# the storage tier (L3) of the cost model: an NVMe drive's order of magnitude (docs/simulator.md)
DEFAULT_STORAGE_GB = 1000.0
DEFAULT_STORAGE_READ_GBS = 2.0
DEFAULT_STORAGE_WRITE_GBS = 1.0


@dataclass
class SimArgs:
    """Resolved arguments; ``sglang`` holds every sglang flag by its dest name, ``faults`` each
    requested fault with its argument (None for a fault that takes none)."""

    sglang: dict[str, Any]
    time_scale: float
    host_mem_scale: float
    mem_available_gib: float | None
    startup_s: float
    faults: dict[Fault, FaultArg | None] = field(default_factory=dict)
    step_ms_per_request: float = DEFAULT_STEP_MS_PER_REQUEST  # ms a running request adds to a decode step
    storage_gb: float = DEFAULT_STORAGE_GB  # L3 capacity (GB of KV) when a storage backend is named
    storage_read_gbs: float = DEFAULT_STORAGE_READ_GBS  # storage -> host prefetch bandwidth
    storage_write_gbs: float = DEFAULT_STORAGE_WRITE_GBS  # host -> storage backup bandwidth

    def __getattr__(self, name: str) -> Any:
        # convenience: args.max_total_tokens etc. read straight from the sglang namespace
        try:
            return self.__dict__["sglang"][name]
        except KeyError as exc:
            raise AttributeError(name) from exc

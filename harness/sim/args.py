"""The simulator's resolved command line: what ``cli`` builds from argv and ``server`` runs.

A module of its own so that data flows one way: ``cli`` (argv -> SimArgs, then hands it to
``server.run``) and ``server`` both import it, and ``server`` never imports ``cli``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from harness.sim.faults import Fault, FaultArg

# --sim-step-ms-per-request: how much each running request adds to a decode step (ms), the cost
# model's batch-size-dependent term (harness.sim.cost.CostModel; docs/simulator.md)
DEFAULT_STEP_MS_PER_REQUEST = 0.1
# the storage tier (L3) of the cost model: an NVMe drive's order of magnitude (docs/simulator.md)
DEFAULT_STORAGE_GB = 1000.0
DEFAULT_STORAGE_READ_GBS = 2.0
DEFAULT_STORAGE_WRITE_GBS = 1.0
# --sim-h2d-gbs: the pretend host's pinned H2D, an H200's PCIe Gen5 x16 (docs/probe.md); a host hit's load-back
DEFAULT_H2D_GBS = 55.0

SIM_VERSION = "0.5.17-sim"
# The version the simulator reports (/get_server_info, its log banner): part of the simulated
# *build*, like $HARNESS_SIM_BUILD, so two sim builds of one run can report two versions
# (harness/run/builds.py checks the reported one against what the build declares).
VERSION_ENV = "HARNESS_SIM_VERSION"
# The package folder of a sim build's ``sglang_source`` (set by the launcher, harness/server/process.py):
# the checkout is the simulated code under test, its ``sglang/__init__.py`` may declare more
# ``--sim-*`` flags (``harness.sim.cli.source_build_flags``), so a git history of such checkouts is
# a history of simulated builds (``harness bisect``).
SOURCE_ENV = "HARNESS_SIM_SOURCE"


def sim_version(environ: Mapping[str, str]) -> str:
    """The version a simulator started with ``environ`` reports."""
    return environ.get(VERSION_ENV) or SIM_VERSION


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
    h2d_gbs: float = DEFAULT_H2D_GBS  # the pretend host's pinned host -> device bandwidth (load-back)
    host_split: str = "each"  # hybrid --hicache-size: "each" pool gets it all, or "proportional" (sglang 0.5.17)
    unmodelled: dict[str, str] = field(default_factory=dict)  # declared flags accepted, not modelled
    capture_s: float = 0.0  # CUDA-graph capture (between "Capture cuda graph begin" and its end)
    register_s_per_gb: float = 0.0  # the host pools' cudaHostRegister, seconds per GB (all ranks)
    warmup_s: float = 0.0  # before the warm-up request
    # a simulated host (harness.sim.host): None = the real host's MemAvailable (or mem_available_gib)
    host_mem_total_gib: float | None = None
    host_page_cache_gib: float = 0.0
    host_swap_gib: float = 0.0
    host_load_dip_gib: float = 0.0
    host_cgroup_limit_gib: float | None = None
    storage_persist: bool = False  # the file backend's pages in its directory (harness.sim.storage_file)
    host_reserve_gib: float = 10.0  # the build's host-memory reserve (sglang's HICACHE_HOST_MEMORY_RESERVE_BYTES)

    def cost_knobs(self) -> dict[str, float]:
        """The cost model's ``--sim-*`` bandwidths and step term (`CostModel.for_model`'s keywords)."""
        return {
            "step_ms_per_request": self.step_ms_per_request,
            "storage_read_gbs": self.storage_read_gbs,
            "storage_write_gbs": self.storage_write_gbs,
            "h2d_gbs": self.h2d_gbs,
        }

    def __getattr__(self, name: str) -> Any:
        # convenience: args.max_total_tokens etc. read straight from the sglang namespace
        try:
            return self.__dict__["sglang"][name]
        except KeyError as exc:
            raise AttributeError(name) from exc

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

    def __getattr__(self, name: str) -> Any:
        # convenience: args.max_total_tokens etc. read straight from the sglang namespace
        try:
            return self.__dict__["sglang"][name]
        except KeyError as exc:
            raise AttributeError(name) from exc

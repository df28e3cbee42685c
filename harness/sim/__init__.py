"""The simulated sglang server: sglang's launch flags, log lines, HTTP API and HiCache behaviour
without a GPU, so the whole harness can be run and tested anywhere (``python -m harness.sim``).

Modules: ``cli`` (flags), ``server`` (start-up, lifetime, faults), ``hostmem`` (host-pool rule
and real scaled allocation), ``cache`` (two-tier page cache), ``engine`` (scheduler and cost
model), ``tokens`` (deterministic model outputs), ``metrics`` (Prometheus), ``app`` (HTTP).
Everything it reports says it is simulated (version ``0.5.17-sim``, ``"simulated": true``).
"""

from harness.sim.cli import main

__all__ = ["main"]

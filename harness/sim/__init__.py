"""The simulated sglang server: sglang's launch flags, log lines, HTTP API and HiCache behaviour
without a GPU, so the whole harness can be run and tested anywhere (``python -m harness.sim``).

Modules: ``cli`` (flags -> ``args.SimArgs``; ``main`` hands them to ``server``), ``server``
(start-up, lifetime, faults), ``app`` (HTTP), ``engine`` (scheduler and cost model), ``cache``
(two-tier page cache), ``hostmem`` (host-pool rule and real scaled allocation), ``tokens``
(deterministic model outputs), ``metrics`` (Prometheus), ``args`` (the resolved command line),
``faults`` (the fault table; a leaf), ``testing`` (run it as a subprocess in tests).  Imports
flow one way, in that order (tests/unit/sim/test_imports.py checks there is no cycle).
Everything it reports says it is simulated (version ``0.5.17-sim``, ``"simulated": true``).
The contract, flags and faults: docs/simulator.md.

Nothing is imported here: the scenario validator imports ``harness.sim.faults`` and must not pull
in the server.
"""

"""The workload kinds: one module each exporting ``KIND``, found by ``harness.workloads.kinds()``."""

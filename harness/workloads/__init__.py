"""Workloads: one module per kind, each `async def run(ctx, cfg) -> None`; `run_workloads` runs a list."""

from harness.workloads.base import (WorkloadContext, WorkloadsOutcome, phase_label, resolve_tokens,
                                    run_workloads)

__all__ = ["WorkloadContext", "WorkloadsOutcome", "phase_label", "resolve_tokens", "run_workloads"]

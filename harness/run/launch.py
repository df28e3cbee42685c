"""A variant's launch as its scenario wants it: `harness.server.process.build_launch_spec` with what
the scenario decides of a launch resolved here, so the server layer never reads the scenario
(``--enable-metrics`` when the sampler reads the server's /metrics)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from harness.server.process import LaunchSpec, build_launch_spec

if TYPE_CHECKING:
    from harness.scenario.models import Scenario, Variant


def metrics_enabled(scenario: Scenario) -> bool:
    """Whether a server is launched with ``--enable-metrics``: the sampler reads its /metrics."""
    return scenario.sampling.enabled and scenario.sampling.server_metrics


def launch_spec(scenario: Scenario, variant: Variant, port: int) -> LaunchSpec:
    """The argv and env of ``variant``'s server on ``port``."""
    return build_launch_spec(variant, port, enable_metrics=metrics_enabled(scenario))

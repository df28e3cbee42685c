"""A variant's launch as its scenario wants it: `harness.server.process.build_launch_spec` with what
the scenario decides of a launch resolved here, so the server layer never reads the scenario
(``--enable-metrics`` when the sampler reads the server's /metrics)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from harness.server.process import LaunchSpec, build_launch_spec

if TYPE_CHECKING:
    from harness.scenario.models import Scenario, Variant


def launch_spec(scenario: Scenario, variant: Variant, port: int) -> LaunchSpec:
    """The argv and env of ``variant``'s server on ``port``."""
    sampling = scenario.sampling
    return build_launch_spec(variant, port, enable_metrics=sampling.enabled and sampling.server_metrics)

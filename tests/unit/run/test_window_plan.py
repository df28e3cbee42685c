"""A variant's serving window is planned once from its scenario (`plan_window`): the pieces the
window hands its stages, each typed."""

from __future__ import annotations

import json

from harness.run.serving_window import plan_window
from harness.scenario.loading import load_scenario_text
from tests.unit.run.scenario_objects import MODELS


def _scenario(**blocks):
    text = {
        "name": "t",
        "server": {"backend": "sim", "model_path": str(MODELS / "llama-tiny")},
        "variants": [{"name": "off"}, {"name": "on", "hicache": {"ratio": 2}}],
        "workloads": [{"kind": "decode"}, {"kind": "cold_prefill", "name": "cold", "prompt_tokens": 64}],
        **blocks,
    }
    return load_scenario_text(json.dumps(text), base_dir="/tmp/scen")


def test_the_plan_carries_what_the_window_reads():
    scn = _scenario(repeats=3, seed=11, sampling={"idle_window_s": 4})
    off, on = scn.expand_variants()
    plan = plan_window(scn, on)
    assert [w.kind for w in plan.workloads] == ["decode", "cold_prefill"]
    assert (plan.repeats, plan.seed, str(plan.scenario_dir)) == (3, 11, "/tmp/scen")
    assert plan.idle_s == 4 and plan.liveness_idle_s == scn.server.liveness_idle_s
    assert plan.watchdog == scn.server.watchdog
    assert plan.quality is None  # quality off: no arm
    assert plan.enable_metrics is (scn.sampling.enabled and scn.sampling.server_metrics)


def test_without_sampling_there_is_no_idle_window():
    scn = _scenario(sampling={"enabled": False, "idle_window_s": 4})
    assert plan_window(scn, scn.expand_variants()[0]).idle_s == 0.0


def test_the_quality_arm_s_role_is_decided_per_variant():
    scn = _scenario(quality={"enabled": True, "baseline_variant": "off", "mode": "token_ids"})
    off, on = scn.expand_variants()
    assert plan_window(scn, off).quality_role == "off" and plan_window(scn, on).quality_role == "on"
    assert plan_window(scn, on).quality is scn.quality

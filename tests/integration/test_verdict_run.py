"""The verdict of whole runs on the simulator: the exit code, the console and verdict.json agree."""

from __future__ import annotations

import json
from pathlib import Path

from harness.cli import main
from tests.conftest import write_scenario

SCENARIO = """\
name: verdicts
server:
  backend: sim
  model_path: models/llama-tiny
  args: {--max-total-tokens: 4096}
  startup_timeout_s: 30
  request_timeout_s: 10
  liveness_idle_s: 0.1
  sim: {time_scale: 0.02, startup_s: 0}
variants:
  - name: off
{extra}
workloads:
  - kind: cold_prefill
    n: 3
    prompt_tokens: 200
    warmup: 0
sampling: {enabled: false}
"""


def _run(tmp_path: Path, extra: str, capsys) -> tuple[int, str, dict]:
    scenario = write_scenario(tmp_path, SCENARIO.replace("{extra}", extra))
    rc = main(["run", str(scenario), "--results-dir", str(tmp_path / "r"), "--no-report"])
    out = capsys.readouterr().out
    (run,) = (tmp_path / "r" / "verdicts").iterdir()
    return rc, out, json.loads((run / "verdict.json").read_text())


def test_every_request_rejected_fails_the_run_naming_the_error(tmp_path, capsys):
    """A run in which every request got HTTP 400 used to exit 0 with every variant ok."""
    rc, out, verdict = _run(tmp_path, "  - name: rejecting\n    sim_faults: [reject_requests=400]", capsys)
    assert rc == 1
    assert verdict["outcome"] == "FAIL" and verdict["exit_code"] == 1
    by_name = {v["variant"]: v for v in verdict["variants"]}
    assert by_name["off"]["outcome"] == "PASS"
    assert by_name["rejecting"]["outcome"] == "FAIL"
    (reason,) = by_name["rejecting"]["reasons"]
    assert (
        reason["code"] == "error_rate" and "3 of 3 requests failed" in reason["text"] and "http_400" in reason["text"]
    )
    assert "verdict: FAIL (exit 1)" in out and "rejecting: 3 of 3 requests failed" in out


def test_a_healthy_run_passes(tmp_path, capsys):
    rc, out, verdict = _run(tmp_path, "", capsys)
    assert rc == 0 and verdict["outcome"] == "PASS" and "verdict: PASS (exit 0)" in out


NEGATIVE_CONTROL = """\
name: verdicts
server:
  backend: sim
  model_path: models/llama-tiny
  args: {--max-total-tokens: 4096, --enable-deterministic-inference: true}
  startup_timeout_s: 30
  request_timeout_s: 10
  liveness_idle_s: 0.1
  sim: {time_scale: 0.02, startup_s: 0}
variants:
  - name: off
  - name: on-broken
    hicache: {ratio: 2}
    sim_faults: [corrupt_host_load]
workloads: []
sampling: {enabled: false}
quality:
  enabled: true
  baseline_variant: off
  tasks: [needle, multi_needle, variable_tracking, aggregation, ordered_codes]
  lengths: ["0.25x pool"]
  samples_per_task: 1
  reasks: 2
  max_new_tokens: 4
  churn_tokens: "1.5x pool"
expectations:
  checks: ["on-broken: quality.parity == FAIL"]
"""


def test_a_negative_control_that_fails_parity_as_declared_passes_the_run(tmp_path, capsys):
    """A variant whose host tier is broken on purpose, with its own check declaring parity FAIL:
    EXPECTED_FAILURE, the run PASS (exit 0). (The same control with a healthy host tier fails its
    check, so the run FAILs: tests/unit/analysis/test_verdict.py, from the same rows.)"""
    scenario = write_scenario(tmp_path, NEGATIVE_CONTROL)
    rc = main(["run", str(scenario), "--results-dir", str(tmp_path / "r"), "--no-report"])
    out = capsys.readouterr().out
    (run,) = (tmp_path / "r" / "verdicts").iterdir()
    verdict = json.loads((run / "verdict.json").read_text())
    by_name = {v["variant"]: v for v in verdict["variants"]}
    assert by_name["on-broken"]["outcome"] == "EXPECTED_FAILURE", by_name
    assert by_name["on-broken"]["reasons"][0]["code"] == "parity_fail_declared"
    assert rc == 0 and verdict["outcome"] == "PASS" and "verdict: PASS (exit 0)" in out

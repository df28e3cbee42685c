"""status.json through the typed VariantStatus, and the summaries run_products assembles: the
files stay what the committed golden runs hold, key order included."""

from __future__ import annotations

import dataclasses
import json

import pytest

from harness.analysis import run_products
from harness.store import results, versions
from harness.store.variant_status import FINAL_STATES, VariantStatus, read_status, variant_state
from tests.conftest import GOLDEN_RUNS
from tests.factories import make_record

GOLDEN_STATUSES = sorted(GOLDEN_RUNS.glob("*/*/status.json"))
assert GOLDEN_STATUSES


def _dump(obj) -> str:
    return json.dumps(obj, indent=2) + "\n"  # as results.write_json_atomic writes it


@pytest.mark.parametrize("path", GOLDEN_STATUSES, ids=lambda p: f"{p.parent.parent.name}/{p.parent.name}")
def test_golden_status_round_trips_byte_for_byte(path):
    assert _dump(read_status(path).to_json()) == path.read_text()


def test_a_fresh_status_has_the_step_keys_only_once_they_happened():
    s = VariantStatus(variant="on", started_at="t0", expect="ok", simulated=True)
    keys = list(s.to_json())
    assert keys == [
        "schema_version",
        "variant",
        "state",
        "cause",
        "cause_detail",
        "log_excerpt",
        "attempts",
        "exit_code",
        "started_at",
        "ready_s",
        "ended_at",
        "pools",
        "expect",
        "expect_cause",
        "expect_met",
        "env_not_clean",
        "preflight",
        "simulated",
    ]
    s = dataclasses.replace(s, server={"pid": 1}, stop={"survivors": []}, cooldown={"clean": True})
    assert list(s.to_json())[-3:] == ["server", "stop", "cooldown"]


def test_a_status_is_a_value():
    s = VariantStatus(variant="on")
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.state = "ok"  # type: ignore[misc]
    done = s.finished("ok", None)
    assert (s.state, s.ended_at, done.state) == ("running", None, "ok") and done.ended_at
    assert s.interrupted().finished("ok", None).state == "interrupted"  # an interrupt is not undone


def test_a_retried_start_keeps_the_failed_attempt_apart():
    s = VariantStatus(
        variant="on",
        expect="ok",
        exit_code=1,
        cause="host_memory",
        cause_detail={"free_gb": 1.0},
        log_excerpt={"l": 1},
        survivors=[],
    )
    s = s.with_failed_attempt_set_aside(1)
    assert s.failed_attempts == [
        {
            "exit_code": 1,
            "cause": "host_memory",
            "cause_detail": {"free_gb": 1.0},
            "log_excerpt": {"l": 1},
            "survivors": [],
            "attempt": 1,
        }
    ]
    assert (s.exit_code, s.cause, s.cause_detail, s.log_excerpt, s.survivors) == (None, None, {}, None, None)
    assert "survivors" not in s.to_json()


@pytest.mark.parametrize(
    "expect,expect_cause,state,cause,met",
    [
        ("ok", None, "ok", None, True),
        ("ok", None, "partial", "server_died", False),
        ("startup_failed", "host_memory", "startup_failed", "host_memory", True),
        ("startup_failed", "host_memory", "startup_failed", "cuda_fault", False),
        ("startup_failed", None, "startup_failed", "cuda_fault", True),
        ("startup_failed", None, "ok", None, False),
    ],
)
def test_finish_judges_the_declared_expectation(expect, expect_cause, state, cause, met):
    s = VariantStatus(variant="v", expect=expect, expect_cause=expect_cause).finished(state, cause)
    assert s.expect_met is met and s.ended_at and s.outcome().expect_met is met


def test_variant_state_needs_a_summary_for_a_final_state(tmp_path):
    run = results.RunPaths(tmp_path)
    assert variant_state(run, "v") == "missing"
    vp = run.variant("v")
    vp.root.mkdir()
    VariantStatus(variant="v", state="ok").write(vp.status)
    assert "ok" in FINAL_STATES and variant_state(run, "v") == "no_summary"
    run_products.write_variant_summary(vp, run_products.null_summary("v", "ok", None))
    assert variant_state(run, "v") == "ok"
    vp.status.write_text('{"state": "o')
    assert variant_state(run, "v") == "unreadable"


def test_null_summary_is_the_golden_one():
    """The golden run's (version 1) null summary, brought to today's version, is what is written now."""
    path = GOLDEN_RUNS / "healthy" / "on-200gb" / "summary.json"
    upgraded = versions.upgrade(path, json.loads(path.read_text()), versions.SUMMARY)
    assert _dump(run_products.null_summary("on-200gb", "startup_failed", "host_memory")) == _dump(upgraded)


def test_measured_summary_assembles_statistics_quality_and_sampling():
    rows = [make_record(workload="w", phase="p")]
    s = run_products.measured_summary("on", "ok", None, rows, 3, {"phases": {}})
    assert list(s)[-6:] == ["schema_version", "variant", "state", "cause", "quality", "sampling"]
    assert s["quality"] == {"n_records": 3} and s["sampling"] == {"phases": {}} and s["workloads"]
    failed = run_products.measured_summary("on", "partial", "server_died", [make_record(error="server_died")], 0, None)
    assert failed["workloads"] is None and failed["quality"] is None  # nothing measured: null, never zero

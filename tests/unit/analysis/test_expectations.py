"""Within-run expectations: metric lookup, pass / fail / not_evaluable / skipped."""

from __future__ import annotations

import json

from harness.analysis.expectations import (
    evaluate_checks,
    evaluate_run_expectations,
    lookup_metric,
)
from harness.analysis.summary import summarize
from harness.scenario import Check
from tests.factories import as_manifest, as_status, as_summary, cold_records, make_record, noisy, write_run

OK = as_status({"state": "ok", "expect": "ok", "expect_met": True, "pools": {"host_pool_gb": 2.5}})


def summary():
    recs = [
        make_record(workload="parallel_prefixes", phase=p, concurrency_group=f"{p}-0", index=i, ttft_ms=t)
        for p, t in (("pass1", 300), ("pass2", 100))
        for i in range(2)
    ]
    recs += [make_record(workload="short_ttft", phase="alone", ttft_ms=12.0)]
    s = summarize(recs)
    s["quality"] = {"parity": {"verdict": "PASS"}}
    s["sampling"] = {
        "phases": {"idle": {"max_pswpin_kib_s": 0.0}, "parallel_prefixes/pass2": {"min_mem_available_kib": 1000}}
    }
    return as_summary(s)


def test_lookup_names():
    s = summary()
    assert lookup_metric("parallel_prefixes.second_pass_speedup", s, OK) > 2.5
    assert lookup_metric("quality.parity", s, OK) == "PASS"
    assert lookup_metric("short_ttft.alone.ttft_ms_p50", s, OK) == 12.0
    assert lookup_metric("short_ttft.alone.ttft_ms", s, OK) == 12.0
    assert lookup_metric("short_ttft.alone.ttft_ms_max", s, OK) == 12.0
    assert lookup_metric("parallel_prefixes.pass2.hits.prompt_tokens", s, OK) == 2000
    assert lookup_metric("sampling.idle.max_pswpin_kib_s", s, OK) == 0.0
    assert lookup_metric("sampling.parallel_prefixes.pass2.min_mem_available_kib", s, OK) == 1000
    assert lookup_metric("pools.host_pool_gb", s, OK) == 2.5
    assert lookup_metric("nope.metric", s, OK) is None


def test_pass_fail_not_evaluable():
    s = summary()
    failed = as_status({"state": "startup_failed", "cause": "cuda_fault", "expect": "ok", "expect_met": False})
    declared = as_status(
        {"state": "startup_failed", "cause": "assertion", "expect": "startup_failed", "expect_met": True}
    )
    checks = [
        Check.parse("on: parallel_prefixes.second_pass_speedup >= 2"),
        Check.parse("on: parallel_prefixes.second_pass_speedup >= 5"),
        Check.parse("on: decode.decode_tok_s >= 1"),
        Check.parse("bad: quality.parity == PASS"),
        Check.parse("gdn: quality.parity == PASS"),
        Check.parse("gone: quality.parity == PASS"),
    ]
    out = evaluate_checks(checks, [("on", s, OK), ("bad", None, failed), ("gdn", None, declared)])
    got = [(r.variant, r.outcome, r.failed) for r in out]
    assert got == [
        ("on", "pass", False),
        ("on", "fail", True),
        ("on", "not_evaluable", True),
        ("bad", "not_evaluable", True),
        ("gdn", "not_evaluable", False),
        ("gone", "skipped", False),
    ]


def test_check_without_variant_skips_the_quality_baseline():
    s = summary()
    out = evaluate_checks(
        [Check.parse("quality.parity == PASS")], [("off", as_summary({}), OK), ("on", s, OK)], quality_baseline="off"
    )
    assert [(r.variant, r.outcome) for r in out] == [("on", "pass")]


def test_run_folder(tmp_path):
    run = write_run(tmp_path, "20260101T000000Z-aaaaaa", {"on": cold_records(noisy(100, 3))})
    (row,) = evaluate_run_expectations(run)
    assert row["outcome"] == "pass" and row["metric"] == "cold_prefill.cold.ttft_ms_p50"


def test_golden_run_evaluates_as_it_did_when_it_ran(golden_run):
    """The stored scenario re-read from the manifest gives the checks the run wrote at its end."""
    run = golden_run("healthy")
    assert evaluate_run_expectations(run) == json.loads((run / "expectations.json").read_text())["checks"]


def test_the_gate_is_read_from_the_stored_scenario():
    """Both ways a stored scenario is re-read: the full parse, and the raw YAML when the full
    parse fails (here: an unset variable in the model path)."""
    from harness.analysis.expectations import scenario_expectations
    from tests.factories import SCENARIO_TEXT

    text = SCENARIO_TEXT + 'gate:\n  - "on: cold_prefill.cold.ttft_ms"\n  - cold_prefill.cold.ttft_ms\n'
    full = scenario_expectations(as_manifest({"scenario": {"text": text, "path": "scenarios/synth.yaml"}}))
    raw = scenario_expectations(
        as_manifest(
            {"scenario": {"text": text.replace("models/llama-tiny", '"${NOPE_UNSET}"'), "path": "scenarios/synth.yaml"}}
        )
    )
    assert raw.source == "yaml" and full.source == "scenario"
    for exp in (full, raw):
        assert [(g.variant, g.metric) for g in exp.gate] == [
            ("on", "cold_prefill.cold.ttft_ms"),
            (None, "cold_prefill.cold.ttft_ms"),
        ]
    assert scenario_expectations(as_manifest({"scenario": {"text": "[1, 2]"}})).gate == []

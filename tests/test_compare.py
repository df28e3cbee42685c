"""harness compare: the pure statistics, the variant states, what is compared (read from the
declarations), and whole comparisons on the golden runs and on synthetic runs built from factory
records (tests/factories.py: `write_run`) where a test needs a situation the golden runs lack."""

from __future__ import annotations

import argparse
import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pandas as pd

from harness import compare as C
from harness import results
from harness.cli import main as harness
from harness.commands.compare import cli_main
from harness.compare.comparison import metric_samples
from harness.compare.runs import run_workload_kinds
from harness.frames import requests_frame
from harness.metrics import METRICS
from harness.workloads import kinds
from tests.factories import cold_records, make_record, noisy, write_run


def args(run: Path, baseline: str | Path, results_dir: Path, junit=None, markdown=None) -> argparse.Namespace:
    return argparse.Namespace(run=str(run), baseline=str(baseline), results_dir=str(results_dir),
                              junit=None if junit is None else str(junit),
                              markdown=None if markdown is None else str(markdown))


def rows(comp: C.Comparison, metric: str = "ttft_ms", variant: str = "on") -> list[C.MetricRow]:
    return [m for m in comp.metrics if m.metric == metric and m.variant == variant]


def frame(tmp_path: Path, recs) -> pd.DataFrame:
    path = tmp_path / "requests.jsonl"
    path.write_text("".join(r.to_json() + "\n" for r in recs))
    return requests_frame(path, "v")


# ---------------------------------------------------------------------------------- pure parts


def test_decide_states():
    base = noisy(100, 8, seed=1)
    assert C.decide(base, noisy(110, 8, seed=2), False, 0.05).state == "regression"
    assert C.decide(base, noisy(90, 8, seed=2), False, 0.05).state == "improved"
    assert C.decide(base, noisy(101, 8, seed=2), False, 0.05).state == "unchanged"
    assert C.decide([100, 101], [110, 111], False, 0.05).state == "insufficient_data"
    assert C.decide([100, 101, 99], [110, 111, 109], False, 0.05).test == "ci_overlap"
    assert C.decide([], [1.0], False, 0.05).state == "not_comparable"
    # direction: higher is better → a 10% drop is the regression
    assert C.decide(base, noisy(90, 8, seed=2), True, 0.05).state == "regression"
    # beyond the threshold but buried in noise: not significant → unchanged
    wide_b = [50, 150, 80, 120, 60, 140, 100, 95]
    wide_c = [55, 160, 85, 130, 66, 150, 108, 104]
    assert C.decide(wide_b, wide_c, False, 0.05).state == "unchanged"


def test_threshold_lookup_order():
    thr = {"ttft_p50": 0.05, "prefill_tok_s": 0.07, "decode.decode.tpot_ms": 0.02, "default": 0.1}
    assert C.threshold_for(thr, "w", "p", "ttft_ms") == (0.05, "ttft_p50")
    assert C.threshold_for(thr, "w", "p", "prefill_tok_s") == (0.07, "prefill_tok_s")
    assert C.threshold_for(thr, "decode", "decode", "tpot_ms") == (0.02, "decode.decode.tpot_ms")
    assert C.threshold_for(thr, "w", "p", "pass_wall_s") == (0.1, "default")
    assert C.threshold_for({}, "w", "p", "ttft_ms") == (C.DEFAULT_THRESHOLD, "harness default")


def test_variant_states():
    ok = {"state": "ok", "expect": "ok", "expect_met": True}
    failed = {"state": "startup_failed", "cause": "cuda_fault", "expect": "ok", "expect_met": False}
    declared = {"state": "startup_failed", "cause": "assertion", "expect": "startup_failed", "expect_met": True}
    assert C.variant_state(ok, failed)[0] == "introduced_failure"
    assert C.variant_state(failed, failed)[0] == "failed"
    assert C.variant_state(failed, ok)[0] == "fixed"
    assert C.variant_state(declared, declared)[0] == "skipped"
    assert C.variant_state(None, ok)[0] == "not_comparable"
    assert C.variant_state(ok, None)[0] == "not_comparable"


def test_markdown_escapes_names():
    comp = C.Comparison("regression", candidate={"scenario": "s", "run_id": "r"},
                        variants=[C.VariantRow("a|<b>", "ok", "startup_failed", "introduced_failure", "x")])
    md = C.to_markdown(comp)
    assert "a\\|&lt;b&gt;" in md and "<b>" not in md


# ------------------------------------------------------------------- what is compared: declarations


def test_compared_metrics_are_the_declared_ones(tmp_path):
    """Each phase gets exactly the metrics declared compared whose condition holds there:
    prefill_tok_s only where the median prompt is long and mostly computed."""
    recs = [make_record(workload="w", phase="long", index=i, prompt_tokens=4000, output_tokens=3) for i in range(3)]
    recs += [make_record(workload="w", phase="short", index=i, prompt_tokens=100, output_tokens=3) for i in range(3)]
    recs += [make_record(workload="w", phase="hit", index=i, prompt_tokens=4000, cached_tokens=3000,
                         output_tokens=3) for i in range(3)]
    got = {(ph, m) for _, ph, m in metric_samples(frame(tmp_path, recs), {})}
    per_request = {m.name for m in METRICS.values() if m.compared and m.per == "request"}
    assert {m for ph, m in got if ph == "long"} == per_request
    assert {m for ph, m in got if ph == "short"} == per_request - {"prefill_tok_s"}
    assert {m for ph, m in got if ph == "hit"} == per_request - {"prefill_tok_s"}


def test_filler_phases_come_from_the_workloads_kind(tmp_path):
    """A phase named like another kind's filler is compared unless the workload's own kind
    declares it filler; the kind comes from the scenario (the name when there is none)."""
    fillers = {(name, p) for name, k in kinds().items() for p in k.filler_phases}
    assert fillers, "no kind declares a filler phase"
    kind, phase = min(fillers)
    recs = [make_record(workload="mine", phase=phase, index=i) for i in range(3)]
    req = frame(tmp_path, recs)
    assert ("mine", phase, "ttft_ms") in metric_samples(req, {})  # unknown kind: nothing is filler
    assert ("mine", phase, "ttft_ms") not in metric_samples(req, {"mine": kind})
    named = frame(tmp_path, [make_record(workload=kind, phase=phase, index=i) for i in range(3)])
    assert not metric_samples(named, {})  # no scenario: the workload's name is its kind


def test_run_workload_kinds_read_the_stored_scenario(golden_run):
    manifest = results.load_run(golden_run("healthy")).manifest
    names = run_workload_kinds(manifest)
    assert names and set(names.values()) <= set(kinds())
    assert run_workload_kinds({"scenario": {"text": "[not, a, mapping]"}}) == {}
    assert run_workload_kinds({}) == {}


def test_derived_figures_compared_are_those_declared_compared(golden_run):
    base, cand = (results.load_run(golden_run(n)) for n in ("healthy", "regressed"))
    comp = C.compare_runs(base, cand)
    names = run_workload_kinds(cand.manifest)
    (variant,) = [v for v in cand.variants if v.name == "on-r2"]
    declared = {(wl, d.name) for wl, k in names.items() for d in kinds()[k].derived if d.compared}
    held = {(wl, name) for wl, w in variant.summary["workloads"].items()
            for name, value in w["derived"].items() if value is not None}
    got = {(m.workload, m.metric) for m in comp.metrics if m.phase == "*" and m.variant == "on-r2"}
    assert got and got == declared & held


# ---------------------------------------------------------------------------------- golden runs


def test_golden_regression_fails_with_ci_outputs(golden_run, tmp_path, monkeypatch):
    base, cand = golden_run("healthy"), golden_run("regressed")
    summary = tmp_path / "step_summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    junit, md = tmp_path / "j.xml", tmp_path / "s.md"
    assert cli_main(args(cand, base, tmp_path, junit, md)) == 1
    data = json.loads((cand / C.COMPARISON_FILE).read_text())
    assert data["verdict"] == "regression" and data["counts"]["regression"] > 0
    failures = [tc for tc in ET.parse(junit).iter("testcase") if tc.find("failure") is not None]
    assert {f.get("name") for f in failures} >= {"ttft_ms", "tpot_ms"}
    assert "regression" in md.read_text() and summary.read_text() == md.read_text()


def test_golden_run_against_itself_passes(golden_run, tmp_path):
    run = golden_run("healthy")
    assert harness(["compare", str(run), "--baseline", str(run)]) == 0
    data = json.loads((run / C.COMPARISON_FILE).read_text())
    assert data["verdict"] == "pass" and {m["state"] for m in data["metrics"]} == {"unchanged"}
    skipped = [v for v in data["variants"] if v["state"] == "skipped"]
    assert skipped and all(v["candidate_state"] == "startup_failed" for v in skipped)  # as declared


def test_interrupted_candidate_is_noted(golden_run):
    comp = C.compare_runs(results.load_run(golden_run("healthy")), results.load_run(golden_run("interrupted")))
    assert any("not COMPLETE" in n for n in comp.notes)


def test_bad_input_names_the_file(golden_run, tmp_path, capsys):
    cand = golden_run("healthy")
    assert cli_main(args(cand, tmp_path / "nope", tmp_path)) == 2
    assert "nope" in capsys.readouterr().err
    m = json.loads((cand / "manifest.json").read_text())
    m["schema_version"] = 99
    (cand / "manifest.json").write_text(json.dumps(m))
    assert cli_main(args(cand, cand, tmp_path)) == 2
    err = capsys.readouterr().err
    assert "manifest.json" in err and "99" in err


def test_harness_error_exits_3(golden_run, tmp_path, monkeypatch):
    run = golden_run("healthy")

    def boom(*a, **k):
        raise RuntimeError("bug")
    monkeypatch.setattr("harness.commands.compare.compare_runs", boom)
    assert cli_main(args(run, run, tmp_path)) == 3


# ----------------------------------------------------------------- situations the golden runs lack


def test_ten_percent_ttft_regression_with_8_repeats(tmp_path):
    base = write_run(tmp_path, "20260101T000000Z-aaaaaa", {"off": cold_records(noisy(100, 8), "off"),
                                                          "on": cold_records(noisy(100, 8, seed=1))})
    cand = write_run(tmp_path, "20260102T000000Z-bbbbbb", {"off": cold_records(noisy(100, 8, seed=5), "off"),
                                                          "on": cold_records(noisy(110, 8, seed=2))})
    comp = C.compare_runs(results.load_run(base), results.load_run(cand))
    (ttft,) = rows(comp)
    assert ttft.state == "regression" and ttft.test == "mann_whitney" and ttft.p_value < 0.05
    assert ttft.threshold_source == "ttft_p50" and 0.07 < ttft.change < 0.13
    assert {m.state for m in rows(comp, variant="off")} <= {"unchanged"}
    assert sorted((m.variant, m.metric) for m in comp.metrics if m.state == "regression") == [
        ("on", "prefill_tok_s"), ("on", "ttft_ms")]


def test_noise_only_passes(tmp_path):
    base = write_run(tmp_path, "20260101T000000Z-aaaaaa", {"on": cold_records(noisy(100, 8, sd=0.02, seed=1))})
    cand = write_run(tmp_path, "20260102T000000Z-bbbbbb", {"on": cold_records(noisy(100, 8, sd=0.02, seed=2))})
    assert cli_main(args(cand, base, tmp_path)) == 0


def test_two_repeats_is_insufficient_data(tmp_path):
    base = write_run(tmp_path, "20260101T000000Z-aaaaaa", {"on": cold_records([100, 101])})
    cand = write_run(tmp_path, "20260102T000000Z-bbbbbb", {"on": cold_records([110, 111])})
    assert cli_main(args(cand, base, tmp_path)) == 0
    comp = C.compare_runs(results.load_run(base), results.load_run(cand))
    assert rows(comp)[0].state == "insufficient_data"


def test_introduced_failure_is_a_regression(tmp_path):
    base = write_run(tmp_path, "20260101T000000Z-aaaaaa", {"off": cold_records(noisy(100, 8), "off"),
                                                          "on": cold_records(noisy(100, 8))})
    cand = write_run(tmp_path, "20260102T000000Z-bbbbbb", {"off": cold_records(noisy(100, 8), "off"),
                                                          "on": "cuda_fault"})
    assert cli_main(args(cand, base, tmp_path)) == 1
    data = json.loads((cand / C.COMPARISON_FILE).read_text())
    on = next(v for v in data["variants"] if v["variant"] == "on")
    assert on["state"] == "introduced_failure"
    assert not [m for m in data["metrics"] if m["variant"] == "on"]  # a failure is never a zero
    # its expectation cannot be evaluated → a failed expectation too
    assert any(e["variant"] == "on" and e["outcome"] == "not_evaluable" and e["failed"] for e in data["expectations"])


def test_latest_picks_the_newest_good_earlier_run(tmp_path):
    good = write_run(tmp_path, "20260101T000000Z-aaaaaa", {"on": cold_records(noisy(100, 8))})
    write_run(tmp_path, "20260102T000000Z-bbbbbb", {"on": "cuda_fault"})  # unexpected failure: not good
    write_run(tmp_path, "20260103T000000Z-cccccc", {"on": cold_records(noisy(100, 8))}, complete=False)
    cand = write_run(tmp_path, "20260104T000000Z-dddddd", {"on": cold_records(noisy(100, 8, seed=4))})
    write_run(tmp_path, "20260105T000000Z-eeeeee", {"on": cold_records(noisy(100, 8))})  # newer than the candidate
    assert C.find_latest_good(tmp_path, "synth", cand) == good
    assert cli_main(args(cand, "latest", tmp_path)) == 0
    assert json.loads((cand / C.COMPARISON_FILE).read_text())["baseline"]["run_id"] == good.name


def test_latest_without_a_baseline_evaluates_expectations_only(tmp_path, capsys):
    cand = write_run(tmp_path, "20260104T000000Z-dddddd", {"on": cold_records(noisy(100, 8))})
    assert cli_main(args(cand, "latest", tmp_path)) == 0
    assert json.loads((cand / C.COMPARISON_FILE).read_text())["verdict"] == "no_baseline"
    assert "evaluating expectations only" in capsys.readouterr().err

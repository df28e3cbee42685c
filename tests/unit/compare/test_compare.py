"""harness compare: the pure statistics (tests chosen by n, minimum detectable effect, calibrated
false-alarm and detection rates), the variant states, what is compared (read from the
declarations) and what gates, the baseline (refused from another scenario, config-changed
variants not compared, ``latest`` = the newest PASS run of the same config), damaged files, and
whole comparisons on the golden runs and on synthetic runs built from factory records
(tests/factories.py: `write_run`) where a test needs a situation the golden runs lack."""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from harness import compare as C
from harness.analysis.frames import requests_frame
from harness.cli import main as harness
from harness.cli.compare import cli_main
from harness.compare.rows import metric_samples
from harness.compare.runs import run_workload_kinds
from harness.compare.statistics import MIN_MANN_WHITNEY
from harness.core.exit_codes import ExitCode
from harness.measures.metrics import METRICS
from harness.spec.values import Gate
from harness.store import results, run_folder
from harness.workloads import kinds
from tests.factories import (
    SCENARIO_TEXT,
    as_manifest,
    as_status,
    as_summary,
    cold_records,
    make_record,
    noisy,
    write_run,
)

A, B, C3, D, E = (f"2026010{i}T000000Z-{c * 6}" for i, c in zip(range(1, 6), "abcde"))


def args(run: Path, baseline: str | Path, results_dir: Path, junit=None, markdown=None, pool=1) -> argparse.Namespace:
    return argparse.Namespace(
        run=str(run),
        pool=pool,
        baseline=str(baseline),
        results_dir=None if results_dir is None else str(results_dir),
        junit=None if junit is None else str(junit),
        markdown=None if markdown is None else str(markdown),
    )


def rows(comp: C.Comparison, metric: str = "ttft_ms", variant: str = "on") -> list[C.MetricRow]:
    return [m for m in comp.metrics if m.metric == metric and m.variant == variant]


def frame(tmp_path: Path, recs) -> pd.DataFrame:
    path = tmp_path / "requests.jsonl"
    path.write_text("".join(r.to_json() + "\n" for r in recs))
    return requests_frame(path, "v")


def comparison(path: Path) -> dict:
    return json.loads((path / C.COMPARISON_FILE).read_text())


def edit_json(path: Path, change) -> None:
    data = json.loads(path.read_text())
    change(data)  # in place
    path.write_text(json.dumps(data))


def with_gate(*gates: str) -> str:
    return SCENARIO_TEXT + "gate:\n" + "".join(f'  - "{g}"\n' for g in gates)


# ---------------------------------------------------------------------------------- pure parts


def test_decide_states():
    base = noisy(100, 8, seed=1)
    assert C.decide(base, noisy(110, 8, seed=2), False, 0.05).state == "regression"
    assert C.decide(base, noisy(90, 8, seed=2), False, 0.05).state == "improved"
    assert C.decide(base, noisy(101, 8, seed=2), False, 0.05).state == "unchanged"
    assert C.decide([], [1.0], False, 0.05).state == "not_comparable"
    # direction: higher is better → a 10% drop is the regression
    assert C.decide(base, noisy(90, 8, seed=2), True, 0.05).state == "regression"
    # beyond the threshold but buried in noise: the data cannot tell → inconclusive, never unchanged
    wide_b = [50, 150, 80, 120, 60, 140, 100, 95]
    wide_c = [55, 160, 85, 130, 66, 150, 108, 104]
    d = C.decide(wide_b, wide_c, False, 0.05)
    assert d.state == "inconclusive" and "not significant" in d.note
    # within the threshold, but a threshold-sized change could hide in the spread → inconclusive
    d = C.decide(wide_b, wide_b, False, 0.05)
    assert d.state == "inconclusive" and d.mde > 0.05 and "minimum detectable effect" in d.note


def test_one_value_a_side_cannot_be_judged():
    """The headline ratios of a one-repeat run: one value each, no spread → inconclusive, even
    for a 2x change (before: insufficient_data, and the comparison passed)."""
    for b, c in (([2.0], [1.0]), ([1.0], [1.01]), ([1.0, 1.1], [2.0])):
        d = C.decide(b, c, True, 0.05)
        assert d.state == "inconclusive" and d.test == "none" and d.mde is None


def test_the_test_is_chosen_by_n():
    rng = np.random.default_rng(0)
    for n, test in (
        (2, "welch_t_log"),
        (4, "welch_t_log"),
        (MIN_MANN_WHITNEY - 1, "yuen_t_log"),
        (MIN_MANN_WHITNEY, "mann_whitney"),
    ):
        b, c = 100 * (1 + 0.01 * rng.normal(size=n)), 100 * (1 + 0.01 * rng.normal(size=n))
        assert C.decide(b, c, False, 0.05).test == test, n
    assert C.decide([0.0, 1.0], [0.0, 1.0], True, 0.05).test == "welch_t"  # a value ≤ 0: no logs


def test_two_tight_values_a_side_can_be_judged():
    """Welch on logs at n = 2: a 10 % step over 0.5 % noise is a regression; the same step over
    10 % noise is not significant (inconclusive, with its MDE)."""
    assert C.decide([100, 101], [110, 111], False, 0.05).state == "regression"
    d = C.decide([90, 110], [100, 121], False, 0.05)
    assert d.state == "inconclusive" and d.mde > 0.5


def test_minimum_detectable_effect_shrinks_with_n_and_grows_with_spread():
    def mde(n, sd):
        return C.decide(noisy(100, n, sd, seed=3), noisy(100, n, sd, seed=4), False, 0.05).mde

    assert mde(3, 0.01) > mde(6, 0.01) > 0
    assert mde(6, 0.05) > mde(6, 0.01)
    assert mde(20, 0.05) < mde(6, 0.05)
    # Welch on logs: exp(t(0.975, df) × se) - 1 for two constant-spread samples
    d = C.decide([100.0, 110.0], [100.0, 110.0], False, 0.05)
    from scipy import stats

    se = np.sqrt(2 * np.var(np.log([100, 110]), ddof=1) / 2)
    assert d.mde == pytest.approx(np.expm1(stats.t.ppf(0.975, 2) * se))


def test_the_bootstrap_is_seeded():
    b, c = noisy(100, 12, 0.05, seed=5), noisy(104, 12, 0.05, seed=6)
    d1, d2 = C.decide(b, c, False, 0.05), C.decide(b, c, False, 0.05)
    assert (d1.ci_low, d1.ci_high, d1.mde) == (d2.ci_low, d2.ci_high, d2.mde) and d1.test == "mann_whitney"
    assert d1.ci_low < d1.change < d1.ci_high


@pytest.mark.parametrize(("n", "sd"), [(2, 0.005), (4, 0.02), (12, 0.02), (12, 0.05)])
def test_false_alarms_and_detection_are_calibrated(n, sd):
    """Over 400 seeded pairs of samples: the same distribution is flagged a regression in at most
    5 % of them (two-sided 0.05 and a 5 % threshold: in fact far fewer), and a 15 % step is
    detected in at least 95 % where the noise allows it (docs/reports.md has the table)."""
    rng = np.random.default_rng(n)
    false_alarms = detected = 0
    for _ in range(400):
        b = 100 * np.exp(rng.normal(0, sd, n))
        false_alarms += C.decide(b, 100 * np.exp(rng.normal(0, sd, n)), False, 0.05).state == "regression"
        detected += C.decide(b, 115 * np.exp(rng.normal(0, sd, n)), False, 0.05).state == "regression"
    assert false_alarms / 400 <= 0.05
    assert detected / 400 >= 0.95


def test_threshold_lookup_order():
    thr = {"ttft_p50": 0.05, "prefill_tok_s": 0.07, "decode.decode.tpot_ms": 0.02, "default": 0.1}
    assert C.threshold_for(thr, "w", "p", "ttft_ms") == (0.05, "ttft_p50")
    assert C.threshold_for(thr, "w", "p", "prefill_tok_s") == (0.07, "prefill_tok_s")
    assert C.threshold_for(thr, "decode", "decode", "tpot_ms") == (0.02, "decode.decode.tpot_ms")
    assert C.threshold_for(thr, "w", "p", "pass_wall_s") == (0.1, "default")
    assert C.threshold_for({}, "w", "p", "ttft_ms") == (C.DEFAULT_THRESHOLD, "harness default")


def test_variant_states():
    ok = as_status({"state": "ok", "expect": "ok", "expect_met": True})
    failed = as_status({"state": "startup_failed", "cause": "cuda_fault", "expect": "ok", "expect_met": False})
    declared = as_status(
        {"state": "startup_failed", "cause": "assertion", "expect": "startup_failed", "expect_met": True}
    )
    not_run = as_status({"state": "not_run"})
    assert C.variant_state(ok, failed)[0] == "introduced_failure"
    assert C.variant_state(failed, failed)[0] == "failed"
    assert C.variant_state(failed, ok)[0] == "fixed"
    assert C.variant_state(declared, declared)[0] == "skipped"
    assert C.variant_state(None, ok)[0] == "not_comparable"
    assert C.variant_state(ok, None)[0] == "not_comparable"
    # listed in a COMPLETE run's manifest without a status.json: lost, never a pass
    state, note = C.variant_state(ok, not_run)
    assert state == "not_comparable" and "COMPLETE" in note
    assert C.variant_state(not_run, ok)[0] == "not_comparable"


def test_gate_matches():
    row = C.MetricRow(
        "on", "cold_prefill", "cold", "ttft_ms", "ms", False, 1, 1, 1, 1, 0, 0.05, "", "", None, "unchanged"
    )
    fig = C.MetricRow(
        "on",
        "parallel_prefixes",
        "*",
        "second_pass_speedup",
        "ratio",
        True,
        1,
        1,
        1,
        1,
        0,
        0.05,
        "",
        "",
        None,
        "unchanged",
    )
    assert C.gate_matches(Gate.parse("cold_prefill.cold.ttft_ms"), row)
    assert C.gate_matches(Gate.parse("on: cold_prefill.cold.ttft_ms"), row)
    assert not C.gate_matches(Gate.parse("off: cold_prefill.cold.ttft_ms"), row)
    assert not C.gate_matches(Gate.parse("cold_prefill.warm.ttft_ms"), row)
    assert C.gate_matches(Gate.parse("parallel_prefixes.second_pass_speedup"), fig)
    assert not C.gate_matches(Gate.parse("parallel_prefixes.second_pass_speedup"), row)


def test_parity_rows():
    def s(verdict):
        return as_summary({"quality": {"parity": {"verdict": verdict}}})

    assert C.parity_row("on", s("PASS"), s("FAIL")).state == "regression"
    assert C.parity_row("on", s("FAIL"), s("FAIL")).state == "regression"  # persisting: still failing
    assert C.parity_row("on", s("FAIL"), s("PASS")).state == "unchanged"
    assert C.parity_row("on", None, s("NOT_EXERCISED")).state == "inconclusive"
    from harness.analysis.verdict import VerdictPolicy

    allowed = VerdictPolicy(allow_not_exercised=frozenset({"on"}))
    assert C.parity_row("on", None, s("NOT_EXERCISED"), allowed).state == "unchanged"
    assert C.parity_row("on", s("PASS"), as_summary({})) is None
    # a negative control (its check declares the FAIL, and held) is no regression night after night
    declared = [{"metric": "quality.parity", "op": "==", "expected": "FAIL", "outcome": "pass"}]
    assert C.parity_row("on", s("FAIL"), s("FAIL"), cand_checks=declared).state == "unchanged"
    undeclared = [{"metric": "quality.parity", "op": "!=", "expected": "FAIL", "outcome": "fail"}]
    assert C.parity_row("on", s("PASS"), s("FAIL"), cand_checks=undeclared).state == "regression"


def test_markdown_escapes_names():
    comp = C.Comparison(
        "FAIL",
        candidate={"scenario": "s", "run_id": "r"},
        variants=[C.VariantRow("a|<b>", "ok", "startup_failed", "introduced_failure", "x")],
    )
    md = C.to_markdown(comp)
    assert "a\\|&lt;b&gt;" in md and "<b>" not in md


# ------------------------------------------------------------------- what is compared: declarations


def test_compared_metrics_are_the_declared_ones(tmp_path):
    """Each phase gets exactly the metrics declared compared whose condition holds there:
    prefill_tok_s only where the median prompt is long and mostly computed."""
    recs = [make_record(workload="w", phase="long", index=i, prompt_tokens=4000, output_tokens=3) for i in range(3)]
    recs += [make_record(workload="w", phase="short", index=i, prompt_tokens=100, output_tokens=3) for i in range(3)]
    recs += [
        make_record(workload="w", phase="hit", index=i, prompt_tokens=4000, cached_tokens=3000, output_tokens=3)
        for i in range(3)
    ]
    recs += [
        make_record(
            workload="w",
            phase="host",
            index=i,
            prompt_tokens=4000,
            cached_tokens=3000,
            cached_host=3000,
            output_tokens=3,
        )
        for i in range(3)
    ]
    got = {(ph, m) for _, ph, m in metric_samples(frame(tmp_path, recs), {})}
    per_request = {m.name for m in METRICS.values() if m.compared and m.per == "request"}
    assert {m for ph, m in got if ph == "long"} == per_request
    assert {m for ph, m in got if ph == "short"} == per_request - {"prefill_tok_s"}
    assert {m for ph, m in got if ph == "hit"} == per_request - {"prefill_tok_s"}
    assert {m for ph, m in got if ph == "host"} == per_request - {"prefill_tok_s"}


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
    manifest = run_folder.load_run(golden_run("healthy")).manifest
    names = run_workload_kinds(manifest)
    assert names and set(names.values()) <= set(kinds())
    assert run_workload_kinds(as_manifest({"scenario": {"text": "[not, a, mapping]"}})) == {}
    assert run_workload_kinds(as_manifest({})) == {}


def test_derived_figures_are_compared_per_repeat(golden_run):
    """The figures declared compared, one value per repeat on each side: the golden runs'
    summaries predate ``derived_by_repeat``, so compare recomputes them from requests.jsonl."""
    base = run_folder.load_run(golden_run("healthy"))
    comp = C.compare_runs(base, base)
    names = run_workload_kinds(base.manifest)
    (variant,) = [v for v in base.variants if v.name == "on-r2"]
    declared = {(wl, d.name) for wl, k in names.items() for d in kinds()[k].derived if d.compared}
    held = {
        (wl, name)
        for wl, w in variant.summary.workloads.items()
        for name, value in w.derived.items()
        if value is not None
    }
    got = [m for m in comp.metrics if m.phase == "*" and m.variant == "on-r2" and m.sample == "repeat"]
    assert got and {(m.workload, m.metric) for m in got} == declared & held
    repeats = len(variant.summary.repeats)
    assert all((m.n_baseline, m.n_candidate, m.sample) == (repeats, repeats, "repeat") for m in got)


def test_stored_derived_by_repeat_is_used(tmp_path):
    """A summary with ``derived_by_repeat`` is read as it is (the figures of each repeat)."""
    base = write_run(tmp_path, A, {"on": cold_records(noisy(100, 4))})
    cand = write_run(tmp_path, B, {"on": cold_records(noisy(100, 4))})
    for run, values in ((base, [2.0, 2.02, 1.98, 2.01]), (cand, [1.0, 1.01, 0.99, 1.0])):

        def put(s, values=values):
            s["workloads"]["cold_prefill"]["derived_by_repeat"] = {"made_up": [9.0], "prefill_tok_s": values}

        edit_json(run / "on" / "summary.json", put)
    (row,) = [
        m for m in C.compare_runs(run_folder.load_run(base), run_folder.load_run(cand)).metrics if m.phase == "*"
    ] or [None]
    assert row is None  # cold_prefill's figures are not declared compared: nothing read from them
    # a kind whose figure is compared: repeat_prefill's host_speedup, per repeat
    text = SCENARIO_TEXT.replace("kind: cold_prefill", "kind: repeat_prefill")
    base = write_run(tmp_path / "2", A, {"on": cold_records(noisy(100, 4), workload="repeat_prefill")}, text=text)
    cand = write_run(tmp_path / "2", B, {"on": cold_records(noisy(100, 4), workload="repeat_prefill")}, text=text)
    for run, values in ((base, [2.0, 2.02, 1.98, 2.01]), (cand, [1.0, 1.01, 0.99, 1.0])):

        def put(s, values=values):
            s["workloads"]["repeat_prefill"]["derived_by_repeat"] = {"host_speedup": values}

        edit_json(run / "on" / "summary.json", put)
    comp = C.compare_runs(run_folder.load_run(base), run_folder.load_run(cand))
    (row,) = [m for m in comp.metrics if m.phase == "*"]
    assert (row.metric, row.n_baseline, row.state) == ("host_speedup", 4, "regression")


# ---------------------------------------------------------------------------------- golden runs


def test_golden_slower_build_fails_with_ci_outputs(golden_run, tmp_path, monkeypatch):
    """The regressed golden run (2x slower) presented as a code change (the healthy run's config
    hashes): FAIL, the regressions in JUnit and Markdown, labelled SIMULATED."""
    base, cand = golden_run("healthy"), golden_run("regressed")
    hashes = {v["name"]: v["config_hash"] for v in json.loads((base / "manifest.json").read_text())["variants"]}
    edit_json(cand / "manifest.json", lambda m: [v.update(config_hash=hashes[v["name"]]) for v in m["variants"]])
    summary = tmp_path / "step_summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    junit, md = tmp_path / "j.xml", tmp_path / "s.md"
    assert cli_main(args(cand, base, tmp_path, junit, md)) == ExitCode.FAILED
    data = comparison(cand)
    assert data["verdict"] == "FAIL" and data["counts"]["regression"] > 0 and data["simulated"]
    tree = ET.parse(junit)
    assert "SIMULATED" in tree.getroot().get("name")
    failures = [
        tc for tc in tree.iter("testcase") if tc.find("failure") is not None and tc.get("classname") != "verdict"
    ]
    assert {f.get("name").rsplit("/", 1)[1] for f in failures} >= {"ttft_ms", "tpot_ms"}
    # what a JUnit publisher reads: totals on the root and every suite, a time on every case (a
    # variant's = its wall seconds), and classnames that split into suite + variant only
    root = tree.getroot()
    cases = list(root.iter("testcase"))
    assert int(root.get("tests")) == len(cases) and int(root.get("failures")) == len(failures) + 1  # + the verdict
    assert all(s.get("time") is not None and s.get("tests") for s in root.iter("testsuite"))
    assert all(float(c.get("time")) >= 0 for c in cases)
    variant_times = [float(c.get("time")) for c in cases if c.get("classname") == "variants"]
    assert variant_times and all(t > 0 for t in variant_times)
    assert float(root.get("time")) == pytest.approx(sum(float(c.get("time")) for c in cases), abs=0.01)
    assert {c.get("classname") for c in failures} <= {"metrics.off", "metrics.on-r2", "metrics.on-r2-write_back"}
    text = md.read_text()
    assert "regression" in text and "SIMULATED" in text and summary.read_text() == text


def test_golden_config_change_is_not_compared(golden_run, tmp_path):
    """The regressed golden run as it was made (its time scale is in the variants' config
    hashes): nothing is compared, loudly, and the outcome is INCONCLUSIVE (exit 4), never a pass."""
    base, cand = golden_run("healthy"), golden_run("regressed")
    junit, md = tmp_path / "j.xml", tmp_path / "s.md"
    assert cli_main(args(cand, base, tmp_path, junit, md)) == ExitCode.INCONCLUSIVE
    data = comparison(cand)
    states = {v["variant"]: (v["state"], v["note"]) for v in data["variants"]}
    assert states["on-r2"][0] == "not_comparable" and "config changed" in states["on-r2"][1]
    assert not [m for m in data["metrics"] if m["sample"] != "verdict"]
    assert "NOT COMPARED: config changed" in md.read_text()
    cases = list(ET.parse(junit).iter("testcase"))
    assert not [tc for tc in cases if tc.find("error") is not None]  # nothing broke: no <error>
    skipped = {tc.get("name"): tc.find("skipped").get("message") for tc in cases if tc.find("skipped") is not None}
    assert {"off", "on-r2"} <= set(skipped) and "NOT COMPARED" in skipped["on-r2"]
    (verdict,) = [tc for tc in cases if tc.get("classname") == "verdict"]
    assert verdict.find("skipped").get("message").startswith("INCONCLUSIVE: ")


def test_golden_run_against_itself(golden_run):
    """Comparing a run with itself changes nothing, but the golden runs are so noisy (time scale
    0.25 on a busy machine) that most rows could not have seen a 5 % change: INCONCLUSIVE, with
    each row's minimum detectable effect."""
    run = golden_run("healthy")
    assert harness(["compare", str(run), "--baseline", str(run)]) == ExitCode.INCONCLUSIVE
    data = comparison(run)
    assert data["verdict"] == "INCONCLUSIVE"
    assert {m["state"] for m in data["metrics"]} <= {"unchanged", "inconclusive"}
    assert all(m["change"] in (0.0, None) for m in data["metrics"])
    assert all(m["mde"] is not None for m in data["metrics"] if m["sample"] != "verdict")
    skipped = [v for v in data["variants"] if v["state"] == "skipped"]
    assert skipped and all(v["candidate_state"] == "startup_failed" for v in skipped)  # as declared


def test_interrupted_candidate_is_never_a_pass(golden_run):
    comp = C.compare_runs(run_folder.load_run(golden_run("healthy")), run_folder.load_run(golden_run("interrupted")))
    assert any("not COMPLETE" in n for n in comp.notes)
    assert comp.outcome != "PASS" and "the candidate run is not COMPLETE" in comp.reasons


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


@pytest.mark.parametrize(
    ("file", "content"),
    [
        ("manifest.json", [1, 2]),
        ("manifest.json", {"schema_version": 1, "scenario": {"name": "golden"}, "variants": [1]}),
        ("manifest.json", {"schema_version": 1, "variants": []}),
        ("on-r2/status.json", []),
        ("on-r2/summary.json", "hello"),
        ("on-r2/summary.json", {"workloads": [1]}),
    ],
)
@pytest.mark.parametrize("side", ["candidate", "baseline"])
def test_damaged_files_exit_2_naming_the_file(golden_run, capsys, file, content, side):
    base, cand = golden_run("healthy"), golden_run("merged")
    damaged = cand if side == "candidate" else base
    (damaged / file).write_text(json.dumps(content))
    assert cli_main(args(cand, base, damaged.parent)) == ExitCode.BAD_INPUT
    err = capsys.readouterr().err
    assert str(damaged / file) in err and "Traceback" not in err


def test_damaged_request_rows_exit_2_naming_the_file(golden_run, capsys):
    base, cand = golden_run("healthy"), golden_run("merged")
    with open(cand / "on-r2" / "requests.jsonl", "a") as f:
        f.write('[1, 2, 3]\n{"rid": 1}\n')
    assert cli_main(args(cand, base, cand.parent)) == ExitCode.BAD_INPUT
    err = capsys.readouterr().err
    assert "requests.jsonl" in err and "Traceback" not in err


def test_a_variant_deleted_from_a_complete_run_is_not_a_pass(golden_run, tmp_path):
    base, cand = golden_run("healthy"), golden_run("merged")
    shutil.rmtree(cand / "on-r2")
    assert cli_main(args(cand, base, tmp_path)) != ExitCode.OK
    comp = C.compare_runs(run_folder.load_run(base), run_folder.load_run(cand))
    on = next(v for v in comp.variants if v.variant == "on-r2")
    assert on.state == "not_comparable" and "COMPLETE" in on.note
    assert comp.outcome in ("INCONCLUSIVE", "FAIL") and any("on-r2" in r for r in comp.reasons)


def test_harness_error_exits_3(golden_run, tmp_path, monkeypatch):
    run = golden_run("healthy")

    def boom(*a, **k):
        raise RuntimeError("bug")

    monkeypatch.setattr("harness.compare.two_runs.compare_runs", boom)
    assert cli_main(args(run, run, tmp_path)) == 3


# ----------------------------------------------------------------- situations the golden runs lack


def test_ten_percent_ttft_regression_with_8_repeats(tmp_path):
    base = write_run(
        tmp_path, A, {"off": cold_records(noisy(100, 8), "off"), "on": cold_records(noisy(100, 8, seed=1))}
    )
    cand = write_run(
        tmp_path, B, {"off": cold_records(noisy(100, 8, seed=5), "off"), "on": cold_records(noisy(110, 8, seed=2))}
    )
    comp = C.compare_runs(run_folder.load_run(base), run_folder.load_run(cand))
    (ttft,) = rows(comp)
    assert ttft.state == "regression" and ttft.test == "mann_whitney" and ttft.p_value < 0.05
    assert ttft.threshold_source == "ttft_p50" and 0.07 < ttft.change < 0.13
    assert ttft.ci_low < ttft.change < ttft.ci_high and 0 < ttft.mde < 0.05
    assert {m.state for m in rows(comp, variant="off")} <= {"unchanged"}
    assert sorted((m.variant, m.metric) for m in comp.metrics if m.state == "regression") == [
        ("on", "prefill_tok_s"),
        ("on", "ttft_ms"),
    ]
    assert comp.outcome == "FAIL" and cli_main(args(cand, base, tmp_path)) == ExitCode.FAILED


def test_noise_only_passes(tmp_path):
    base = write_run(tmp_path, A, {"on": cold_records(noisy(100, 8, sd=0.02, seed=1))})
    cand = write_run(tmp_path, B, {"on": cold_records(noisy(100, 8, sd=0.02, seed=2))})
    assert cli_main(args(cand, base, tmp_path)) == ExitCode.OK
    assert comparison(cand)["verdict"] == "PASS"


def test_one_value_a_side_is_inconclusive_never_a_pass(tmp_path):
    """Two one-repeat runs: one value a side. Before, 'insufficient_data' and a pass, even for a
    run twice as slow; now INCONCLUSIVE, exit 4, with the rows saying why."""
    base = write_run(tmp_path, A, {"on": cold_records([100.0])})
    cand = write_run(tmp_path, B, {"on": cold_records([200.0])})
    assert cli_main(args(cand, base, tmp_path)) == ExitCode.INCONCLUSIVE
    data = comparison(cand)
    assert data["verdict"] == "INCONCLUSIVE" and data["counts"]["inconclusive"] > 0
    assert "a side needs 2+" in rows(C.compare_runs(run_folder.load_run(base), run_folder.load_run(cand)))[0].note


def test_introduced_failure_fails(tmp_path):
    base = write_run(tmp_path, A, {"off": cold_records(noisy(100, 8), "off"), "on": cold_records(noisy(100, 8))})
    cand = write_run(tmp_path, B, {"off": cold_records(noisy(100, 8), "off"), "on": "cuda_fault"})
    assert cli_main(args(cand, base, tmp_path)) == ExitCode.FAILED
    data = comparison(cand)
    on = next(v for v in data["variants"] if v["variant"] == "on")
    assert on["state"] == "introduced_failure" and data["verdict"] == "FAIL"
    assert not [m for m in data["metrics"] if m["variant"] == "on"]  # a failure is never a zero
    # its expectation cannot be evaluated → a failed expectation too
    assert any(e["variant"] == "on" and e["outcome"] == "not_evaluable" and e["failed"] for e in data["expectations"])


# ---------------------------------------------------------------------------------------- gate


def two_runs(tmp_path, text, on_cand=110.0):
    base = write_run(
        tmp_path, A, {"off": cold_records(noisy(100, 8), "off"), "on": cold_records(noisy(100, 8, seed=1))}, text=text
    )
    cand = write_run(
        tmp_path,
        B,
        {"off": cold_records(noisy(100, 8, seed=5), "off"), "on": cold_records(noisy(on_cand, 8, seed=2))},
        text=text,
    )
    return base, cand


def test_only_gating_metrics_decide(tmp_path):
    """A regression in a metric the gate does not name is reported, not failing."""
    base, cand = two_runs(tmp_path, with_gate("off: cold_prefill.cold.ttft_ms"))
    assert cli_main(args(cand, base, tmp_path)) == ExitCode.OK
    data = comparison(cand)
    assert data["verdict"] == "PASS" and data["gate"] == ["off: cold_prefill.cold.ttft_ms"]
    reg = [m for m in data["metrics"] if m["state"] == "regression"]
    assert reg and not any(m["gating"] for m in reg)
    assert [m["gating"] for m in data["metrics"] if m["variant"] == "off" and m["metric"] == "ttft_ms"] == [True]


def test_a_gating_regression_fails(tmp_path):
    base, cand = two_runs(tmp_path, with_gate("cold_prefill.cold.ttft_ms"))
    assert cli_main(args(cand, base, tmp_path)) == ExitCode.FAILED
    assert any("on cold_prefill.cold.ttft_ms: regression" in r for r in comparison(cand)["reasons"])


def test_a_gate_that_names_nothing_measured_is_inconclusive(tmp_path):
    base, cand = two_runs(tmp_path, with_gate("on: cold_prefill.cold.tpot_ms"), on_cand=100.0)
    assert cli_main(args(cand, base, tmp_path)) == ExitCode.INCONCLUSIVE
    assert any("has no such compared metric" in r for r in comparison(cand)["reasons"])


def test_the_gate_is_read_from_the_candidates_stored_scenario(tmp_path):
    base = write_run(tmp_path, A, {"on": cold_records(noisy(100, 8, seed=1))}, text=SCENARIO_TEXT)
    cand = write_run(
        tmp_path, B, {"on": cold_records(noisy(100, 8, seed=2))}, text=with_gate("on: cold_prefill.cold.ttft_ms")
    )
    edit_json(cand / "manifest.json", lambda m: m["scenario"].update(hash="h"))  # same hash: comparable
    C.compare_runs(run_folder.load_run(base), run_folder.load_run(cand))
    comp = C.compare_runs(run_folder.load_run(base), run_folder.load_run(cand))
    assert comp.gate == ["on: cold_prefill.cold.ttft_ms"]


# ---------------------------------------------------------------------------------- baselines


def test_a_baseline_of_another_scenario_is_refused(tmp_path, capsys):
    base = write_run(tmp_path, A, {"on": cold_records(noisy(100, 8))}, scenario="other")
    cand = write_run(tmp_path, B, {"on": cold_records(noisy(100, 8))})
    assert cli_main(args(cand, base, tmp_path)) == ExitCode.BAD_INPUT
    err = capsys.readouterr().err
    assert "scenario 'other'" in err and "'synth'" in err and "cannot be compared" in err
    with pytest.raises(C.BaselineMismatch):
        C.compare_runs(run_folder.load_run(base), run_folder.load_run(cand))


def test_a_variant_whose_config_changed_is_not_compared(tmp_path):
    base = write_run(tmp_path, A, {"off": cold_records(noisy(100, 8), "off"), "on": cold_records(noisy(100, 8))})
    cand = write_run(
        tmp_path, B, {"off": cold_records(noisy(100, 8, seed=3), "off"), "on": cold_records(noisy(150, 8))}
    )
    edit_json(
        cand / "manifest.json", lambda m: [v.update(config_hash="new") for v in m["variants"] if v["name"] == "on"]
    )
    comp = C.compare_runs(run_folder.load_run(base), run_folder.load_run(cand))
    on = next(v for v in comp.variants if v.variant == "on")
    assert (on.state, on.config_changed) == ("not_comparable", True) and "config changed" in on.note
    assert not rows(comp) and rows(comp, variant="off")  # off is compared, on is not
    assert comp.outcome == "INCONCLUSIVE"
    # a gate that leaves the changed variant out: the rest decides
    edit_json(cand / "manifest.json", lambda m: m["scenario"].update(text=with_gate("off: cold_prefill.cold.ttft_ms")))
    edit_json(base / "manifest.json", lambda m: m["scenario"].update(text=with_gate("off: cold_prefill.cold.ttft_ms")))
    assert C.compare_runs(run_folder.load_run(base), run_folder.load_run(cand)).outcome == "PASS"


def test_a_changed_workload_definition_is_not_compared(tmp_path):
    text_b = SCENARIO_TEXT
    text_c = SCENARIO_TEXT.replace("prompt_tokens: 8000", "prompt_tokens: 4000")
    base = write_run(tmp_path, A, {"on": cold_records(noisy(100, 8))}, text=text_b)
    cand = write_run(tmp_path, B, {"on": cold_records(noisy(50, 8))}, text=text_c)
    edit_json(cand / "manifest.json", lambda m: m["scenario"].update(hash="h2"))
    comp = C.compare_runs(run_folder.load_run(base), run_folder.load_run(cand))
    assert {m.state for m in comp.metrics} == {"not_comparable"} and comp.outcome == "INCONCLUSIVE"
    assert any("workloads whose definition changed: cold_prefill" in n for n in comp.notes)


def write_verdict(run: Path, outcome: str) -> None:
    (run / "verdict.json").write_text(json.dumps({"schema_version": 1, "outcome": outcome}))


def test_latest_is_the_newest_passing_run_of_the_same_config(tmp_path, capsys):
    good = write_run(tmp_path, A, {"on": cold_records(noisy(100, 8))})
    write_verdict(good, "PASS")
    failed = write_run(tmp_path, B, {"on": cold_records(noisy(100, 8))})
    write_verdict(failed, "FAIL")  # e.g. a parity FAIL: never the good baseline
    unsure = write_run(tmp_path, C3, {"on": cold_records(noisy(100, 8))})
    write_verdict(unsure, "INCONCLUSIVE")
    other_config = write_run(tmp_path, D, {"on": cold_records(noisy(100, 8))})
    write_verdict(other_config, "PASS")
    edit_json(other_config / "manifest.json", lambda m: m["variants"][0].update(config_hash="other"))
    cand = write_run(tmp_path, E, {"on": cold_records(noisy(100, 8, seed=4))})
    write_run(tmp_path, "20260106T000000Z-ffffff", {"on": cold_records(noisy(100, 8))})  # newer than the candidate
    assert C.find_latest_good(tmp_path, "synth", cand) == good
    assert cli_main(args(cand, "latest", tmp_path)) == ExitCode.OK
    data = comparison(cand)
    assert data["baseline"]["run_id"] == good.name
    err = capsys.readouterr().err
    assert (
        f"baseline {good.name}: the newest earlier run of synth with the same scenario and config whose "
        "verdict is PASS and whose comparison (if any) PASSed or had no baseline (verdict.json)" in err
    )
    for run, why in (
        (failed, "verdict FAIL"),
        (unsure, "verdict INCONCLUSIVE"),
        (other_config, "config changed for on"),
    ):
        assert f"{run.name} ({why}" in err
    assert data["baseline_choice"][0].startswith(f"baseline {good.name}")


def test_latest_is_looked_for_beside_the_candidate_when_no_results_dir_is_given(tmp_path, monkeypatch):
    """A run made with `harness run --results-dir X` finds its baseline under X: `compare RUN
    --baseline latest` looked under ./results whatever the candidate's folder, and said 'no baseline'."""
    good = write_run(tmp_path / "elsewhere", A, {"on": cold_records(noisy(100, 8))})
    write_verdict(good, "PASS")
    cand = write_run(tmp_path / "elsewhere", B, {"on": cold_records(noisy(100, 8, seed=4))})
    monkeypatch.chdir(tmp_path)  # no ./results here
    assert cli_main(args(cand, "latest", None)) == ExitCode.OK
    assert comparison(cand)["baseline"]["run_id"] == good.name


def test_latest_after_the_clock_was_set_back(tmp_path):
    """Runs made after the wall clock was set back (an NTP step, a box restored from a snapshot)
    have older ids than the runs before them: `latest` found no earlier run (ids were the order),
    and history drew the nights out of order. Runs are numbered when their folder is made."""
    night = _dt.datetime(2026, 12, 1, 3, tzinfo=_dt.timezone.utc)
    good = write_run(tmp_path, results.new_run_id(night), {"on": cold_records(noisy(100, 8))}, numbered=True)
    write_verdict(good, "PASS")
    set_back = night - _dt.timedelta(days=400)  # the next night's clock
    cand = write_run(tmp_path, results.new_run_id(set_back), {"on": cold_records(noisy(100, 8, seed=4))}, numbered=True)
    assert cand.name < good.name
    choice = C.choose_latest(tmp_path, run_folder.load_run(cand))
    assert choice.run is not None and choice.run.paths.root == good, choice.how
    assert results.list_runs(tmp_path, "synth") == [good, cand]  # history's order: the nights as they ran
    assert C.choose_latest(tmp_path, run_folder.load_run(good)).run is None  # the later night is no baseline of it
    assert cli_main(args(cand, "latest", tmp_path)) == ExitCode.OK
    assert comparison(cand)["baseline"]["run_id"] == good.name


def test_latest_judges_a_run_without_verdict_json(tmp_path):
    """A run older than verdict.json is judged from its files with the same rules: one with an
    unexpected failure is passed over."""
    good = write_run(tmp_path, A, {"on": cold_records(noisy(100, 8))})
    write_run(tmp_path, B, {"on": "cuda_fault"})
    write_run(tmp_path, C3, {"on": cold_records(noisy(100, 8))}, complete=False)
    cand = write_run(tmp_path, D, {"on": cold_records(noisy(100, 8, seed=4))})
    choice = C.choose_latest(tmp_path, run_folder.load_run(cand))
    assert choice.run.paths.root == good and "judged from its files" in choice.how
    assert any("verdict FAIL" in p for p in choice.passed_over) and any("not COMPLETE" in p for p in choice.passed_over)


def test_latest_without_a_baseline_is_inconclusive(tmp_path, capsys):
    cand = write_run(tmp_path, D, {"on": cold_records(noisy(100, 8))})
    assert cli_main(args(cand, "latest", tmp_path)) == ExitCode.INCONCLUSIVE
    data = comparison(cand)
    assert data["verdict"] == "INCONCLUSIVE" and data["baseline"] is None
    assert "no baseline" in capsys.readouterr().err
    assert data["reasons"][0] == "no baseline: nothing was compared"


def test_latest_without_a_baseline_still_fails_a_failed_expectation(tmp_path):
    cand = write_run(tmp_path, D, {"on": cold_records(noisy(2000, 8))})  # the check says <= 1000 ms
    assert cli_main(args(cand, "latest", tmp_path)) == ExitCode.FAILED


def test_junit_classnames_keep_a_dotted_variant_in_one_part():
    """A JUnit reader splits classnames at dots: ``on-r1.5`` must not become package ``on-r1``."""
    from harness.compare.comparison import Comparison, VariantRow
    from harness.compare.render import to_junit

    comp = Comparison(
        outcome="PASS",
        variants=[VariantRow("on-r1.5", "ok", "ok", "compared", candidate_wall_s=12.5)],
        expectations=[{"variant": "on-r1.5", "check": "on-r1.5: q >= 1", "failed": False, "outcome": "pass"}],
    )
    root = ET.fromstring(to_junit(comp).split("\n", 1)[1])
    classes = {c.get("classname") for c in root.iter("testcase")}
    assert classes == {"verdict", "variants", "expectations.on-r1_5"}
    assert root.get("time") == "12.500" and root.get("tests") == "3"


# ------------------------------------------------------------------- the unit of evidence


def test_per_unit_takes_one_value_per_group():
    from harness.compare.statistics import per_unit

    got = per_unit([1.0, 3.0, 2.0, 10.0, 20.0, float("nan"), 7.0], ["a", "a", "a", "b", "b", "b", None])
    assert list(got) == [2.0, 15.0, 7.0]  # a's median, b's (its NaN dropped), the lone value
    assert list(per_unit([1.0, float("inf"), 2.0], None)) == [1.0, 2.0]
    with pytest.raises(ValueError):
        per_unit([1.0], ["a", "b"])


def _pass_records(variant: str, center: float, repeats: int, seed: int, k: int = 8):
    """``repeats`` concurrent passes of ``k`` requests: a pass's level is its own (one draw per
    pass, 10 % spread), its requests within 0.5 % of it (one batch)."""
    rng = np.random.default_rng(seed)
    out = []
    for r in range(repeats):
        level = center * (1 + rng.normal(0, 0.10))
        for i in range(k):
            out.append(
                make_record(
                    variant=variant,
                    workload="parallel_prefixes",
                    phase="pass2",
                    repeat=r,
                    index=i,
                    ttft_ms=level * (1 + rng.normal(0, 0.005)),
                    concurrency_group=f"parallel_prefixes/pass2/r{r}",
                )
            )
    return out


def test_a_concurrent_pass_is_one_observation(tmp_path):
    """Two healthy nights of one pass of 8 requests whose levels differ by chance: tested as 8
    independent requests it is a significant regression; by its unit (the concurrency group)
    it is 1 vs 1 observation: inconclusive, and the row says which unit it counted."""
    from harness.compare.rows import compare_variant

    (tmp_path / "b").mkdir()
    (tmp_path / "c").mkdir()
    base = frame(tmp_path / "b", _pass_records("v", 100.0, 1, seed=3))
    cand = frame(tmp_path / "c", _pass_records("v", 100.0, 1, seed=5))
    pooled = C.decide(base["ttft_ms"], cand["ttft_ms"], False, 0.05)
    assert pooled.state in ("regression", "improved") and pooled.p_value < 0.001  # pseudo-replication
    (row,) = [r for r in compare_variant("v", base, cand, {}, {}, {}, {}, {}) if r.metric == "ttft_ms"]
    assert (row.state, row.sample, row.n_baseline, row.values_baseline) == ("inconclusive", "group", 1, 8)
    assert "one observation" in row.note
    assert "n=1/1 concurrent groups of 8/8 requests" in C.render.metric_message(row)
    assert row.to_dict()["values_candidate"] == 8


def test_passes_are_counted_by_repeat(tmp_path):
    """With 12 passes a side the row is tested on 12 values (the passes), not 96: a 30 %
    regression is found, a healthy pair is not a false alarm, and n says 12."""
    from harness.compare.rows import compare_variant

    for d in ("b", "c", "h"):
        (tmp_path / d).mkdir()
    base = frame(tmp_path / "b", _pass_records("v", 100.0, 12, seed=1))
    slow = frame(tmp_path / "c", _pass_records("v", 130.0, 12, seed=2))
    healthy = frame(tmp_path / "h", _pass_records("v", 100.0, 12, seed=4))
    (row,) = [r for r in compare_variant("v", base, slow, {}, {}, {}, {}, {}) if r.metric == "ttft_ms"]
    assert (row.state, row.n_baseline, row.n_candidate, row.test) == ("regression", 12, 12, "mann_whitney")
    (ok,) = [r for r in compare_variant("v", base, healthy, {}, {}, {}, {}, {}) if r.metric == "ttft_ms"]
    assert ok.state != "regression" and ok.n_baseline == 12


# ------------------------------------------------------------------- baselines that remember


def test_a_regressed_build_stays_red_until_accepted(tmp_path, capsys):
    """Night B is 10 % slower: FAIL against A. Nights C and D (the same slow build) are compared
    with A again, not with B or C (whose own comparisons failed): FAIL, FAIL. Once the team
    accepts B, C is compared with B and D with C: PASS, PASS."""
    a = write_run(tmp_path, A, {"on": cold_records(noisy(100, 8, seed=1))})
    slow = [
        write_run(tmp_path, rid, {"on": cold_records(noisy(110, 8, seed=i))}) for i, rid in enumerate((B, C3, D), 2)
    ]
    b, c, d = slow
    for run in (a, *slow):
        write_verdict(run, "PASS")  # the runs' own verdicts: a slower build passes its own checks
    for night in slow:
        assert cli_main(args(night, "latest", tmp_path)) == ExitCode.FAILED
        assert comparison(night)["baseline"]["run_id"] == a.name
    err = capsys.readouterr().err
    assert f"{b.name} (its own comparison with {a.name} FAILed" in err
    assert f"{c.name} (its own comparison with {a.name} FAILed" in err
    assert harness(["accept", str(b), "--note", "the new allocator: 10 % slower, on purpose"]) == ExitCode.OK
    assert json.loads((b / "accepted.json").read_text())["comparison_verdict"] == "FAIL"
    assert cli_main(args(c, "latest", tmp_path)) == ExitCode.OK
    data = comparison(c)
    assert data["baseline"]["run_id"] == b.name and "accepted" in data["baseline_choice"][0]
    assert cli_main(args(d, "latest", tmp_path)) == ExitCode.OK
    assert comparison(d)["baseline"]["run_id"] == c.name  # C's comparison now PASSed: the new normal


def test_an_inconclusive_night_is_no_baseline(tmp_path, capsys):
    """Night B is a 10 % slower build measured on too few requests to prove it: INCONCLUSIVE
    against A. It is no baseline: night C (the same build, measured enough) is compared with A,
    and FAILs, instead of passing against B. A first night (INCONCLUSIVE: no baseline) is one."""
    a = write_run(tmp_path, A, {"on": cold_records(noisy(100, 8, seed=1))})
    b = write_run(tmp_path, B, {"on": cold_records(noisy(110, 1, seed=2))})
    c = write_run(tmp_path, C3, {"on": cold_records(noisy(110, 8, seed=3))})
    for run in (a, b, c):
        write_verdict(run, "PASS")
    assert cli_main(args(a, "latest", tmp_path)) == ExitCode.INCONCLUSIVE  # the first night: no baseline
    assert cli_main(args(b, "latest", tmp_path)) == ExitCode.INCONCLUSIVE
    assert comparison(b)["baseline"]["run_id"] == a.name
    capsys.readouterr()
    assert cli_main(args(c, "latest", tmp_path)) == ExitCode.FAILED
    assert comparison(c)["baseline"]["run_id"] == a.name
    assert f"{b.name} (its own comparison with {a.name} was INCONCLUSIVE" in capsys.readouterr().err
    assert harness(["accept", str(b)]) == ExitCode.OK
    assert cli_main(args(c, "latest", tmp_path)) == ExitCode.INCONCLUSIVE  # against B's one value: cannot tell
    assert comparison(c)["baseline"]["run_id"] == b.name


def test_a_pool_of_nights_is_one_baseline(tmp_path):
    """--pool 3 pools the three newest eligible nights (24 requests), and never reaches past an
    accepted night."""
    nights = [write_run(tmp_path, rid, {"on": cold_records(noisy(100, 8, seed=i))}) for i, rid in enumerate((A, B, C3))]
    for run in nights:
        write_verdict(run, "PASS")
    cand = write_run(tmp_path, D, {"on": cold_records(noisy(100, 8, seed=9))})
    assert cli_main(args(cand, "latest", tmp_path, pool=3)) == ExitCode.OK
    data = comparison(cand)
    assert data["baseline"]["run_id"] == C3 and data["baseline"]["pool"] == [B, A]
    (row,) = [m for m in data["metrics"] if m["metric"] == "ttft_ms"]
    assert (row["n_baseline"], row["n_candidate"]) == (24, 8)
    assert harness(["accept", str(nights[1])]) == ExitCode.OK
    assert cli_main(args(cand, "latest", tmp_path, pool=3)) == ExitCode.OK
    assert comparison(cand)["baseline"]["pool"] == [B]  # the accepted night is the oldest in the pool


# ------------------------------------------------------------------- outputs that agree


def test_a_client_bound_phase_cannot_judge_the_server(tmp_path):
    """A 20 % slower candidate whose phase the run flagged CLIENT-BOUND: the row is inconclusive
    with that reason (the run's warning and the comparison agree), never a regression or a pass;
    the same candidate without the flag FAILs."""
    base = write_run(tmp_path, A, {"on": cold_records(noisy(100, 8, seed=1))})
    cand = write_run(tmp_path, B, {"on": cold_records(noisy(120, 8, seed=2))})
    assert C.compare_runs(run_folder.load_run(base), run_folder.load_run(cand)).outcome == "FAIL"

    def flag(s):
        s["workloads"]["cold_prefill"]["phases"]["cold"]["figures"] = {
            "client_bound": True,
            "lag_p99_ms": 3.2,
            "lag_limit_ms": 1.0,
        }

    edit_json(cand / "on" / "summary.json", flag)
    comp = C.compare_runs(run_folder.load_run(base), run_folder.load_run(cand))
    (row,) = rows(comp)
    assert row.state == "inconclusive" and "CLIENT-BOUND (schedule lag p99 3.2 ms over 1 ms)" in row.note
    assert comp.outcome == "INCONCLUSIVE" and any("CLIENT-BOUND" in r for r in comp.reasons)
    junit = ET.fromstring(C.to_junit(comp))
    (tc,) = [t for t in junit.iter("testcase") if t.get("name") == "cold_prefill/cold/ttft_ms"]
    assert "CLIENT-BOUND" in tc.find("skipped").get("message")


def test_junit_follows_the_outcome(tmp_path):
    """An INCONCLUSIVE comparison has no <error> and no <failure>: its unjudged gating rows are
    skipped with their reasons, and the verdict case says INCONCLUSIVE; a FAIL has the failure."""
    base = write_run(tmp_path, A, {"on": cold_records(noisy(100, 1, seed=1))})
    cand = write_run(tmp_path, B, {"on": cold_records(noisy(100, 1, seed=2))})
    comp = C.compare_runs(run_folder.load_run(base), run_folder.load_run(cand))
    assert comp.outcome == "INCONCLUSIVE"
    root = ET.fromstring(C.to_junit(comp))
    assert root.get("errors") == "0" and root.get("failures") == "0"
    verdict = next(t for t in root.iter("testcase") if t.get("classname") == "verdict")
    assert verdict.find("skipped").get("message") == f"INCONCLUSIVE: {comp.advice}. " + "; ".join(comp.reasons)
    assert comp.advice.startswith("to decide, add: repeats: 2 at least")
    gating = [
        t
        for t in root.iter("testcase")
        if (t.find("skipped") is not None and "(gating" in t.find("skipped").get("message"))
    ]
    assert gating
    slow = write_run(tmp_path, C3, {"on": cold_records(noisy(150, 8, seed=3))})
    base8 = write_run(tmp_path, D, {"on": cold_records(noisy(100, 8, seed=4))})
    failed = ET.fromstring(C.to_junit(C.compare_runs(run_folder.load_run(base8), run_folder.load_run(slow))))
    assert next(t for t in failed.iter("testcase") if t.get("classname") == "verdict").find("failure") is not None


def test_ci_outputs_are_regular_files_never_a_device_fifo_or_link(golden_run, tmp_path, monkeypatch, capsys):
    """--junit and --markdown at a FIFO, a symbolic link or a folder: refused in one line, exit 2,
    nothing replaced; GITHUB_STEP_SUMMARY as a FIFO nobody reads (it hung compare) or a link: said
    in one line and skipped, the comparison's own exit code stands."""
    import os

    base = cand = golden_run("healthy")
    fifo, target = tmp_path / "fifo", tmp_path / "target.xml"
    os.mkfifo(fifo)
    target.write_text("keep")
    link = tmp_path / "link.xml"
    link.symlink_to(target)
    for bad, kind in ((fifo, "a FIFO"), (link, "a symbolic link"), (tmp_path, "a folder")):
        capsys.readouterr()
        assert cli_main(args(cand, base, tmp_path, bad, None)) == ExitCode.BAD_INPUT
        err = capsys.readouterr().err.strip().splitlines()
        assert err[-1] == f"harness compare: --junit {bad}: {kind}, not a regular file: give a file path", err
    assert link.is_symlink() and target.read_text() == "keep" and fifo.is_fifo()
    for step, kind in ((fifo, "a FIFO"), (link, "a symbolic link")):
        monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(step))
        capsys.readouterr()
        code = cli_main(args(cand, base, tmp_path, None, None))
        assert code in (ExitCode.OK, ExitCode.INCONCLUSIVE)
        assert f"GITHUB_STEP_SUMMARY {step}: {kind}, not a regular file; not written" in capsys.readouterr().err
    assert target.read_text() == "keep"


def test_a_pool_says_when_its_nights_drift(tmp_path):
    """Three baseline nights at 100, 104 and 108 ms pooled: the comparison notes the drift
    inside its baseline (+8 % over 3 nights, beyond the 5 % threshold); flat nights say nothing."""
    runs = [
        write_run(tmp_path / "d", rid, {"on": cold_records(noisy(level, 8, seed=i))})
        for i, (rid, level) in enumerate(((A, 100), (B, 104), (C3, 108)))
    ]
    for run in runs:
        write_verdict(run, "PASS")
    cand = write_run(tmp_path / "d", D, {"on": cold_records(noisy(108, 8, seed=9))})
    assert cli_main(args(cand, "latest", tmp_path / "d", pool=3)) in (
        ExitCode.OK,
        ExitCode.INCONCLUSIVE,
        ExitCode.FAILED,
    )
    notes = comparison(cand)["notes"]
    assert any(
        n.startswith("baseline pool drifts: on cold_prefill.cold.ttft_ms night medians") and "over 3 nights" in n
        for n in notes
    )
    flat = [
        write_run(tmp_path / "f", rid, {"on": cold_records(noisy(100, 8, seed=i))}) for i, rid in enumerate((A, B, C3))
    ]
    for run in flat:
        write_verdict(run, "PASS")
    cand2 = write_run(tmp_path / "f", D, {"on": cold_records(noisy(100, 8, seed=9))})
    cli_main(args(cand2, "latest", tmp_path / "f", pool=3))
    assert not any("drifts" in n for n in comparison(cand2)["notes"])

"""Cache phases that could not hit: a hybrid (mamba) model reuses nothing of a 64-aligned prompt
(sglang 0.5.17, modelled by the simulator), so repeat_prefill's repeats recompute. The harness
says so before the run (a design warning, from the kinds' estimate hooks, no speed needed) and
after it (the unexercised phases in the summary, the console and verdict.json; checks on the
speedups derived from them are INCONCLUSIVE, exit 4). A length off the multiple hits and says
nothing of the kind."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from harness.cli import main
from harness.core.exit_codes import ExitCode
from tests.conftest import MODELS

SCENARIO = """\
name: unexercised
server:
  backend: sim
  model_path: models/qwen3next-tiny
  args: {--max-total-tokens: 8192, --max-mamba-cache-size: 8}
  startup_timeout_s: 30
  request_timeout_s: 20
  liveness_idle_s: 0.1
  sim: {time_scale: 0.02, startup_s: 0}
variants:
  - name: off
  - name: on
    hicache: {ratio: 2}
workloads:
  - kind: repeat_prefill
    n: 2
    prompt_tokens: {L}
    eviction_tokens: "1.2x pool"
sampling: {enabled: false}
expectations:
  checks:
    - "on: repeat_prefill.host_speedup >= 1"
    - "repeat_prefill.repeat_device.n >= 2"
"""


def _scenario(tmp_path: Path, prompt_tokens: int) -> Path:
    shutil.copytree(MODELS / "qwen3next-tiny", tmp_path / "models" / "qwen3next-tiny")
    path = tmp_path / "unexercised.yaml"
    path.write_text(SCENARIO.replace("{L}", str(prompt_tokens)))
    return path


def _run(tmp_path: Path, prompt_tokens: int, capsys) -> tuple[int, str, str, Path]:
    scenario = _scenario(tmp_path, prompt_tokens)
    rc = main(["run", str(scenario), "--results-dir", str(tmp_path / "r"), "--no-report"])
    cap = capsys.readouterr()
    (run,) = (tmp_path / "r" / "unexercised").iterdir()
    return rc, cap.out, cap.err, run


def test_dry_run_states_the_design_warning_without_an_estimate_block(tmp_path, capsys):
    assert main(["run", str(_scenario(tmp_path, 1024)), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "# no cost estimate" in out
    lines = [x for x in out.splitlines() if x.startswith("design warning:")]
    assert len(lines) == 2 and all("prompt_tokens 1,024 is a multiple of 64 on a hybrid model" in x for x in lines)


def test_dry_run_of_a_length_off_the_multiple_warns_nothing(tmp_path, capsys):
    assert main(["run", str(_scenario(tmp_path, 1100)), "--dry-run"]) == 0
    assert "design warning" not in capsys.readouterr().out


def test_an_aligned_prompt_on_a_hybrid_model_is_reported_unexercised_and_inconclusive(tmp_path, capsys):
    rc, out, err, run = _run(tmp_path, 1024, capsys)
    # before the first variant, on stderr, and in the manifest
    first = err.index("design warning: off: repeat_prefill: prompt_tokens 1,024 is a multiple of 64")
    assert first < err.index("variant off:")
    manifest = json.loads((run / "manifest.json").read_text())
    assert set(manifest["design_warnings"]) == {"off", "on"}
    # after: every repeat recomputed (the simulator's hybrid rule), and the summaries say which phases
    on = json.loads((run / "on" / "summary.json").read_text())
    off = json.loads((run / "off" / "summary.json").read_text())
    assert {(u["phase"], u["tier"]) for u in on["unexercised"]} == {
        ("repeat_device", "device"),
        ("repeat_after_evict", "host"),
    }
    assert all(u["cached_tokens"] == 0 and u["prompt_tokens"] == 2048 for u in on["unexercised"])
    by_phase = {u["phase"]: u for u in on["unexercised"]}
    assert by_phase["repeat_after_evict"]["figures"] == ["host_speedup"]
    assert "host_speedup measure recompute" in by_phase["repeat_after_evict"]["text"]
    # HiCache off has no host tier: its after-eviction miss is expected, not a warning
    assert [(u["phase"], u["figures"]) for u in off["unexercised"]] == [("repeat_device", ["device_speedup"])]
    # the gated speedup cannot tell; a check on something else still passes
    checks = json.loads((run / "expectations.json").read_text())["checks"]
    speed = next(c for c in checks if c["metric"] == "repeat_prefill.host_speedup")
    assert speed["outcome"] == "not_evaluable" and speed["failed"] and "measure recompute" in speed["reason"]
    assert all(c["outcome"] == "pass" for c in checks if c["metric"] == "repeat_prefill.repeat_device.n")
    verdict = json.loads((run / "verdict.json").read_text())
    assert rc == ExitCode.INCONCLUSIVE and verdict["outcome"] == "INCONCLUSIVE"
    outcomes = {v["variant"]: v["outcome"] for v in verdict["variants"]}
    assert outcomes == {"off": "PASS", "on": "INCONCLUSIVE"}
    # off: repeat_device; on: repeat_device, repeat_after_evict — each also a tier-hit shortfall
    # (its pools predict hits for the repeats: tests/unit/measures/test_tier_model.py)
    assert [w["code"] for w in verdict["warnings"]].count("unexercised_phase") == 3
    assert "verdict: INCONCLUSIVE (exit 4)" in out
    assert "warning: off: repeat_prefill/repeat_device got no cache hit at all" in out


def test_a_length_off_the_multiple_hits_and_passes_without_warnings(tmp_path, capsys):
    rc, out, err, run = _run(tmp_path, 1100, capsys)
    assert "design warning" not in err and "warning:" not in out
    on = json.loads((run / "on" / "summary.json").read_text())
    hits = on["workloads"]["repeat_prefill"]["phases"]
    assert hits["repeat_device"]["hits"]["device_tokens"] > 0 and hits["repeat_after_evict"]["hits"]["host_tokens"] > 0
    assert on["unexercised"] == []
    assert rc == ExitCode.OK and "verdict: PASS (exit 0)" in out


def test_the_report_shows_the_unexercised_phases_at_the_top_and_in_the_variant(tmp_path, capsys):
    pytest.importorskip("jinja2")
    scenario = _scenario(tmp_path, 1024)
    main(["run", str(scenario), "--results-dir", str(tmp_path / "r"), "--reports-dir", str(tmp_path / "rep")])
    capsys.readouterr()
    (page,) = (tmp_path / "rep").rglob("index.html")
    html = page.read_text()
    assert html.index('id="unexercised-warnings"') < html.index('<section id="hicache">')
    assert "Before the run the harness warned (design warnings)" in html
    assert html.count('class="lagwarn variant-unexercised"') == 2  # each variant's own section
    # the speedups' cells in the HiCache table: device for both, host for on
    assert html.count("no tier hit: measured recompute") == 3


# -- the pure parts: which phases, which figures, the verdict's lines, compare's rows ---------


def _records(phase: str, cached: int, host: int = 0, reported: bool = True, workload: str = "parallel_prefixes"):
    from dataclasses import replace

    from tests.factories import make_record

    recs = []
    for i in range(2):
        r = make_record(
            workload=workload, phase=phase, index=i, prompt_tokens=1000, cached_tokens=cached, cached_host=host
        )
        r = replace(r, cached_device=cached - host)
        recs.append(r if reported else replace(r, cached_device=None, cached_host=None))
    return recs


def test_a_later_pass_without_host_hits_is_unexercised_only_where_the_variant_has_a_host_tier():
    from harness.analysis.summary import summarize

    recs = _records("pass1", 0) + _records("pass2", 900, host=0)  # pass 2 hit the GPU, not the host
    kinds = {"parallel_prefixes": "parallel_prefixes"}
    (u,) = summarize(recs, kinds, tiers={"device", "host"})["unexercised"]
    assert (u["phase"], u["tier"], u["cached_tokens"], u["tier_tokens"]) == ("pass2", "host", 1800, 0)
    assert u["figures"] == ["second_pass_speedup"] and "do not measure the host tier" in u["text"]
    assert summarize(recs, kinds, tiers={"device"})["unexercised"] == []  # HiCache off: a miss is expected
    assert "unexercised" not in summarize(recs, kinds)  # no tiers given: not judged
    hit = _records("pass1", 0) + _records("pass2", 900, host=600)
    assert summarize(hit, kinds, tiers={"device", "host"})["unexercised"] == []


def test_without_tiers_reported_only_nothing_cached_at_all_counts():
    from harness.analysis.summary import summarize

    kinds = {"parallel_prefixes": "parallel_prefixes"}
    some = _records("pass2", 900, reported=False)
    assert summarize(some, kinds, tiers={"device", "host"})["unexercised"] == []
    (u,) = summarize(_records("pass2", 0, reported=False), kinds, tiers={"device", "host"})["unexercised"]
    assert u["tier_tokens"] is None and "got no cache hit at all" in u["text"]


def test_a_figure_that_counts_the_hits_itself_is_a_true_zero_not_recompute():
    from harness.analysis.summary import summarize

    recs = _records("seed", 0, workload="fan") + _records("fanout", 0, workload="fan")
    (u,) = summarize(recs, {"fan": "prefix_sharing_fanout"}, tiers={"device"})["unexercised"]
    assert u["figures"] == ["fanout_ttft_ratio"]  # not fanout_cached_fraction: a check on it fails for real


def test_warnings_are_stated_with_the_verdict_and_change_no_outcome():
    from harness.analysis.verdict import Outcome, run_verdict, variant_verdict
    from tests.factories import as_status, as_summary

    summary = {"n_requests": 4, "n_errors": 0, "unexercised": [{"text": "w/repeat_device got no cache hit at all"}]}
    v = variant_verdict("on", as_status({"state": "ok"}), as_summary(summary))
    assert v.outcome is Outcome.PASS and [w.code for w in v.warnings] == ["unexercised_phase"]
    run = run_verdict([v])
    assert run.outcome is Outcome.PASS and "  warning: on: w/repeat_device got no cache hit at all" in run.lines()
    assert run.to_json()["warnings"][0]["variant"] == "on"


def test_compare_makes_a_gated_figure_of_recompute_inconclusive():
    from harness.compare.comparison import MetricRow
    from harness.compare.rows import unexercised_rows
    from tests.factories import as_summary

    def row(metric: str, phase: str = "*") -> MetricRow:
        return MetricRow(
            "on", "rp", phase, metric, "ratio", True, 2.0, 2.1, 3, 3, None, 0.05, "", "", None, "unchanged"
        )

    rows = [row("host_speedup"), row("device_speedup"), row("ttft_ms", "cold")]
    cand = {"unexercised": [{"workload": "rp", "figures": ["host_speedup"], "text": "rp/repeat_after_evict ..."}]}
    unexercised_rows(as_summary({}), as_summary(cand), rows)
    assert [r.state for r in rows] == ["inconclusive", "unchanged", "unchanged"]
    assert rows[0].note.startswith("candidate measured recompute: rp/repeat_after_evict")

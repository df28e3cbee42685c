"""The results table (`harness show RUN`, and the end of `harness run`): its figures are the
stored run folder's (summary.json, verdict.json, comparison.json), never recomputed."""

from __future__ import annotations

import json
from pathlib import Path

from harness.analysis.results_table import results_table, to_text
from harness.cli import main
from harness.store import results
from tests.conftest import write_scenario


def _summary(run: Path, variant: str) -> dict:
    return json.loads((run / variant / "summary.json").read_text())


def _p50(summary: dict, wl: str, phase: str) -> float:
    return summary["workloads"][wl]["phases"][phase]["metrics"]["ttft_ms"]["p50"]


def test_every_figure_is_the_stored_summary_s(golden_run):
    run = golden_run("healthy")
    table = results_table(run)
    s = _summary(run, "on-r2")
    on = next(r for r in table.rows if r.variant == "on-r2")
    assert on.cells["cold_ttft_ms"].value == _p50(s, "cold_prefill", "cold")
    assert on.cells["device_hit_ttft_ms"].value == _p50(s, "repeat_prefill", "repeat_device")
    assert on.cells["host_hit_ttft_ms"].value == _p50(s, "repeat_prefill", "repeat_after_evict")
    assert (
        on.cells["second_pass_speedup"].value == s["workloads"]["parallel_prefixes"]["derived"]["second_pass_speedup"]
    )
    assert on.cells["decode_tok_s"].value == s["workloads"]["decode"]["derived"]["decode_tok_s"]
    assert on.parity == s["quality"]["parity"]["verdict"]
    phases = [p for w in s["workloads"].values() for p in w["phases"].values() if not p.get("filler")]
    host = sum(p["hits"]["host_tokens"] for p in phases) / sum(p["hits"]["prompt_tokens"] for p in phases)
    assert 0 < host < 1 and abs(on.cells["host_share"].value - 100 * host) < 1e-9
    off = next(r for r in table.rows if r.variant == "off")
    assert off.cells["host_share"].value == 0
    failed = next(r for r in table.rows if r.variant == "on-200gb")
    assert failed.state == "startup_failed" and all(c.value is None for c in failed.cells.values())


def test_a_changed_summary_changes_the_table(golden_run):
    """One source: edit the stored figure and the table follows."""
    run = golden_run("healthy")
    s = _summary(run, "on-r2")
    s["workloads"]["parallel_prefixes"]["derived"]["second_pass_speedup"] = 12.5
    results.write_json_atomic(run / "on-r2" / "summary.json", s)
    text = to_text(results_table(run))
    (line,) = [ln for ln in text.splitlines() if ln.startswith("on-r2 ")]
    assert "12.5" in line.split()


def test_the_change_against_the_baseline_and_what_would_test_it(golden_run):
    run = golden_run("healthy")
    rows = [
        {
            "variant": "on-r2",
            "workload": "cold_prefill",
            "phase": "cold",
            "metric": "ttft_ms",
            "change": 0.25,
            "state": "regression",
        },
        {
            "variant": "on-r2",
            "workload": "parallel_prefixes",
            "phase": "*",
            "metric": "second_pass_speedup",
            "change": -0.031,
            "state": "inconclusive",
        },
        {
            "variant": "on-r2",
            "workload": "quality",
            "phase": "*",
            "metric": "parity",
            "change": None,
            "state": "unchanged",
        },
    ]
    results.write_json_atomic(
        run / "comparison.json", {"metrics": rows, "baseline": {"path": "/runs/base"}, "verdict": "FAIL"}
    )
    table = results_table(run)
    assert table.baseline == "/runs/base"
    on = next(r for r in table.rows if r.variant == "on-r2")
    assert on.cells["cold_ttft_ms"].change == 0.25 and on.cells["cold_ttft_ms"].state == "regression"
    text = to_text(table)
    (line,) = [ln for ln in text.splitlines() if ln.startswith("on-r2 ")]
    assert "(+25.0% REGRESSION)" in line and "(-3.1%?)" in line
    assert "more repeats (--repeats N) or a gate" in text
    assert "change against baseline /runs/base" in text
    assert "no baseline compared" not in text


def test_without_a_comparison_it_says_how_to_get_one(golden_run):
    run = golden_run("healthy")
    text = to_text(results_table(run))
    assert f"no baseline compared: harness compare {run} --baseline latest" in text
    assert "%?" not in text and "REGRESSION" not in text


def test_show_prints_it_and_json_for_scripts(golden_run, capsys):
    run = golden_run("healthy")
    assert main(["show", str(run)]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[1].split()[:3] == ["variant", "outcome", "cold"]
    assert main(["show", str(run), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    on = next(v for v in data["variants"] if v["variant"] == "on-r2")
    assert (
        on["second_pass_speedup"]["value"]
        == _summary(run, "on-r2")["workloads"]["parallel_prefixes"]["derived"]["second_pass_speedup"]
    )
    assert on["second_pass_speedup"]["source"] == "parallel_prefixes.second_pass_speedup"


def test_show_of_no_run_is_bad_input(tmp_path, capsys):
    assert main(["show", str(tmp_path / "nothing")]) == 2
    assert "no such run folder" in capsys.readouterr().err


SCENARIO = """\
name: table
server:
  backend: sim
  model_path: models/llama-tiny
  args: {--max-total-tokens: 4096}
  startup_timeout_s: 30
  request_timeout_s: 10
  sim: {time_scale: 0.02, startup_s: 0}
variants:
  - name: off
workloads:
  - kind: cold_prefill
    n: 3
    prompt_tokens: 200
    warmup: 0
sampling: {enabled: false}
"""


def test_a_run_ends_with_its_table(tmp_path, capsys):
    scenario = write_scenario(tmp_path, SCENARIO)
    assert main(["run", str(scenario), "--results-dir", str(tmp_path / "r"), "--no-report"]) == 0
    out = capsys.readouterr().out
    (run,) = (tmp_path / "r" / "table").iterdir()
    cold = _p50(_summary(run, "off"), "cold_prefill", "cold")
    (line,) = [ln for ln in out.splitlines() if ln.startswith("off ")]
    assert line.split()[:3] == ["off", "PASS", f"{cold:.3g}" if cold < 100 else f"{cold:,.0f}"]
    assert out.index("verdict: PASS") < out.index("cold TTFT ms") < out.index("results: ")


def test_a_sweep_s_knee_and_goodput_show_where_one_ran(golden_run):
    run = golden_run("healthy")
    s = _summary(run, "on-r2")
    s["workloads"]["decode"]["derived"].update(knee_rate=6.0, goodput_rps=5.5)
    results.write_json_atomic(run / "on-r2" / "summary.json", s)
    table = results_table(run)
    on = next(r for r in table.rows if r.variant == "on-r2")
    assert (on.cells["knee"].value, on.cells["knee"].unit) == (6.0, "req/s")
    assert on.cells["goodput_rps"].value == 5.5 and on.cells["goodput_rps"].source == "decode.goodput_rps"
    text = to_text(table)
    assert "knee" in text.splitlines()[1] and "goodput req/s" in text.splitlines()[1]
    (line,) = [ln for ln in text.splitlines() if ln.startswith("on-r2 ")]
    assert "6 req/s" in line and "5.5" in line.split()
    # a run with no sweep has no knee column
    assert "knee" not in to_text(results_table(golden_run("regressed"))).splitlines()[1]

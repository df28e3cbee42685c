"""harness compare on synthetic run folders built from factory records (no server).

`write_run` builds a real run folder (manifest, status.json, summary.json from
`harness.summary.summarize`, requests.jsonl, COMPLETE); `tests/test_history.py` reuses it.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest

from harness import compare as C
from harness import results
from harness.summary import summarize
from tests.factories import MS, make_record

SCENARIO_TEXT = """name: synth
server: {backend: sim, model_path: models/llama-tiny}
variants:
  - name: off
  - name: on
    hicache: {ratio: 2}
workloads:
  - kind: cold_prefill
    prompt_tokens: 8000
expectations:
  checks:
    - "on: cold_prefill.cold.ttft_ms_p50 <= 1000"
  thresholds:
    ttft_p50: 5%
"""


def records(ttft_ms: list[float], variant: str = "on", workload: str = "cold_prefill", phase: str = "cold"):
    return [make_record(variant=variant, workload=workload, phase=phase, repeat=i, index=0,
                        sent_ns=(1000 + i * 10_000) * MS, ttft_ms=t, prompt_tokens=8000)
            for i, t in enumerate(ttft_ms)]


def write_run(results_dir: Path, run_id: str, variants: dict[str, list | str], *, scenario: str = "synth",
              text: str = SCENARIO_TEXT, complete: bool = True, expect: dict[str, str] | None = None,
              summaries: dict[str, dict] | None = None) -> Path:
    """A run folder. ``variants``: name → request records (state ok) or a failure cause string
    (state startup_failed). ``summaries`` overrides a variant's summary.json."""
    root = Path(results_dir) / scenario / run_id
    root.mkdir(parents=True)
    expect = expect or {}
    manifest = {"schema_version": 1, "kind": "run",
                "scenario": {"name": scenario, "path": "scenarios/synth.yaml", "text": text, "hash": "h"},
                "harness_version": "0", "backend": "sim", "simulated": True, "created_at": run_id,
                "variants": [{"name": n, "config_hash": "c", "argv": [], "env": {},
                              "hicache": None if n == "off" else {"ratio": 2}, "expect": expect.get(n, "ok")}
                             for n in variants]}
    results.write_json_atomic(root / "manifest.json", manifest)
    for name, recs in variants.items():
        vdir = root / results.safe_name(name)
        exp = expect.get(name, "ok")
        if isinstance(recs, str):
            status = {"schema_version": 1, "variant": name, "state": "startup_failed", "cause": recs,
                      "expect": exp, "expect_met": exp == "startup_failed"}
            summary = {"schema_version": 1, "workloads": None}
        else:
            status = {"schema_version": 1, "variant": name, "state": "ok", "cause": None, "expect": exp,
                      "expect_met": exp == "ok"}
            summary = summarize(recs)
            with results.JsonlWriter(vdir / "requests.jsonl", fsync=False) as w:
                for r in recs:
                    w.append(dataclasses.asdict(r))
        results.write_json_atomic(vdir / "status.json", status)
        results.write_json_atomic(vdir / "summary.json", (summaries or {}).get(name, summary))
    if complete:
        results.write_json_atomic(root / "COMPLETE", {"at": run_id})
    return root


def noisy(center: float, n: int, sd: float = 0.01, seed: int = 0) -> list[float]:
    rng = np.random.default_rng(seed)
    return list(center * (1 + rng.normal(0, sd, n)))


def args(run: Path, baseline: str | Path, results_dir: Path, junit=None, markdown=None) -> argparse.Namespace:
    return argparse.Namespace(run=str(run), baseline=str(baseline), results_dir=str(results_dir),
                              junit=None if junit is None else str(junit),
                              markdown=None if markdown is None else str(markdown))


def rows(comp: C.Comparison, metric: str = "ttft_ms", variant: str = "on") -> list[C.MetricRow]:
    return [m for m in comp.metrics if m.metric == metric and m.variant == variant]


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


# ---------------------------------------------------------------------------------- whole runs


def test_identical_runs_pass(tmp_path):
    recs = {"off": records(noisy(100, 8), "off"), "on": records(noisy(100, 8, seed=3))}
    base = write_run(tmp_path, "20260101T000000Z-aaaaaa", recs)
    cand = write_run(tmp_path, "20260102T000000Z-bbbbbb", recs)
    assert C.cli_main(args(cand, base, tmp_path)) == 0
    data = json.loads((cand / "comparison.json").read_text())
    assert data["verdict"] == "pass"
    assert {m["state"] for m in data["metrics"]} == {"unchanged"}


def test_ten_percent_ttft_regression_with_8_repeats(tmp_path, monkeypatch):
    base = write_run(tmp_path, "20260101T000000Z-aaaaaa", {"off": records(noisy(100, 8), "off"),
                                                          "on": records(noisy(100, 8, seed=1))})
    cand = write_run(tmp_path, "20260102T000000Z-bbbbbb", {"off": records(noisy(100, 8, seed=5), "off"),
                                                          "on": records(noisy(110, 8, seed=2))})
    summary = tmp_path / "step_summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    junit, md = tmp_path / "j.xml", tmp_path / "s.md"
    assert C.cli_main(args(cand, base, tmp_path, junit, md)) == 1
    comp = C.compare_runs(results.load_run(base), results.load_run(cand))
    (ttft,) = rows(comp)
    assert ttft.state == "regression" and ttft.test == "mann_whitney" and ttft.p_value < 0.05
    assert ttft.threshold_source == "ttft_p50" and 0.07 < ttft.change < 0.13
    assert {m.state for m in rows(comp, variant="off")} <= {"unchanged"}
    # CI outputs
    tree = ET.parse(junit)
    failures = [tc for tc in tree.iter("testcase") if tc.find("failure") is not None]
    assert sorted((f.get("classname"), f.get("name")) for f in failures) == [
        ("on.cold_prefill.cold", "prefill_tok_s"), ("on.cold_prefill.cold", "ttft_ms")]
    assert "regression" in md.read_text() and summary.read_text() == md.read_text()


def test_noise_only_passes(tmp_path):
    base = write_run(tmp_path, "20260101T000000Z-aaaaaa", {"on": records(noisy(100, 8, sd=0.02, seed=1))})
    cand = write_run(tmp_path, "20260102T000000Z-bbbbbb", {"on": records(noisy(100, 8, sd=0.02, seed=2))})
    assert C.cli_main(args(cand, base, tmp_path)) == 0


def test_two_repeats_is_insufficient_data(tmp_path):
    base = write_run(tmp_path, "20260101T000000Z-aaaaaa", {"on": records([100, 101])})
    cand = write_run(tmp_path, "20260102T000000Z-bbbbbb", {"on": records([110, 111])})
    assert C.cli_main(args(cand, base, tmp_path)) == 0
    comp = C.compare_runs(results.load_run(base), results.load_run(cand))
    assert rows(comp)[0].state == "insufficient_data"


def test_introduced_failure_is_a_regression(tmp_path):
    base = write_run(tmp_path, "20260101T000000Z-aaaaaa", {"off": records(noisy(100, 8), "off"),
                                                          "on": records(noisy(100, 8))})
    cand = write_run(tmp_path, "20260102T000000Z-bbbbbb", {"off": records(noisy(100, 8), "off"), "on": "cuda_fault"})
    assert C.cli_main(args(cand, base, tmp_path)) == 1
    data = json.loads((cand / "comparison.json").read_text())
    on = next(v for v in data["variants"] if v["variant"] == "on")
    assert on["state"] == "introduced_failure"
    assert not [m for m in data["metrics"] if m["variant"] == "on"]  # a failure is never a zero
    # its expectation cannot be evaluated → a failed expectation too
    assert any(e["variant"] == "on" and e["outcome"] == "not_evaluable" and e["failed"] for e in data["expectations"])


def test_latest_picks_the_newest_good_earlier_run(tmp_path):
    good = write_run(tmp_path, "20260101T000000Z-aaaaaa", {"on": records(noisy(100, 8))})
    write_run(tmp_path, "20260102T000000Z-bbbbbb", {"on": "cuda_fault"})  # unexpected failure: not good
    write_run(tmp_path, "20260103T000000Z-cccccc", {"on": records(noisy(100, 8))}, complete=False)
    cand = write_run(tmp_path, "20260104T000000Z-dddddd", {"on": records(noisy(100, 8, seed=4))})
    write_run(tmp_path, "20260105T000000Z-eeeeee", {"on": records(noisy(100, 8))})  # newer than the candidate
    assert C.find_latest_good(tmp_path, "synth", cand) == good
    assert C.cli_main(args(cand, "latest", tmp_path)) == 0
    assert json.loads((cand / "comparison.json").read_text())["baseline"]["run_id"] == good.name


def test_latest_without_a_baseline_evaluates_expectations_only(tmp_path):
    cand = write_run(tmp_path, "20260104T000000Z-dddddd", {"on": records(noisy(100, 8))})
    assert C.cli_main(args(cand, "latest", tmp_path)) == 0
    assert json.loads((cand / "comparison.json").read_text())["verdict"] == "no_baseline"


def test_bad_input_names_the_file(tmp_path, capsys):
    cand = write_run(tmp_path, "20260104T000000Z-dddddd", {"on": records(noisy(100, 8))})
    assert C.cli_main(args(cand, tmp_path / "nope", tmp_path)) == 2
    assert "nope" in capsys.readouterr().err
    m = json.loads((cand / "manifest.json").read_text())
    m["schema_version"] = 99
    (cand / "manifest.json").write_text(json.dumps(m))
    assert C.cli_main(args(cand, cand, tmp_path)) == 2
    err = capsys.readouterr().err
    assert "manifest.json" in err and "99" in err


def test_harness_error_exits_3(tmp_path, monkeypatch):
    run = write_run(tmp_path, "20260104T000000Z-dddddd", {"on": records(noisy(100, 8))})

    def boom(*a, **k):
        raise RuntimeError("bug")
    monkeypatch.setattr(C, "compare_runs", boom)
    assert C.cli_main(args(run, run, tmp_path)) == 3


def test_markdown_escapes_names():
    comp = C.Comparison("regression", candidate={"scenario": "s", "run_id": "r"},
                        variants=[C.VariantRow("a|<b>", "ok", "startup_failed", "introduced_failure", "x")])
    md = C.to_markdown(comp)
    assert "a\\|&lt;b&gt;" in md and "<b>" not in md

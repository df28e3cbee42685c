"""``harness run SCENARIO --decide --baseline RUN`` on the simulator (harness/compare/rounds.py): a
gated row the night cannot decide gets the round the comparison advises, run as a new run folder
and pooled, until the comparison decides; the budget stops the loop."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.cli import main
from tests.conftest import write_scenario

# every second request stalls (its first token takes twice as long): a spread of about ±50 % a
# request. The night sends one request, so its gated row cannot be judged whatever the box's
# speed (a side needs 2+ values; with 2 a night an idle box sometimes decided it at once and the
# budget test saw no INCONCLUSIVE night); the rounds' repeats can
SCENARIO = """\
name: decide
server:
  backend: sim
  model_path: models/llama-tiny
  args: {--max-total-tokens: 4096, --skip-tokenizer-init: true}
  startup_timeout_s: 30
  request_timeout_s: 10
  liveness_idle_s: 0.1
  sim: {time_scale: 0.5, startup_s: 0}
variants:
  - name: "off"
    sim_faults: [stall_every=2]
workloads:
  - kind: cold_prefill
    n: 1
    prompt_tokens: 1024
    warmup: 0
  - kind: short_ttft
    n: 2
    prompt_tokens: 32
    long_prompt_tokens: null
sampling: {enabled: false}
gate: [cold_prefill.cold.ttft_ms]
expectations:
  checks: ["short_ttft.alone.n >= 2"]
  thresholds: {ttft_ms: 100%}
verdict: {rounds: 2{budget}}
"""


def _runs(results: Path) -> set[Path]:
    return set((results / "decide").iterdir()) if (results / "decide").exists() else set()


@pytest.fixture(scope="module")
def baseline(tmp_path_factory) -> tuple[Path, Path]:
    """(the results folder, a baseline of 12 repeats: 12 requests)."""
    tmp = tmp_path_factory.mktemp("decide")
    scenario = write_scenario(tmp, SCENARIO.replace("{budget}", ""))
    results = tmp / "r"
    assert main(["run", str(scenario), "--results-dir", str(results), "--no-report", "--repeats", "12"]) == 0
    (base,) = _runs(results)
    return results, base


def _decide(tmp_path: Path, results: Path, base: Path, budget: str, capsys) -> tuple[int, str, set[Path]]:
    scenario = write_scenario(tmp_path, SCENARIO.replace("{budget}", budget))
    before = _runs(results)
    argv = ["run", str(scenario), "--results-dir", str(results), "--no-report", "--decide", "--baseline", str(base)]
    rc = main(argv)
    return rc, capsys.readouterr().out, _runs(results) - before


def test_an_inconclusive_night_gets_the_round_it_needs_and_decides(tmp_path, baseline, capsys):
    results, base = baseline
    rc, out, new = _decide(tmp_path, results, base, "", capsys)
    lines = [line for line in out.splitlines() if line.startswith("harness: ")]
    assert lines[0].startswith("harness: look 1: INCONCLUSIVE; round 2 of at most 3: "), out
    assert "more repeats of off without quality, only cold_prefill, for off cold_prefill.cold.ttft_ms: " in lines[0]
    assert lines[1].startswith("harness: round 2: ") and "pooled with the night" in lines[1]
    # decided after the round (a third look only where the box's load widened the round's spread)
    rounds_said = [line for line in lines if line.startswith("harness: round ")]
    assert lines[-1] in {f"harness: look {k}: PASS: decided" for k in (2, 3)}, out
    assert lines[-1] == f"harness: look {1 + len(rounds_said)}: PASS: decided", out
    assert rc == 0 and len(new) == 1 + len(rounds_said)  # the night and each round, its own run folder
    night, *rounds = sorted(new)
    rnd = rounds[0]
    manifest = json.loads((rnd / "manifest.json").read_text())
    assert manifest["repeats"] > 1 and [v["name"] for v in manifest["variants"]] == ["off"]
    # the round ran only the workload its undecided row needs; the other's check is not evaluated there
    assert [r["workload"] for r in map(json.loads, (rnd / "off" / "requests.jsonl").open())] == ["cold_prefill"] * (
        manifest["repeats"]
    )
    expectations = json.loads((rnd / "expectations.json").read_text())
    (check,) = [c for c in expectations["checks"] if c["check"] == "short_ttft.alone.n >= 2"]
    assert check["outcome"] == "skipped" and "this round runs only cold_prefill" in check["reason"]
    comparison = json.loads((night / "comparison.json").read_text())
    assert comparison["verdict"] == "PASS" and comparison["candidate"]["rounds"] == [r.name for r in rounds]
    (row,) = [m for m in comparison["metrics"] if m["gating"]]
    repeats = sum(json.loads((r / "manifest.json").read_text())["repeats"] for r in rounds)
    assert row["state"] == "unchanged" and row["n_candidate"] == 1 + repeats
    assert "## HiCache harness compare: decide" in out and "PASS" in out


def test_the_budget_stops_the_rounds(tmp_path, baseline, capsys):
    """verdict.budget_minutes below what the night measured: no round, INCONCLUSIVE (exit 4)."""
    results, base = baseline
    rc, out, new = _decide(tmp_path, results, base, ", budget_minutes: 0.001", capsys)
    assert rc == 4 and len(new) == 1, out
    assert "round 2 not run: " in out and "verdict.budget_minutes 0.001 spent" in out
    (night,) = new
    assert json.loads((night / "comparison.json").read_text())["verdict"] == "INCONCLUSIVE"


@pytest.mark.slow  # seven nights and a round: ~30-40 s on a loaded box
def test_a_pool_of_nights_is_the_baseline_of_every_look(tmp_path, capsys):
    """--decide --baseline latest --pool 6: six earlier nights of one request each are pooled into
    a baseline of 6 values (one night alone has no spread: a side needs 2+), every look is made
    against that pool, and the last look PASSes with the pool named in comparison.json."""
    scenario = write_scenario(tmp_path, SCENARIO.replace("{budget}", ""))
    results = tmp_path / "r"
    base = ["run", str(scenario), "--results-dir", str(results), "--no-report"]
    for _ in range(POOL):
        assert main(base) == 0
    nights = sorted(_runs(results))  # run ids sort as they were made
    capsys.readouterr()
    rc = main([*base, "--decide", "--baseline", "latest", "--pool", str(POOL)])
    out = capsys.readouterr().out
    new = sorted(_runs(results) - set(nights))
    assert rc == 0 and len(new) >= 2, out  # the night and its round(s)
    assert "harness: look 1: INCONCLUSIVE; round 2 of at most 3: " in out
    assert "PASS: decided" in out, out
    comparison = json.loads((new[0] / "comparison.json").read_text())
    assert comparison["verdict"] == "PASS" and comparison["candidate"]["rounds"] == [r.name for r in new[1:]]
    assert comparison["baseline"]["run_id"] == nights[-1].name
    assert comparison["baseline"]["pool"] == [n.name for n in reversed(nights[:-1])]
    (row,) = [m for m in comparison["metrics"] if m["gating"]]
    assert row["n_baseline"] == POOL and row["n_candidate"] > 1


POOL = 6

"""Plan for a verdict (harness/compare/planning.py): the sample size a threshold needs at a
measured spread (checked against the test compare runs), the parity test's keys, the plan of a
scenario from its earlier runs (validate / --dry-run / repeats: auto within a budget), the
family of gating rows (Holm), and the one line an INCONCLUSIVE comparison ends with."""

from __future__ import annotations

import numpy as np
import pytest

from harness.cli import main as harness
from harness.compare import compare_runs
from harness.compare.planning import RowPlan, ScenarioPlan
from harness.compare.power import comparison_advice, parity_keys_needed, pooled_log_spread, units_needed
from harness.compare.statistics import holm_rejects, significance
from harness.scenario import load_scenario
from harness.store import results, run_folder
from tests.conftest import MODELS
from tests.factories import SCENARIO_TEXT, cold_records, noisy, write_run

RUNS = ("20260101T000000Z-aaaaaa", "20260102T000000Z-bbbbbb", "20260103T000000Z-cccccc")


@pytest.mark.parametrize(("sd", "threshold"), [(0.02, 0.05), (0.05, 0.05)])
def test_the_planned_n_gives_the_power_the_plan_promises(sd, threshold):
    """At the planned n a side, compare's own test finds a threshold-sized change (log-normal
    noise of ``sd``) significant in about 95 % of 120 seeded trials; at half of it, clearly
    less often."""
    n = units_needed(sd, threshold)
    assert n is not None and n >= 2

    def power(k: int) -> float:
        rng = np.random.default_rng(7)
        hits = 0
        for _ in range(120):
            b = np.exp(rng.normal(0, sd, k))
            c = np.exp(rng.normal(np.log1p(threshold), sd, k))
            hits += significance(b, c).p_value < 0.05
        return hits / 120

    assert power(n) >= 0.88
    if n >= 6:
        assert power(n // 2) < power(n) - 0.1


def test_units_needed_edges():
    assert units_needed(0.0, 0.05) == 2
    assert units_needed(0.05, 0.0) is None
    assert units_needed(5.0, 0.01) is None  # beyond any run
    assert units_needed(0.02, 0.05) < units_needed(0.04, 0.05) < units_needed(0.04, 0.02)


def test_parity_keys_needed():
    assert parity_keys_needed(0.01, exact_control=False) == 5  # 1 / C(10, 5) = 1/252
    assert parity_keys_needed(0.05, exact_control=False) == 4
    assert parity_keys_needed(0.01, exact_control=True) == 1


def test_holm_keeps_the_family_wise_rate():
    assert holm_rejects([0.001, 0.04, 0.03]) == [True, False, False]
    assert holm_rejects([0.01, 0.02]) == [True, True]  # 0.01 < 0.025, then 0.02 < 0.05
    rng = np.random.default_rng(0)
    families = [holm_rejects(list(rng.uniform(size=20))) for _ in range(2000)]
    assert np.mean([any(f) for f in families]) <= 0.06  # 20 healthy rows: ~5 % of nights, not ~64 %


def test_auto_repeats_within_the_budget():
    rows = [RowPlan("on", "w.p.ttft_ms", "request", 0.05, 1, 0.05, "", 1.0, 12, 12, 2.0)]
    plan = ScenarioPlan("s", "auto", rows, measured_on=["r1"], minutes_per_repeat=2.0)
    assert plan.auto_repeats()[0] == 12
    plan.budget_minutes = 10
    n, why = plan.auto_repeats()
    assert n == 5 and "budget_minutes" in why
    assert ScenarioPlan("s", "auto").auto_repeats()[0] == 3  # nothing measured: a first night


def _scenario(tmp_path, extra: str):
    model = MODELS / "llama-tiny"
    text = SCENARIO_TEXT.replace("models/llama-tiny", str(model)) + extra
    path = tmp_path / "synth.yaml"
    path.write_text(text)
    return path, text


def test_validate_and_auto_take_the_plan_from_earlier_runs(tmp_path, capsys):
    """Two earlier nights of 4 requests at ±3 %: validate prints the plan (the row, its unit, the
    spread and where it came from, the count it needs) and says plainly that repeats: 1 cannot
    decide; with repeats: auto the count is the plan's."""
    path, text = _scenario(tmp_path, "gate: [cold_prefill.cold.ttft_ms]\n")
    for i, rid in enumerate(RUNS[:2]):
        nights = {v: cold_records(noisy(100, 4, sd=0.03, seed=i), variant=v) for v in ("off", "on")}
        write_run(tmp_path / "results", rid, nights, text=text)
    assert harness(["validate", str(path), "--results-dir", str(tmp_path / "results")]) == 0
    out = capsys.readouterr().out
    assert "on: cold_prefill.cold.ttft_ms (threshold 5%, one request per unit): spread ±" in out
    assert "requests within 2 nights" in out and "CANNOT DECIDE at repeats 1: needs repeats" in out
    path.write_text(path.read_text() + "repeats: auto\n")
    scenario = load_scenario(path)
    assert scenario.repeats_auto and scenario.repeats == 3
    from harness.compare.planning import plan_scenario, resolve_repeats

    planned = plan_scenario(scenario, tmp_path / "results").needed_repeats
    lines = resolve_repeats(scenario, tmp_path / "results")
    assert scenario.repeats == planned and lines[0].startswith(f"repeats: auto → {planned}")
    assert any("decides" in line for line in lines)


def test_an_inconclusive_comparison_says_what_to_add(tmp_path):
    """Two nights of one request each: INCONCLUSIVE, and one line says what would decide it;
    with two requests at ±4 % it names the repeats its spread needs."""
    _, text = _scenario(tmp_path, "gate: [cold_prefill.cold.ttft_ms]\n")
    a = write_run(tmp_path, RUNS[0], {"on": cold_records([100.0])}, text=text)
    b = write_run(tmp_path, RUNS[1], {"on": cold_records([101.0])}, text=text)
    comp = compare_runs(run_folder.load_run(a), run_folder.load_run(b))
    assert comp.outcome == "INCONCLUSIVE"
    assert comp.advice.startswith("to decide, add: repeats: 2 at least") and "one request a side" in comp.advice
    c = write_run(tmp_path, RUNS[2], {"on": cold_records(noisy(100, 3, sd=0.04, seed=5))}, text=text)
    d = write_run(tmp_path, "20260104T000000Z-dddddd", {"on": cold_records(noisy(100, 3, sd=0.04, seed=6))}, text=text)
    comp = compare_runs(run_folder.load_run(c), run_folder.load_run(d))
    if comp.outcome == "INCONCLUSIVE":
        assert "needs" in comp.advice and "requests a side for its 5% threshold" in comp.advice
    assert "gate" not in comp.advice  # the scenario has one
    rows = [r for r in comp.metrics if r.metric == "ttft_ms"]
    assert comparison_advice(rows, 1, gated=False).endswith(
        "a gate: on the rows that matter (every row gates now)"
    ) or (rows[0].state != "inconclusive")


def test_pooled_log_spread():
    assert pooled_log_spread(np.array([1.0, 1.0]), np.array([2.0, 2.0])) == 0.0  # centred per side
    assert pooled_log_spread(np.array([1.0]), np.array([2.0])) is None
    assert pooled_log_spread(np.exp(np.array([0.0, 0.2])), np.exp(np.array([1.0, 1.2]))) == pytest.approx(
        0.1414, abs=1e-3
    )


# ------------------------------------------------------------------- deciding sequentially


def test_alpha_spent_over_the_looks_keeps_the_false_alarm_rate():
    """Healthy nights looked at up to 4 times as rounds add values, stopping at the first
    regression: at 5 % per look about 12 % of them would FAIL; at the spent alpha at most ~5 %."""
    from harness.compare.statistics import look_alpha

    assert look_alpha(0) == 0.05 and look_alpha(4) == pytest.approx(0.01)
    rng = np.random.default_rng(11)

    def any_alarm(alpha: float) -> float:
        alarms = 0
        for _ in range(400):
            b, c = rng.normal(0, 0.05, 12), rng.normal(0, 0.05, 12)
            for n in (3, 6, 9, 12):  # the night, then three rounds of 3 more
                if significance(np.exp(b[:n]), np.exp(c[:n]), alpha=alpha).p_value < alpha:
                    alarms += 1
                    break
        return alarms / 400

    assert any_alarm(0.05) > 0.08
    assert any_alarm(look_alpha(3)) <= 0.06


def test_a_round_decides_what_the_night_could_not(tmp_path):
    """verdict.rounds: 2. A 15 % slower night of 2 requests against a baseline of 2 is
    inconclusive, and says to add a round; with a round of 8 more requests pooled it FAILs at the
    spent alpha; the notes show the round and why. More rounds than declared are refused."""
    _, text = _scenario(tmp_path, "gate: [cold_prefill.cold.ttft_ms]\nverdict: {rounds: 2}\n")
    base = write_run(tmp_path, RUNS[0], {"on": cold_records(noisy(100, 10, sd=0.03, seed=1))}, text=text)
    night = write_run(tmp_path, RUNS[1], {"on": cold_records(noisy(115, 2, sd=0.03, seed=2))}, text=text)
    more = write_run(tmp_path, RUNS[2], {"on": cold_records(noisy(115, 8, sd=0.03, seed=3))}, text=text)
    first = compare_runs(run_folder.load_run(base), run_folder.load_run(night))
    assert first.outcome == "INCONCLUSIVE" and "--round NEW_RUN" in first.advice
    assert "round 2 of at most 3 (verdict.rounds): harness run scenarios/synth.yaml --repeats " in first.advice
    assert "--no-quality --only on, then harness compare" in first.advice
    assert any("look 1 of at most 3" in n and "alpha 0.0167" in n for n in first.notes)
    second = compare_runs(run_folder.load_run(base), run_folder.load_run(night), rounds=[run_folder.load_run(more)])
    assert second.outcome == "FAIL"
    (row,) = [m for m in second.metrics if m.metric == "ttft_ms" and m.variant == "on"]
    assert row.n_candidate == 10 and row.state == "regression"
    assert any(n.startswith(f"round 2: {RUNS[2]} pooled with the candidate (repeats") for n in second.notes)
    with pytest.raises(results.ResultsError, match="verdict.rounds allows 2"):
        compare_runs(run_folder.load_run(base), run_folder.load_run(night), rounds=[run_folder.load_run(more)] * 3)


def test_power_at_and_max_spread_agree_with_units_needed():
    from harness.compare.power import max_spread, power_at

    for n, thr in ((3, 0.05), (8, 0.05), (24, 0.10)):
        sd = max_spread(n, thr)
        assert power_at(n, sd, thr) == pytest.approx(0.95, abs=0.005)
        assert units_needed(sd * 0.99, thr) <= n < units_needed(sd * 1.05, thr) + 1
    assert max_spread(1, 0.05) is None and power_at(1, 0.01, 0.05) == 0.0


def test_dry_run_prints_the_plan(tmp_path, capsys):
    """`harness run --dry-run` ends with the plan, and a gate it cannot decide says so."""
    path, text = _scenario(tmp_path, "gate: [cold_prefill.cold.ttft_ms]\n")
    for i, rid in enumerate(RUNS[:2]):
        nights = {v: cold_records(noisy(100, 2, sd=0.08, seed=i), variant=v) for v in ("off", "on")}
        write_run(tmp_path / "results", rid, nights, text=text)
    assert harness(["run", str(path), "--dry-run", "--results-dir", str(tmp_path / "results")]) == 0
    out = capsys.readouterr().out
    assert "# plan for a verdict (power 95% at a 5% false alarm" in out
    assert "# " + "  on: cold_prefill.cold.ttft_ms (threshold 5%, one request per unit): spread ±" in out
    assert "CANNOT DECIDE at repeats 1" in out


def test_the_plans_spread_is_not_moved_by_one_stray_value_where_compares_test_is_not():
    from harness.compare.power import within_log_spread

    rng = np.random.default_rng(7)
    nights = [np.exp(rng.normal(np.log(100.0), 0.03, 12)) for _ in range(3)]
    calm = within_log_spread(nights)
    assert calm == pytest.approx(0.03, rel=0.35)
    stalled = [np.append(a[:-1], a[-1] * 2.0) for a in nights]  # one request a night stalls 2x
    assert within_log_spread(stalled) < 1.5 * calm  # the sd of the same values is ~6x calm
    assert float(np.std(np.log(np.concatenate(stalled)), ddof=1)) > 4 * calm
    # below 5 values a side compare's test (Welch) is moved by it: so is the plan
    small = [np.array([100.0, 101.0, 99.0, 200.0]), np.array([100.0, 102.0, 98.0, 100.0])]
    assert within_log_spread(small) > 0.2
    assert within_log_spread([np.array([5.0]), np.array([6.0])]) is None

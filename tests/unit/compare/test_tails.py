"""Tail and drift rows: the p99 a median cannot see, a slowdown within one run, and the rows
compare adds for them where a metric's declaration asks (harness.compare.tails)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from harness.compare.rows import RowSample, tail_and_drift_rows
from harness.compare.tails import decide_drift, decide_tail, tail_min_values
from harness.measures.metrics import GATEABLE, METRICS


def healthy(n: int, seed: int) -> np.ndarray:
    return 10.0 * np.exp(np.random.default_rng(seed).normal(0.0, 0.03, n))


def stalled(n: int, seed: int, every: int = 20) -> np.ndarray:
    v = healthy(n, seed)
    v[every - 1 :: every] *= 2.0  # one request in `every` takes twice as long
    return v


def test_one_in_twenty_stalls_is_a_tail_regression_with_the_median_unchanged():
    base, cand = healthy(300, 1), stalled(300, 2)
    assert abs(np.median(cand) / np.median(base) - 1) < 0.02  # the median sees nothing
    d = decide_tail(base, cand, threshold=0.25)
    assert d.state == "regression" and d.p_value < 0.01 and d.change > 0.5, d
    assert "15/300 candidate" in d.note and "beyond the baseline's p99 + 25%" in d.note


def test_healthy_tails_do_not_regress():
    states = [decide_tail(healthy(300, s), healthy(300, 100 + s), threshold=0.25).state for s in range(20)]
    assert "regression" not in states and states.count("unchanged") >= 19, states


def test_a_fixed_tail_is_an_improvement():
    assert decide_tail(stalled(300, 3), healthy(300, 4), threshold=0.25).state == "improved"


def test_too_few_values_for_a_p99_is_inconclusive():
    assert tail_min_values(0.99) == 100 and tail_min_values(0.95) == 20
    d = decide_tail(healthy(50, 1), stalled(50, 2), threshold=0.25)
    assert d.state == "inconclusive" and "needs 100+ a side" in d.note


def test_drift_within_one_run():
    rising = 10.0 * (1 + np.linspace(0, 0.3, 60)) * np.exp(np.random.default_rng(5).normal(0, 0.02, 60))
    d, first, last = decide_drift(rising, higher_is_better=False, threshold=0.1)
    assert d.state == "regression" and first == last == 20 and d.change > 0.15
    flat, _, _ = decide_drift(healthy(60, 6), higher_is_better=False, threshold=0.1)
    assert flat.state == "unchanged"
    short, _, _ = decide_drift(healthy(20, 7), higher_is_better=False, threshold=0.1)
    assert short.state == "inconclusive" and "24+ in all" in short.note


def test_rows_follow_the_declarations():
    ttft = METRICS["ttft_ms"]
    assert ttft.tail_name == "ttft_ms_p99" and ttft.drift_name == "ttft_ms_drift"
    assert {"ttft_ms_p99", "ttft_ms_drift", "tpot_ms_p99", "host_hit_fraction"} <= set(GATEABLE)
    rows = tail_and_drift_rows(
        "on", ("short_ttft", "alone", "ttft_ms"), RowSample(healthy(300, 1)), RowSample(stalled(300, 2)), {}
    )
    by = {r.metric: r for r in rows}
    assert set(by) == {"ttft_ms_p99", "ttft_ms_drift"}
    assert by["ttft_ms_p99"].state == "regression" and by["ttft_ms_p99"].name == "short_ttft.alone.ttft_ms_p99"
    assert by["ttft_ms_drift"].state == "unchanged" and by["ttft_ms_drift"].n_candidate == 100
    few = tail_and_drift_rows(
        "on", ("short_ttft", "alone", "ttft_ms"), RowSample(healthy(10, 1)), RowSample(healthy(10, 2)), {}
    )
    assert few == []  # neither row could decide: left out
    decode = tail_and_drift_rows(
        "on", ("d", "decode", "decode_tok_s"), RowSample(healthy(300, 1)), RowSample(healthy(300, 1)), {}
    )
    assert decode == []  # no tail or drift declared


@pytest.mark.parametrize("name, ok", [("ttft_ms_p99", True), ("ttft_ms_drift", True), ("ttft_ms_p98", False)])
def test_gates_may_name_tail_and_drift_rows(name, ok):
    from harness.scenario.checks import gate_problem
    from harness.scenario.loading import load_scenario_text

    scn = load_scenario_text(
        "name: t\nserver: {backend: sim, model_path: models/llama-tiny}\nvariants: [{name: a}]\n"
        "workloads: [{kind: short_ttft, n: 5, long_prompt_tokens: null}]\n",
        base_dir=Path(__file__).resolve().parents[3] / "scenarios",
    )
    problem = gate_problem(scn, f"short_ttft.alone.{name}")
    assert (problem is None) == ok, problem


def test_host_hit_fraction_is_judged_where_either_run_hit_the_host_tier(tmp_path):
    """A candidate that lost every host hit (a host tier serving too few pages, a hybrid match cut
    back to no checkpoint) is a regression from the baseline's share, not a row that vanished; a
    phase neither run served from the host has no such row."""
    from harness.analysis.frames import requests_frame
    from harness.compare.rows import compare_variant
    from tests.factories import make_record

    def frame(name, host, phase="repeat_after_evict"):
        recs = [
            make_record(workload="w", phase=phase, index=i, prompt_tokens=4000, cached_tokens=host, cached_host=host)
            for i in range(10)
        ]
        path = tmp_path / f"{name}.jsonl"
        path.write_text("".join(r.to_json() + "\n" for r in recs))
        return requests_frame(path, "v")

    def row(base, cand):
        got = [r for r in compare_variant("v", base, cand, {}, {}, {}, {}, {}) if r.metric == "host_hit_fraction"]
        return got[0] if got else None

    lost = row(frame("b", 3000), frame("c", 0))
    assert lost is not None and lost.state == "regression" and lost.change == pytest.approx(-1.0)
    assert row(frame("b0", 0, "cold"), frame("c0", 0, "cold")) is None
    assert row(frame("b1", 3000), frame("c1", 3000)).state == "unchanged"

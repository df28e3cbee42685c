"""Tail and drift rows: the p99 a median cannot see, a slowdown within one run, and the rows
compare adds for them where a metric's declaration asks (harness.compare.tails)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from harness.compare.rows import RowSample, tail_and_drift_rows
from harness.compare.tails import decide_drift, decide_tail, decide_tail_share, tail_min_values
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


def busy(n: int, seed: int, level: float = 1.0) -> np.ndarray:
    """A night on a loaded box: its level scaled, and bursts of load that slow up to 8 requests in
    a row by 40-70 % (a 5 % chance a request starts one)."""
    rng = np.random.default_rng(seed)
    v = healthy(n, seed) * level
    i = 0
    while i < n:
        if rng.random() < 0.05:
            k = int(rng.integers(2, 9))
            v[i : i + k] *= rng.uniform(1.4, 1.7)
            i += k
        i += 1
    return v


def test_one_in_twenty_stalls_raise_the_tail_share():
    """Stalls 2x on 5 % of the requests: the share beyond 1.5x the night's own median rises by 5
    points, on 30 blocks a side; p99's exceedance test sees it too, but the share row does it
    measured against each night's own median, so a night at another level changes nothing."""
    d = decide_tail_share(healthy(300, 1), stalled(300, 2), threshold=0.5)
    assert d.state == "regression" and d.p_value < 0.001 and d.change == pytest.approx(0.05), d
    assert "15/30 vs 0/30" in d.note
    slower = decide_tail_share(healthy(300, 1), 1.3 * healthy(300, 2), threshold=0.5)
    assert slower.state == "unchanged" and slower.change == 0  # every value 30 % slower: no tail
    assert decide_tail_share(stalled(300, 3), healthy(300, 4), threshold=0.5).state == "improved"
    few = decide_tail_share(healthy(90, 1), stalled(90, 2), threshold=0.5)
    assert few.state == "inconclusive" and "needs 10+ a side" in few.note


def test_bursts_of_load_keep_the_false_alarm_rate():
    """Healthy nights on a loaded box (bursts of 2-8 requests in a row 40-70 % slower, levels 0.8
    to 1.3): blocks of consecutive requests keep false alarms at the test's 5 % (10 of 200 pairs
    here); the same shares counted request by request -- a burst taken as several independent
    tail events -- raise 35 of 200 (17.5 %)."""
    from harness.compare.tails import _beyond_p, tail_share

    blocks = per_request = 0
    for s in range(200):
        b, c = busy(300, s, 0.8 + 0.25 * (s % 3)), busy(300, 500 + s, 1.3 - 0.5 * (s % 2))
        blocks += decide_tail_share(b, c, threshold=0.5).state == "regression"
        (_, _, sb, _), (_, _, sc, _) = tail_share(b, 0.5), tail_share(c, 0.5)
        per_request += _beyond_p(round(sc * 300), 300, round(sb * 300), 300) < 0.05 and sc - sb >= 0.02
    assert blocks <= 14 and per_request >= 25, (blocks, per_request)


def test_a_slowdown_over_the_run_drifts_against_the_baseline():
    """The candidate's last third 30 % slower than its first, the baseline flat: a drift
    regression; both nights drifting alike (the box's load rising through both) is not."""
    ramp = 1 + np.linspace(0, 0.45, 300)
    d, db, dc = decide_drift(healthy(300, 1), healthy(300, 2) * ramp, higher_is_better=False, threshold=0.2)
    assert d.state == "regression" and d.change > 0.25 and abs(db) < 0.02 and dc > 0.25, d
    assert "candidate +" in d.note and "baseline " in d.note
    both, _, _ = decide_drift(healthy(300, 3) * ramp, healthy(300, 4) * ramp, higher_is_better=False, threshold=0.2)
    assert both.state == "unchanged", both
    flat, _, _ = decide_drift(busy(300, 5), busy(300, 6), higher_is_better=False, threshold=0.2)
    assert flat.state == "unchanged", flat
    short, _, _ = decide_drift(healthy(300, 7), healthy(140, 8), higher_is_better=False, threshold=0.2)
    assert short.state == "inconclusive" and "(150+ units)" in short.note


def test_rows_follow_the_declarations():
    ttft = METRICS["ttft_ms"]
    assert (ttft.tail_name, ttft.tail_share_name, ttft.drift_name) == ("ttft_ms_p99", "ttft_ms_tail", "ttft_ms_drift")
    assert {"ttft_ms_p99", "ttft_ms_tail", "ttft_ms_drift", "tpot_ms_p99", "host_hit_fraction"} <= set(GATEABLE)
    rows = tail_and_drift_rows(
        "on", ("short_ttft", "alone", "ttft_ms"), RowSample(healthy(300, 1)), RowSample(stalled(300, 2)),
        {"ttft_ms_tail": 0.5},
    )  # fmt: skip
    by = {r.metric: r for r in rows}
    assert set(by) == {"ttft_ms_p99", "ttft_ms_tail", "ttft_ms_drift"}
    assert by["ttft_ms_p99"].state == "regression" and by["ttft_ms_p99"].name == "short_ttft.alone.ttft_ms_p99"
    tail = by["ttft_ms_tail"]
    assert (
        tail.state == "regression" and tail.threshold == 0.5 and (tail.baseline_p50, tail.candidate_p50) == (0.0, 0.05)
    )
    from harness.compare.render import _change

    assert _change(tail) == "+5.0 points" and _change(by["ttft_ms_p99"]).endswith("%")  # a share's rise is in points
    assert by["ttft_ms_drift"].state == "unchanged" and by["ttft_ms_drift"].n_candidate == 300
    few = tail_and_drift_rows(
        "on", ("short_ttft", "alone", "ttft_ms"), RowSample(healthy(10, 1)), RowSample(healthy(10, 2)), {}
    )
    assert few == []  # no row could decide: left out
    decode = tail_and_drift_rows(
        "on", ("d", "decode", "decode_tok_s"), RowSample(healthy(300, 1)), RowSample(healthy(300, 1)), {}
    )
    assert decode == []  # no tail or drift declared


@pytest.mark.parametrize(
    "name, ok", [("ttft_ms_p99", True), ("ttft_ms_tail", True), ("ttft_ms_drift", True), ("ttft_ms_p98", False)]
)
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

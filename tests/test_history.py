"""harness history: the change-point rule (pure) and the page over synthetic nightly runs."""

from __future__ import annotations

import argparse

import numpy as np
import pytest

from harness import history as H
from tests.test_compare import noisy, records, write_run


def series(values, seed=0, sd=0.015):
    rng = np.random.default_rng(seed)
    return [v * (1 + rng.normal(0, sd)) for v in values]


def test_flat_noisy_series_is_not_flagged():
    for seed in range(30):
        d = H.detect_change(series([100] * 20, seed), 0.05, higher_is_better=True)
        assert d.state == "stable", (seed, d)


def test_sustained_ten_percent_step_is_flagged():
    d = H.detect_change(series([100] * 10 + [90] * 5, 1), 0.05, higher_is_better=True)
    assert d.state == "change"
    (cp,) = d.change_points
    assert cp.index == 10 and cp.direction == "regression" and -0.13 < cp.change < -0.07
    # the same step on a lower-is-better metric (e.g. TTFT) going down is an improvement
    assert H.detect_change(series([100] * 10 + [90] * 5, 1), 0.05, False).change_points[0].direction == "improvement"


def test_one_night_spike_that_reverts_is_not_flagged():
    values = series([100] * 12, 2)
    values[8] = 80
    assert H.detect_change(values, 0.05, True).state == "stable"


def test_a_drop_on_the_last_night_only_waits_for_a_second():
    values = series([100] * 10, 3) + [85]
    assert H.detect_change(values, 0.05, True).state == "stable"
    assert H.detect_change(values + [85], 0.05, True).state == "change"


def test_three_nights_is_insufficient_history():
    d = H.detect_change([100, 90, 80], 0.05, True)
    assert d.state == "insufficient_history" and "need 5" in d.reason


def test_failed_nights_are_skipped_not_zero():
    values = series([100] * 8, 4)
    values[4] = None  # the variant failed that night
    assert H.detect_change(values, 0.05, True).state == "stable"


def test_history_page_over_runs(tmp_path):
    results_dir, reports_dir = tmp_path / "results", tmp_path / "reports"
    for night in range(8):
        ttft = 100 if night < 5 else 115  # a sustained TTFT step from night 6 on
        variants = {"on": records(noisy(ttft, 6, seed=night))}
        if night == 3:
            variants = {"on": "cuda_fault"}
        write_run(results_dir, f"202601{night + 1:02d}T000000Z-aaaaaa", variants)
    h = H.collect(results_dir, "synth")
    assert len(h.runs) == 8 and h.failed == {"on": [3]}
    d = h.decisions["cold_prefill.prefill_total_tok_s"]["on"]
    assert d.state == "change" and d.change_points[0].index == 5
    out_args = argparse.Namespace(scenario="synth", results_dir=str(results_dir), reports_dir=str(reports_dir))
    assert H.cli_main(out_args) == 0
    html = (reports_dir / "synth" / "history.html").read_text()
    assert "cold_prefill.prefill_total_tok_s" in html and "data:image/png;base64," in html
    assert "change" in html


def test_history_of_unknown_scenario_is_bad_input(tmp_path):
    a = argparse.Namespace(scenario="nothing", results_dir=str(tmp_path), reports_dir=str(tmp_path))
    assert H.cli_main(a) == 2


def test_history_uses_the_scenarios_ttft_threshold(tmp_path):
    """short_ttft.<phase>.ttft_ms_p50 takes the scenario's ``ttft_p50`` threshold (as compare
    does for ttft_ms), not the 5 % default: a sustained +20 % step under a 30 % threshold is stable."""
    from tests.test_compare import SCENARIO_TEXT

    text = SCENARIO_TEXT.replace("ttft_p50: 5%", "ttft_p50: 30%")
    results_dir = tmp_path / "results"
    for night in range(8):
        ttft = 100.0 if night < 4 else 120.0
        summary = {"schema_version": 1, "workloads": {"short_ttft": {"derived": {}, "phases": {
            "alone": {"metrics": {"ttft_ms": {"p50": 10.0}}},
            "during_long": {"metrics": {"ttft_ms": {"p50": ttft}}}}}}}
        write_run(results_dir, f"202601{night + 1:02d}T000000Z-aaaaaa", {"on": records([10.0] * 3)},
                  text=text, summaries={"on": summary})
    h = H.collect(results_dir, "synth")
    assert h.thresholds["ttft_p50"] == pytest.approx(0.3)
    assert h.decisions["short_ttft.during_long.ttft_ms_p50"]["on"].state == "stable"

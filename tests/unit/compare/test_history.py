"""harness history: the change-point rule (pure), the headline metrics the workload kinds
declare, the golden runs' history and page, and a change point over synthetic nightly runs."""

from __future__ import annotations

import argparse
import json
import shutil

import numpy as np
import pytest

from harness.cli.history import cli_main
from harness.compare import history as H
from harness.measures.metrics import METRICS
from harness.workloads import derived_figures, kinds
from tests.conftest import GOLDEN_RUNS
from tests.factories import SCENARIO_TEXT, as_summary, cold_records, noisy, write_run


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
        variants = {"on": cold_records(noisy(ttft, 6, seed=night))}
        if night == 3:
            variants = {"on": "cuda_fault"}
        write_run(results_dir, f"202601{night + 1:02d}T000000Z-aaaaaa", variants)
    h = H.collect(results_dir, "synth")
    assert len(h.runs) == 8 and h.failed == {"on": [3]}
    d = h.decisions["cold_prefill.prefill_total_tok_s"]["on"]
    assert d.state == "change" and d.change_points[0].index == 5
    out_args = argparse.Namespace(scenario="synth", results_dir=str(results_dir), reports_dir=str(reports_dir))
    assert cli_main(out_args) == 0
    html = (reports_dir / "synth" / "history.html").read_text()
    assert "cold_prefill.prefill_total_tok_s" in html and "data:image/png;base64," in html
    assert "change" in html


def test_history_of_unknown_scenario_is_bad_input(tmp_path):
    a = argparse.Namespace(scenario="nothing", results_dir=str(tmp_path), reports_dir=str(tmp_path))
    assert cli_main(a) == 2


def test_history_uses_the_scenarios_ttft_threshold(tmp_path):
    """short_ttft.<phase>.ttft_ms_p50 takes the scenario's ``ttft_p50`` threshold (as compare
    does for ttft_ms), not the 5 % default: a sustained +20 % step under a 30 % threshold is stable."""
    text = SCENARIO_TEXT.replace("ttft_p50: 5%", "ttft_p50: 30%")
    results_dir = tmp_path / "results"
    for night in range(8):
        ttft = 100.0 if night < 4 else 120.0
        summary = {
            "schema_version": 1,
            "workloads": {
                "short_ttft": {
                    "derived": {},
                    "phases": {
                        "alone": {"metrics": {"ttft_ms": {"p50": 10.0}}},
                        "during_long": {"metrics": {"ttft_ms": {"p50": ttft}}},
                    },
                }
            },
        }
        write_run(
            results_dir,
            f"202601{night + 1:02d}T000000Z-aaaaaa",
            {"on": cold_records([10.0] * 3)},
            text=text,
            summaries={"on": summary},
        )
    h = H.collect(results_dir, "synth")
    assert h.thresholds["ttft_p50"] == pytest.approx(0.3)
    assert h.decisions["short_ttft.during_long.ttft_ms_p50"]["on"].state == "stable"


def test_headline_values_are_what_the_kinds_declare():
    """Every kind's derived figures (those its summary holds) and history stats, named as the
    expectations name them; a workload of a kind nobody declares has none."""
    for name, kind in kinds().items():
        phases = {s.phase: {"metrics": {s.metric: {s.stat: 1.0}}} for s in kind.history_stats}
        summary = {
            "workloads": {
                "w": {"derived": {d.name: 2.0 for d in kind.derived}, "phases": phases},
                "x": {"derived": {"made_up": 3.0}, "phases": {}},
            }
        }
        got = H.headline_values(as_summary(summary), {"w": name, "x": "no_such_kind"})
        assert got == {
            **{f"w.{d.name}": 2.0 for d in kind.derived},
            **{f"w.{s.phase}.{s.metric}_{s.stat}": 1.0 for s in kind.history_stats},
        }, name


def test_metric_direction_reads_the_declarations():
    for name, d in derived_figures().items():
        assert H.metric_direction(f"w.{name}") == (d.higher_is_better, d.unit)
    for name, m in METRICS.items():
        assert H.metric_direction(f"w.phase.{name}_p50") == (m.higher_is_better, m.unit)
    assert H.metric_direction("w.unknown") == (True, "")


def test_history_of_the_golden_runs(tmp_path):
    """Complete runs only (the interrupted one is left out); the kinds' headline metrics; and
    the page (harness.report.history_page) through the command."""
    results_dir = tmp_path / "results"
    for name in ("healthy", "regressed", "merged", "interrupted"):
        shutil.copytree(GOLDEN_RUNS / name, results_dir / "golden" / name)
    h = H.collect(results_dir, "golden")
    assert [r["run_id"] for r in h.runs] == ["healthy", "merged", "regressed"]
    assert "short_ttft.during_long.ttft_ms_p50" in h.series and "repeat_prefill.host_speedup" in h.series
    assert set(h.series["repeat_prefill.host_speedup"]) == {"off", "on-r2"}
    assert h.failed == {}  # on-200gb failed to start, as it declared
    reports_dir = tmp_path / "reports"
    a = argparse.Namespace(scenario="golden", results_dir=str(results_dir), reports_dir=str(reports_dir))
    assert cli_main(a) == 0
    html = (reports_dir / "golden" / "history.html").read_text()
    assert "short_ttft.during_long.ttft_ms_p50" in html and html.count("data:image/png;base64,") == len(h.series)


# ------------------------------------------------------- significance, per-repeat values, markers


def test_a_step_must_be_significant_not_only_beyond_the_threshold():
    """Nights of 3 repeats each: a 7 % step over 1 % noise is flagged; the same step over 12 %
    noise within each night is not (the test cannot tell it from the spread), although each
    night's median moved beyond the 5 % threshold."""
    rng = np.random.default_rng(7)

    def nights(level, sd, k):
        return [list(level * np.exp(rng.normal(0, sd, 3))) for _ in range(k)]

    quiet = nights(100, 0.01, 6) + nights(107, 0.01, 3)
    assert H.detect_change(quiet, 0.05, False).state == "change"
    spread = [[v * m for v, m in zip(night, (0.88, 1.0, 1.12))] for night in quiet]
    d = H.detect_change(spread, 0.05, False)
    assert d.state == "stable", d


def test_a_step_across_a_configuration_marker_is_not_flagged():
    values = series([100] * 6 + [85] * 6, 5)
    assert H.detect_change(values, 0.05, True).state == "change"
    d = H.detect_change(values, 0.05, True, breaks=[6])
    assert d.state == "stable" and "configurations" in d.reason
    # a real step later, inside the new configuration, still is
    later = series([100] * 6 + [85] * 5 + [70] * 4, 6)
    d = H.detect_change(later, 0.05, True, breaks=[6])
    assert d.state == "change" and [p.index for p in d.change_points] == [11]
    # too few nights in every configuration: insufficient history
    assert H.detect_change(series([100] * 8, 1), 0.05, True, breaks=[4]).state == "insufficient_history"


def test_config_markers():
    runs = [
        {"run_id": "r1", "scenario_hash": "s1", "config_hashes": {"off": "a", "on": "b"}},
        {"run_id": "r2", "scenario_hash": "s1", "config_hashes": {"off": "a", "on": "b"}},
        {"run_id": "r3", "scenario_hash": "s1", "config_hashes": {"off": "a", "on": "B"}, "created_at": "d3"},
        {"run_id": "r4", "scenario_hash": "s2", "config_hashes": {"off": "a", "on": "B"}},
        {"run_id": "r5", "scenario_hash": "s2", "config_hashes": {"off": "a"}},  # on left out (--only)
        {"run_id": "r6", "scenario_hash": "s2", "config_hashes": {"off": "a", "on": "B"}},
    ]
    markers, breaks = H.config_markers(runs)
    assert [(m.index, m.what, m.variants) for m in markers] == [
        (2, "config changed: on", ("on",)),
        (3, "scenario text changed", None),
    ]
    assert markers[0].created_at == "d3" and breaks == {"on": [2, 3], "off": [3]}


def test_headline_samples_are_the_per_repeat_values():
    summary = {
        "workloads": {
            "pp": {
                "derived": {"second_pass_speedup": 2.0},
                "derived_by_repeat": {"second_pass_speedup": [1.9, None, 2.1]},
                "phases": {},
            },
            "old": {"derived": {"second_pass_speedup": 3.0}, "phases": {}},
        }
    }
    kinds_ = {"pp": "parallel_prefixes", "old": "parallel_prefixes"}
    assert H.headline_samples(as_summary(summary), kinds_) == {
        "pp.second_pass_speedup": [1.9, 2.1],
        "old.second_pass_speedup": [3.0],
    }


def test_history_markers_and_simulated_labels_on_the_page(tmp_path):
    """A scenario edit between nights 4 and 5 (a 15 % TTFT step at the same night): a marker, no
    change point; the runs are labelled simulated."""
    results_dir, reports_dir = tmp_path / "results", tmp_path / "reports"
    for night in range(10):
        ttft = 100 if night < 5 else 115
        run = write_run(
            results_dir, f"202601{night + 1:02d}T000000Z-aaaaaa", {"on": cold_records(noisy(ttft, 4, seed=night))}
        )
        if night >= 5:
            m = json.loads((run / "manifest.json").read_text())
            m["scenario"]["hash"] = "edited"
            (run / "manifest.json").write_text(json.dumps(m))
    h = H.collect(results_dir, "synth")
    assert [(mk.index, mk.what) for mk in h.markers] == [(5, "scenario text changed")]
    assert h.simulated and all(r["simulated"] for r in h.runs)
    d = h.decisions["cold_prefill.prefill_total_tok_s"]["on"]
    assert d.state == "stable"
    assert (
        h.samples["cold_prefill.prefill_total_tok_s"]["on"][0]
        and len(h.samples["cold_prefill.prefill_total_tok_s"]["on"][0]) == 4
    )
    a = argparse.Namespace(scenario="synth", results_dir=str(results_dir), reports_dir=str(reports_dir))
    assert cli_main(a) == 0
    html = (reports_dir / "synth" / "history.html").read_text()
    assert "SIMULATED" in html and "scenario text changed" in html and "Configuration changes" in html


def test_night_spread_is_robust_to_one_step():
    flat = series([100] * 20, 5, sd=0.10)
    s = H.night_spread(flat)
    assert 0.06 < s < 0.16
    stepped = flat[:10] + [v * 0.5 for v in flat[10:]]
    assert H.night_spread(stepped, [0] * 10 + [1] * 10) is not None  # differences across a break are left out
    assert H.night_spread([100, 101]) is None  # one difference: no spread


def test_a_series_is_held_to_its_own_night_to_night_spread():
    """A cache-hit ratio swinging ±15 % night to night held to a 5 % threshold flags healthy
    nights; held to 3.5 × its own spread it does not, and says which threshold it used."""
    old = sum(
        H.detect_change(series([0.6] * 15, s, sd=0.15), 0.05, True, noise_k=0).state == "change" for s in range(30)
    )
    new = [H.detect_change(series([0.6] * 15, s, sd=0.15), 0.05, True) for s in range(30)]
    assert old >= 3
    assert sum(d.state == "change" for d in new) == 0
    assert all(d.threshold > 0.2 and "night-to-night spread" in d.reason for d in new)
    # a quiet series keeps its declared threshold, and a 10 % step on it is still found
    quiet = H.detect_change(series([100] * 10 + [90] * 5, 1), 0.05, True)
    assert quiet.state == "change" and quiet.threshold == 0.05


def test_slow_drift_is_flagged():
    """TTFT 1 % slower every night for 12 nights (noise 0.5 %): a drift of ~11 %, flagged as a
    regression; flat noisy nights never are."""
    drifting = series([100 * (1 + 0.01 * i) for i in range(12)], 7, sd=0.005)
    d = H.detect_change(drifting, 0.05, higher_is_better=False)
    assert d.drift is not None and d.drift.direction == "regression" and 0.08 < d.drift.change < 0.14
    assert d.regression and "slow drift" in d.reason
    for seed in range(30):  # flat noisy nights: no drift
        assert H.detect_change(series([100] * 12, seed), 0.05, False).drift is None, seed
    assert H.slow_drift([100, 101, 102, 103, 104], 0.01, False) is None  # too few nights

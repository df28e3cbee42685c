"""Energy per phase from NVML's counter (or the simulator's), joules per token, and the price of a
million tokens at the SLO with the cheapest variant that meets it."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.analysis.cost import Prices, run_costs, slo_goodput, variant_cost
from harness.analysis.energy import energy_summary
from harness.analysis.samples import SIMULATED_ENERGY, nvml_energy_j, summarize_samples
from harness.store import versions
from harness.store.phase_samples import PhaseSamples
from harness.store.records import RequestRecord
from harness.store.summary import Summary


def _s(t: int, phase: str, mj: list[int] | None = None, sim_j: float | None = None) -> dict:
    s: dict = {"t_ns": t * 10**9, "phase": phase}
    if mj is not None:
        s["gpus"] = [{"index": i, "mem_used_mib": 1.0, "util_pct": 0, "energy_mj": e} for i, e in enumerate(mj)]
    if sim_j is not None:
        s["counters"] = {SIMULATED_ENERGY + '{tp_rank="0"}': sim_j}
    return s


def test_nvml_energy_is_the_counters_increase_from_the_last_reading_before_the_phase_summed_over_gpus():
    samples = [_s(0, "idle", [1000, 5000]), _s(1, "w/cold", [3000, 9000]), _s(2, "w/cold", [4000, 10000])]
    assert nvml_energy_j(samples, 1, 2) == pytest.approx((3000 + 5000) / 1000)
    assert nvml_energy_j([_s(0, "x"), _s(1, "x")], 0, 1) is None  # no counter
    # a counter that went back (driver reload) counts nothing rather than a negative
    assert nvml_energy_j([_s(0, "x", [9000]), _s(1, "x", [100])], 1, 1) == 0.0
    phases = summarize_samples(samples)
    assert phases["w/cold"]["energy_j"] == pytest.approx(8.0) and phases["w/cold"]["energy_source"] == "nvml"


def test_the_simulators_counter_is_used_and_labelled_only_without_nvml():
    samples = [_s(0, "idle", sim_j=10.0), _s(1, "w/cold", sim_j=30.0), _s(2, "w/cold", sim_j=35.0)]
    p = summarize_samples(samples)["w/cold"]
    assert p["energy_j"] == pytest.approx(25.0) and p["energy_source"] == "simulated"
    both = [_s(0, "idle", [0], sim_j=10.0), _s(1, "w/cold", [2000], sim_j=99.0)]
    assert summarize_samples(both)["w/cold"]["energy_source"] == "nvml"


def _rec(phase: str, prompt: int, cached: int, out: int, workload: str = "w") -> RequestRecord:
    return RequestRecord(
        variant="v", workload=workload, phase=phase, repeat=0, index=0, rid="r", prompt_len=prompt,
        prompt_tokens=prompt, cached_tokens=cached, completion_tokens=out,
    )  # fmt: skip


def test_joules_per_token_count_computed_prompt_and_generated_tokens_as_declared():
    records = [_rec("cold", 1000, 0, 1), _rec("cold", 1000, 200, 1), _rec("decode", 10, 0, 200)]
    sampling = {"w/cold": {"energy_j": 90.0, "energy_source": "nvml"}, "w/decode": {"energy_j": 40.0}}
    e = energy_summary(records, {k: PhaseSamples.from_json(v) for k, v in sampling.items()})
    cold, dec = e["phases"]["w/cold"], e["phases"]["w/decode"]
    assert cold["computed_prompt_tokens"] == 1800 and cold["generated_tokens"] == 2
    assert cold["j_per_token"] == pytest.approx(90 / 1802) and cold["j_per_prompt_token"] == pytest.approx(90 / 1800)
    assert cold["j_per_generated_token"] is None  # a prefill phase: its energy is not the tokens it generated
    assert dec["j_per_generated_token"] == pytest.approx(40 / 200) and dec["j_per_prompt_token"] is None
    assert e["total"]["joules"] == pytest.approx(130) and e["source"] == "nvml"
    assert (
        energy_summary(records, {"w/cold": PhaseSamples.from_json({"energy_j": None})}) is None
    )  # nothing measured: no figures


def test_a_phase_the_counter_did_not_advance_over_is_too_short_to_measure_not_zero_joules():
    """A few ms of device hits read at the phase's edges, inside one update of NVML's counter."""
    samples = [_s(0, "idle", [1000]), _s(1, "w/cold", [50000]), _s(1, "w/hit", [50000]), _s(2, "w/next", [90000])]
    phases = summarize_samples(samples)
    assert phases["w/hit"]["energy_j"] == 0.0  # the counter's reading did not move
    records = [_rec("cold", 1000, 0, 1), _rec("hit", 1000, 1000, 1), _rec("next", 1000, 0, 1)]
    e = energy_summary(records, {k: PhaseSamples.from_json(v) for k, v in phases.items()})
    hit = e["phases"]["w/hit"]
    assert (
        hit["too_short"] and hit["joules"] is None and hit["j_per_token"] is None and hit["j_per_prompt_token"] is None
    )
    assert "too_short" not in e["phases"]["w/next"] and e["phases"]["w/next"]["joules"] == pytest.approx(40.0)
    assert e["phases"]["w/cold"]["joules"] == pytest.approx(49.0)
    assert e["total"]["joules"] == pytest.approx(49.0 + 40.0)  # what the hit used falls in the next phase's reading


def test_cost_per_million_tokens_and_the_cheapest_variant_that_meets_the_slo():
    prices = Prices(gpu_hour_usd=3.6, host_ram_gb_hour_usd=0.01, storage_tb_month_usd=73.0)
    off = variant_cost("off", prices, gpus=1, host_pool_gb=0, storage_gb=0, goodput_tok_s=1000, meets_slo=True)
    assert off.usd_per_hour == pytest.approx(3.6) and off.usd_per_mtok == pytest.approx(1.0)  # 3.6 M tok/h
    on = variant_cost("on", prices, gpus=1, host_pool_gb=100, storage_gb=1000, goodput_tok_s=2000, meets_slo=True)
    assert on.host_usd_per_hour == pytest.approx(1.0) and on.storage_usd_per_hour == pytest.approx(0.1)
    assert on.usd_per_mtok == pytest.approx(4.7 / 7.2)
    fast_but_late = variant_cost("x", prices, gpus=1, host_pool_gb=0, storage_gb=0, goodput_tok_s=9e9, meets_slo=False)
    out = run_costs([off, on, fast_but_late])
    assert out["cheapest"] == "on" and "cheapest meeting the SLO: on" in out["text"] and "next: off" in out["text"]
    assert run_costs([fast_but_late])["cheapest"] is None


def test_the_slo_goodput_is_the_first_swept_workloads_in_tokens_per_second():
    def typed(summary: dict) -> Summary:
        return Summary.from_json(
            Path("summary.json"), {"schema_version": versions.CURRENT[versions.SUMMARY], **summary}
        )

    summary = {
        "workloads": {
            "cold": {"derived": {}},
            "ol": {"derived": {"goodput_rps": 4.0, "knee_rate": 8.0}, "tokens_per_request": 250.0},
        }
    }
    assert slo_goodput(typed(summary)) == ("ol", 1000.0, True)
    summary["workloads"]["ol"]["derived"]["knee_rate"] = None  # the lowest point already missed it
    assert slo_goodput(typed(summary))[2] is False
    assert slo_goodput(typed({"workloads": {"cold": {"derived": {}}}})) == (None, None, False)


def test_the_scenarios_prices_are_range_checked_and_named_by_their_key():
    from harness.scenario.loading import load_scenario_text
    from harness.spec.errors import ScenarioError

    model = Path(__file__).resolve().parents[3] / "scenarios" / "models" / "llama-tiny"
    base = f"name: p\nserver: {{backend: sim, model_path: {model}}}\nvariants: [{{name: off}}]\n"
    ok = load_scenario_text(base + "cost: {gpu_hour_usd: 3.5}\n")
    assert ok.cost.gpu_hour_usd == 3.5 and ok.cost.host_ram_gb_hour_usd == 0.0
    for bad, key in [
        ("cost: {gpu_hour_usd: -1}", "cost.gpu_hour_usd"),
        ("cost: {gpu_hour_usd: 1, host_ram_gb_hour_usd: 1000}", "cost.host_ram_gb_hour_usd"),
        ("cost: {host_ram_gb_hour_usd: 0.01}", "cost.gpu_hour_usd"),  # required
        ("cost: {gpu_hour_usd: 1, tb_month: 3}", "cost.tb_month"),
    ]:
        with pytest.raises(ScenarioError) as e:
            load_scenario_text(base + bad + "\n")
        assert key in str(e.value), (bad, str(e.value))

"""The soak kind: its config, its slices on a simulated server, and its judgement of samples."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from harness.analysis.summary import add_sample_figures
from harness.analysis.verdict import Outcome, variant_verdict
from harness.workloads.kinds.soak import NOT_MEASURED, sample_figures
from tests.factories import as_status, as_summary
from tests.sim_workloads import run_on, sim, workload

MIX = [{"kind": "cold_prefill", "n": 1, "prompt_tokens": 64, "warmup": 0}]


def soak(**kw):
    return workload(**{"kind": "soak", "duration_s": 10, "slice_s": 1, "mix": MIX, **kw})


def test_the_mix_is_validated_as_the_other_kinds_configs():
    cfg = soak(mix=[*MIX, {"kind": "decode", "batch": 2, "output_tokens": 4}])
    assert [m.kind for m in cfg.mix] == ["cold_prefill", "decode"] and cfg.mix[1].batch == 2
    assert cfg.n_slices == 10
    for bad, says in [
        ({"mix": [{"kind": "cold_prefill", "prompt_tokens": "lots"}]}, "prompt_tokens"),
        ({"mix": [{"kind": "soak", "duration_s": 5, "mix": MIX}]}, "soak"),  # no soak in a soak
        ({"mix": []}, "at least 1"),
        ({"mix": [*MIX, *MIX]}, "distinct names"),
        ({"mix": [{**MIX[0], "timeout_s": 3}]}, "timeout_s"),
        ({"slice_s": 20}, "longer than duration_s"),
        ({"series": ["server_rss", "heap"]}, "heap"),
        ({"tolerance_per_h": {"server_rss_mib": 0}}, "expected a number in 1e-06..1,000,000,000 MiB per hour, got 0"),
    ]:
        with pytest.raises(ValidationError) as e:
            soak(**bad)
        assert says in str(e.value), bad


def _samples(values: dict[str, list[float]], slices: int = 8, per_slice: int = 3) -> list[dict]:
    out, t = [], 0
    for k in range(slices):
        for j in range(per_slice):
            s = {"t_ns": t, "phase": f"soak/slice{k:03d}"}
            for key, vs in values.items():
                s[key] = vs[k]
            out.append(s)
            t += 10**9
    return [{"t_ns": -1, "phase": "idle", "server_rss_kib": 1e12}, *out]  # outside the soak: not judged


def test_sample_figures_judge_each_series_on_its_slices():
    cfg = soak(duration_s=8, slice_s=1, settle_slices=1, tolerance_per_h={"server_rss_mib": 100})
    rss = [1024 * (100 + 10 * k) for k in range(8)]  # 10 MiB a 3-s slice: 12 GiB/h
    free = [1024 * 5000.0] * 8
    figures = sample_figures(cfg, _samples({"server_rss_kib": rss, "mem_available_kib": free}))
    series = figures["series"]
    assert series["server_rss"]["verdict"] == "LEAK"
    assert series["server_rss"]["slope_per_h"] == pytest.approx(12000, rel=0.01)
    assert len(series["server_rss"]["values"]) == 7  # the settling slice left out
    assert series["mem_available"]["verdict"] == "STABLE"
    assert series["gpu_memory"]["verdict"] == NOT_MEASURED  # no GPU in these samples
    (finding,) = figures["findings"]
    assert finding["outcome"] == "FAIL" and "server_rss LEAK" in finding["text"] and "MiB/h" in finding["text"]


def test_a_leak_fails_the_variant_and_an_inconclusive_series_makes_it_inconclusive():
    cfg = soak(duration_s=8, slice_s=1, settle_slices=1, series=["server_rss"])
    status = as_status({"state": "ok"})

    def verdict(rss: list[float], slices: int = 8):
        summary = {"n_requests": 5, "n_errors": 0, "workloads": {}}
        add_sample_figures(summary, _samples({"server_rss_kib": rss}, slices), {"soak": "soak"}, {"soak": cfg})
        return variant_verdict("v", status, as_summary(summary))

    leak = verdict([1024 * (100 + 10 * k) for k in range(8)])
    assert leak.outcome is Outcome.FAIL and leak.reasons[0].code == "soak_leak"
    assert verdict([1024 * 100.0] * 8).outcome is Outcome.PASS
    short = verdict([1024 * 100.0] * 3, slices=3)  # 2 slices after settling: too short a soak
    assert short.outcome is Outcome.INCONCLUSIVE and "too short" in short.reasons[0].text


def test_a_soak_on_a_simulated_server_runs_its_mix_once_a_slice_and_labels_the_records():
    cfg = soak(
        duration_s=1.5,
        slice_s=0.5,
        mix=[*MIX, {"kind": "decode", "batch": 2, "prompt_tokens": 32, "output_tokens": 4}],
    )
    with sim(8192) as server:
        outcome, records = run_on(server, [cfg])
    assert outcome.ok and outcome.completed == ["soak"]
    assert len(records) == 3 * 3  # 3 slices x (1 cold + 2 decodes)
    assert {r.workload for r in records} == {"soak"}
    assert sorted({r.phase for r in records}) == ["cold_prefill/cold", "decode/decode"]
    assert len({r.input_hash for r in records}) == 9  # never-seen prompts every slice
    first, last = min(r.sent_ns for r in records), max(r.sent_ns for r in records)
    assert (last - first) / 1e9 >= 0.95  # the third slice starts on its clock, 1 s after the first

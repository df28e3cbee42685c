"""Predicted vs achieved tier hits (`harness.measures.tier_model`): an LRU model of the reported pools
replays a variant's own sends and says where each repeated prompt should have been found; a
phase that exists to hit a tier and got more than one hit unit less is a named shortfall, in the
summary, the verdict's warnings and the console — seed 004's "prompts sent twice never hit"
(64-aligned prompts on a hybrid model) among them, not only "unexercised"."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace

from harness.cli import main
from harness.measures.tier_model import TierPools, phase_predictions, pools_for, shortfalls
from tests.conftest import MODELS
from tests.factories import make_record

MS = 1_000_000
# seed 004's shape, small: a hybrid model, two prompts sent again at once and after eviction
SCENARIO = """\
name: unexercised
server:
  backend: sim
  model_path: models/qwen3next-tiny
  args: {--max-total-tokens: 8192, --max-mamba-cache-size: 8}
  startup_timeout_s: 30
  request_timeout_s: 20
  liveness_idle_s: 0.1
  sim: {time_scale: 0.02, startup_s: 0}
variants:
  - name: off
  - name: on
    hicache: {ratio: 2}
workloads:
  - kind: repeat_prefill
    n: 2
    prompt_tokens: {L}
    eviction_tokens: "1.2x pool"
sampling: {enabled: false}
"""


def _sends(*prompts: tuple[str, str, int], output: int = 1):
    """Records sent one after another: (phase, prompt key, prompt tokens) each."""
    out = []
    for i, (phase, key, n) in enumerate(prompts):
        r = make_record(
            workload="repeat_prefill",
            phase=phase,
            index=i,
            sent_ns=(i + 1) * 1000 * MS,
            prompt_tokens=n,
            output_tokens=output,
            cached_tokens=0,
        )
        out.append(replace(r, input_hash=key))
    return out


def test_a_repeat_is_found_on_the_device_then_on_the_host_after_eviction():
    pools = TierPools(device_tokens=1000, host_tokens=3000)
    recs = _sends(
        ("cold", "a", 400),
        ("again", "a", 400),
        ("evict", "x", 400),
        ("evict", "y", 400),
        ("after", "a", 400),
    )
    preds = phase_predictions(recs, pools)
    assert preds[("repeat_prefill", "again")].predicted == {"device": 399, "host": 0, "storage": 0}
    assert preds[("repeat_prefill", "after")].predicted == {"device": 0, "host": 399, "storage": 0}
    # HiCache off: gone, and the model says which pool pushed it out
    off = phase_predictions(recs, replace(pools, host_tokens=None))
    assert off[("repeat_prefill", "after")].predicted_total == 0
    assert off[("repeat_prefill", "after")].missed_because == {"device pool": 1}
    # a page of 64: the hit is aligned down to it
    paged = phase_predictions(recs, replace(pools, page_size=64))
    assert paged[("repeat_prefill", "again")].predicted["device"] == 384


def test_write_back_keeps_on_the_host_only_what_the_device_evicted_and_a_small_host_pool_loses_it():
    recs = _sends(("cold", "a", 400), ("evict", "x", 700), ("after", "a", 400))
    wb = phase_predictions(recs, TierPools(device_tokens=1000, host_tokens=1000, write_policy="write_back"))
    assert wb[("repeat_prefill", "after")].predicted["host"] == 399
    small = phase_predictions(recs, TierPools(device_tokens=1000, host_tokens=500))
    assert small[("repeat_prefill", "after")].predicted_total == 0
    assert small[("repeat_prefill", "after")].missed_because == {"host pool": 1}


def test_a_hybrid_models_mamba_slots_bound_what_stays_cached():
    pools = TierPools(device_tokens=100_000, host_tokens=None, hybrid=True, mamba_device_slots=2)
    recs = _sends(("cold", "a", 1100), ("cold", "b", 1100), ("cold", "c", 1100), ("again", "a", 1100))
    preds = phase_predictions(recs, pools)
    assert preds[("repeat_prefill", "again")].predicted_total == 0
    assert preds[("repeat_prefill", "again")].missed_because == {"device Mamba slots": 1}
    roomy = phase_predictions(recs, replace(pools, mamba_device_slots=8))
    assert roomy[("repeat_prefill", "again")].predicted["device"] == 1088  # 64-token units


def test_a_shortfall_beyond_one_unit_is_named_with_both_numbers_and_an_aligned_hybrid_prompt_says_why():
    pools = TierPools(device_tokens=100_000, host_tokens=None, hybrid=True, mamba_device_slots=8)
    recs = _sends(("cold", "a", 8000), ("repeat_device", "a", 8000))
    preds = phase_predictions(recs, pools)
    (s,) = shortfalls(preds, pools, {("repeat_prefill", "repeat_device"): True})
    assert (s.predicted_total, s.achieved_total) == (7936, 0)
    assert "repeat_prefill/repeat_device got 0 cached tokens, 7,936 short of the 7,936 (device 7,936)" in s.text
    assert "multiple of 64 tokens on a hybrid model" in s.why
    # a phase not declared to hit a tier is never a shortfall; one short by less than a unit neither
    assert shortfalls(preds, pools, {}) == []
    got = [replace(r, cached_tokens=7900, cached_device=7900) if r.phase == "repeat_device" else r for r in recs]
    assert shortfalls(phase_predictions(got, pools), pools, {("repeat_prefill", "repeat_device"): True}) == []


def test_the_pools_come_from_status_preflight_and_server_answer():
    pools = {"max_total_num_tokens": 8192, "host_pool_tokens": 16385, "mamba_device_slots": None}
    p = pools_for(pools, {"prediction": {"page_size": 1}}, {}, {"device", "host"}, "write_through")
    assert (p.device_tokens, p.host_tokens, p.hybrid, p.storage) == (8192, 16385, False, False)
    assert pools_for(pools, None, None, {"device"}).host_tokens is None  # HiCache off: no host tier
    assert pools_for({}, None, None, {"device"}) is None  # no device pool size: nothing predicted


def test_seed_004s_shape_on_the_simulator_is_a_named_shortfall_in_the_verdict_and_the_console(tmp_path, capsys):
    shutil.copytree(MODELS / "qwen3next-tiny", tmp_path / "models" / "qwen3next-tiny")
    path = tmp_path / "unexercised.yaml"
    path.write_text(SCENARIO.replace("{L}", "1024"))
    main(["run", str(path), "--results-dir", str(tmp_path / "r"), "--no-report"])
    out = capsys.readouterr().out
    (run,) = (tmp_path / "r" / "unexercised").iterdir()
    on = json.loads((run / "on" / "summary.json").read_text())
    short = {s["phase"]: s for s in on["tier_prediction"]["shortfalls"]}
    assert set(short) == {"repeat_device", "repeat_after_evict"}
    assert (
        short["repeat_after_evict"]["predicted"]["host"] == 2 * 960
        and short["repeat_after_evict"]["achieved_total"] == 0
    )
    assert "multiple of 64 tokens on a hybrid model" in short["repeat_after_evict"]["why"]
    verdict = json.loads((run / "verdict.json").read_text())
    codes = [(w["variant"], w["code"]) for w in verdict["warnings"]]
    assert codes.count(("on", "tier_shortfall")) == 2
    assert "warning: on: tier-hit shortfall: repeat_prefill/repeat_after_evict got 0 cached tokens, 1,920 short" in out
    # a length off the multiple: the model and the server agree, nothing flagged
    path.write_text(SCENARIO.replace("{L}", "1100"))
    main(["run", str(path), "--results-dir", str(tmp_path / "r2"), "--no-report"])
    capsys.readouterr()
    (run2,) = (tmp_path / "r2" / "unexercised").iterdir()
    on2 = json.loads((run2 / "on" / "summary.json").read_text())
    assert on2["tier_prediction"]["shortfalls"] == []
    ph = on2["tier_prediction"]["phases"]["repeat_prefill"]["repeat_after_evict"]
    assert ph["predicted"]["host"] == ph["achieved"]["host"] == 2 * 1088


def test_a_mamba_pool_too_small_on_the_simulator_is_a_named_shortfall(tmp_path, capsys):
    """The server reports 8 Mamba slots (``--max-mamba-cache-size``) but keeps one prompt's state
    (9 as it logs them; the simulator's ``mamba_states_at_most=1``): the model, reading the reported pools, predicts
    the repeats' hits; the server gave none."""
    shutil.copytree(MODELS / "qwen3next-tiny", tmp_path / "models" / "qwen3next-tiny")
    text = SCENARIO.replace("{L}", "1100").replace(
        "    hicache: {ratio: 2}\n", "    hicache: {ratio: 2}\n    sim_faults: [mamba_states_at_most=1]\n"
    )
    path = tmp_path / "unexercised.yaml"
    path.write_text(text)
    main(["run", str(path), "--results-dir", str(tmp_path / "r"), "--no-report"])
    out = capsys.readouterr().out
    (run,) = (tmp_path / "r" / "unexercised").iterdir()
    on = json.loads((run / "on" / "summary.json").read_text())
    short = {s["phase"]: s for s in on["tier_prediction"]["shortfalls"]}
    assert short["repeat_device"]["predicted_total"] == 2 * 1088 and short["repeat_device"]["achieved_total"] == 0
    assert (
        "Mamba slots 9 device" in short["repeat_device"]["pools"]
    )  # 8 + 1 as sglang logs them; and short["repeat_device"]["why"] is None
    assert "warning: on: tier-hit shortfall: repeat_prefill/repeat_device got 0 cached tokens, 2,176 short" in out

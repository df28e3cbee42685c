"""harness.run.estimate: token arithmetic checked by hand, the host-tier window warnings, durations,
pools known and unknown before launch, and the nightly scenario's budget at seed 000's numbers."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.core.model_config import load_model_shape
from harness.run import gpu_pool
from harness.run.estimate import estimate_run
from harness.run.estimate_quality import churn_chunks
from harness.run.estimate_result import POOL_PREDICTED, POOL_STATED, POOL_UNKNOWN
from harness.scenario import load_scenario
from tests.conftest import write_scenario

ROOT = Path(__file__).resolve().parents[3]
MODELS = ROOT / "scenarios" / "models"

# P = 10,000 tokens, ratio 2 -> H = 20,001. Every number in the tests below is worked out by hand
# in the comments next to it.
SMALL = f"""
name: est
seed: 0
repeats: 2
server:
  backend: sim
  model_path: {MODELS / "llama-tiny"}
  args: {{--max-total-tokens: 10000, --context-length: 16384}}
  startup_retries: 1
  liveness_idle_s: 1
  sim: {{mem_available_gib: 64}}
variants:
  - name: off
  - name: on
    hicache: {{ratio: 2, write_policy: write_through}}
  - name: big
    hicache: {{size_gb: 200}}
    expect: startup_failed
    expect_cause: host_memory
workloads:
  - kind: cold_prefill
    n: 2
    prompt_tokens: 1000
    warmup: 1
  - kind: repeat_prefill
    n: 1
    prompt_tokens: 2000
    eviction_tokens: "1.2x pool"
  - kind: parallel_prefixes
    k: 4
    prompt_tokens: "0.3x pool"
    passes: 2
  - kind: short_ttft
    n: 2
    prompt_tokens: 32
    long_prompt_tokens: 3000
  - kind: decode
    batch: 2
    prompt_tokens: 100
    output_tokens: 50
  - kind: multi_turn
    sessions: 2
    turns: 3
    first_turn_tokens: 500
    turn_tokens: 100
    output_tokens: 10
  - kind: prefix_sharing_fanout
    prefix_tokens: 2000
    suffix_tokens: 100
    fanout: 3
sampling: {{idle_window_s: 2}}
quality:
  enabled: true
  baseline_variant: off
  tasks: [needle, variable_tracking]
  lengths: [3000]
  samples_per_task: 1
  max_new_tokens: 8
  churn_tokens: 15000
  reasks: 2
  mode: token_ids
"""


def load(tmp_path: Path, text: str, env: dict | None = None):
    return load_scenario(write_scenario(tmp_path, text, name="s"), env or {})


def by_name(run) -> dict:
    return {v.name: v for v in run.variants}


def work(variant, name: str):
    return next(w for w in variant.work if w.name == name)


@pytest.fixture
def small(tmp_path):
    return load(tmp_path, SMALL)


def test_token_arithmetic_by_hand(small):
    run = estimate_run(small, prefill_tok_s=1000, decode_tok_s=100, startup_s=10)
    on, off, big = by_name(run)["on"], by_name(run)["off"], by_name(run)["big"]
    assert (on.pool.gpu_tokens, on.pool.host_tokens) == (10_000, 20_001)  # ratio 2, one page more
    # (name, requests, sent, computed upper bound, expected on the ratio-2 variant), two repeats each
    rows = {
        # (1 warm-up + 2) x 1000
        "cold_prefill": (6, 6_000, 6_000, 6_000),
        # cold 2000 + at once 2000 + filler 1.2 x 10000 = 6 x 2000 + again 2000 = 18,000 sent;
        # computed: the repeat at once hits the GPU, the one after 14,000 tokens of traffic does not
        # (OFF recomputes it, ratio 2 keeps it on the host: 14,000 <= 20,001)
        "repeat_prefill": (18, 36_000, 32_000, 28_000),
        # W = 4 x 3000 = 12,000 > P: pass 2 recomputed at worst, from the host at ratio 2
        "parallel_prefixes": (16, 48_000, 48_000, 24_000),
        # 2 alone + 2 during x 32, one long 3000
        "short_ttft": (10, 6_256, 6_256, 6_256),
        "decode": (4, 400, 400, 400),
        # turns 500, 610, 720 per session; later turns compute only output + new tokens (110)
        "multi_turn": (12, 7_320, 2_880, 2_880),
        # 2000 + 3 x 2100 sent, the prefix once + 3 suffixes computed
        "prefix_sharing_fanout": (8, 16_600, 4_600, 4_600),
        # 2 samples x (3 asks x 3000 + 2 churns x 15,000 in 3 prompts of 5000); re-asks after
        # 18,000 tokens of traffic: out of the GPU, on the ratio-2 host
        "quality": (18, 78_000, 78_000, 66_000),
    }
    for name, (requests, sent, computed, expected) in rows.items():
        w = work(on, name)
        assert (w.requests, w.sent_tokens, w.computed_tokens, w.expected_tokens) == (
            requests,
            sent,
            computed,
            expected,
        ), name
    assert on.sent_tokens == 198_576 and on.computed_tokens == 178_136 and on.expected_tokens == 138_136
    # OFF: no host tier (expected = upper bound), so no churn: /flush_cache before each re-ask
    # (and before the control pass) makes it a cold prefill at no cost; 2 samples x 3 asks x 3000
    # sent, all computed; the control pass: the asks again, its re-asks GPU hits (2 x 3 x 3000
    # sent, 2 x 3000 computed)
    q = work(off, "quality")
    assert (q.sent_tokens, q.computed_tokens, q.expected_tokens) == (36_000, 24_000, 24_000)
    assert q.requests == 12  # the asks only: nothing churned
    assert off.computed_tokens == off.expected_tokens == 124_136
    assert work(off, "parallel_prefixes").expected_tokens == 48_000
    # an expected host-memory refusal: no work, two starts (startup_retries 1, a transient cause)
    assert big.startup_attempts == 2 and big.work == () and big.sent_tokens == 0


def test_duration(small):
    run = estimate_run(small, prefill_tok_s=1000, decode_tok_s=100, startup_s=10)
    on, off, big = by_name(run)["on"], by_name(run)["off"], by_name(run)["big"]
    # decode steps after the first token: decode 1 batch x 2 repeats x 49, multi_turn 3 turns x
    # 2 repeats x 9, quality 6 asks x 7 (OFF: 12 asks with the control) -> 194 / 236 at 100 tok/s
    assert on.decode_s == pytest.approx(1.94) and off.decode_s == pytest.approx(2.36)
    # + one start (10 s), the idle window (2 s), the final liveness wait (1 s)
    assert on.seconds == pytest.approx(178.136 + 1.94 + 13)
    assert on.expected_seconds == pytest.approx(138.136 + 1.94 + 13)
    assert off.seconds == pytest.approx(124.136 + 2.36 + 13)
    assert big.seconds == pytest.approx(20)
    assert run.seconds == pytest.approx(on.seconds + off.seconds + 20)
    assert run.minutes == pytest.approx(run.seconds / 60)
    # without a decode speed or a start time those parts are not counted, and it says so
    bare = estimate_run(small, prefill_tok_s=1000)
    assert by_name(bare)["on"].seconds == pytest.approx(178.136 + 3)
    assert any("decode" in n for n in bare.notes) and any("start" in n for n in bare.notes)


def test_to_lines_is_a_table_with_the_limit(small):
    run = estimate_run(small, prefill_tok_s=1000, decode_tok_s=100, startup_s=10, limit_minutes=5)
    lines = run.to_lines()
    assert lines[0].startswith("estimate for est: prefill 1000 tok/s, decode 100 tok/s, 10 s per server start")
    assert "variant" in lines[1] and "prefill tokens" in lines[1] and "est. min" in lines[1]
    assert any(line.startswith("on ") and "198,576" in line and "20,001 (2x)" in line for line in lines)
    assert any(
        line.startswith("big ") and "startup_failed:host_memory" in line and "2 starts" in line for line in lines
    )
    assert any(line.startswith("total") for line in lines)
    assert run.over_limit and any("OVER the 5-minute limit" in line for line in lines)
    assert not estimate_run(small, prefill_tok_s=1000, limit_minutes=600).over_limit
    d = run.to_dict()
    assert d["sent_tokens"] == run.sent_tokens and d["variants"][1]["expected_tokens"] == 138_136


def _variant_text(hicache: str, workloads: str, extra_args: str = "") -> str:
    return f"""
name: w
server:
  backend: sim
  model_path: {MODELS / "llama-tiny"}
  args: {{--max-total-tokens: 10000{extra_args}}}
variants:
  - name: on
    hicache: {hicache}
workloads:
{workloads}
"""


def _warnings(tmp_path, hicache: str, workloads: str, **kw) -> list[str]:
    run = estimate_run(load(tmp_path, _variant_text(hicache, workloads)), prefill_tok_s=1000, **kw)
    return list(run.variants[0].all_warnings)


def test_working_set_inside_the_gpu_pool_expects_no_host_hits(tmp_path):
    ws = _warnings(tmp_path, "{ratio: 2}", "  - {kind: parallel_prefixes, k: 3, prompt_tokens: 3000}")
    assert ws == ["parallel_prefixes: working set 0.90x GPU pool: stays on the GPU, no host-tier hits expected"]
    # between the pools: no warning, and the expected time counts the second pass as host hits
    assert _warnings(tmp_path, "{ratio: 2}", "  - {kind: parallel_prefixes, k: 4, prompt_tokens: 3000}") == []


def test_working_set_beyond_the_host_pool(tmp_path):
    ws = _warnings(tmp_path, "{ratio: 1.5}", "  - {kind: parallel_prefixes, k: 4, prompt_tokens: 4000}")
    assert len(ws) == 1 and "1.60x GPU pool exceeds the host pool (1.50x)" in ws[0]


def test_ratio_one_has_no_room_for_host_only_pages(tmp_path):
    ws = _warnings(tmp_path, "{ratio: 1}", "  - {kind: parallel_prefixes, k: 4, prompt_tokens: 3000}")
    assert len(ws) == 1 and "host pool is only 1.00x" in ws[0] and "no room for host-only pages" in ws[0]


def test_quality_churn_outside_the_window_is_named(tmp_path):
    text = (
        _variant_text("{ratio: 1}", "  []").replace("variants:\n", "variants:\n  - name: off\n")
        + """
quality: {enabled: true, tasks: [needle], lengths: [3000], samples_per_task: 1, churn_tokens: 8000,
          reasks: 1, mode: token_ids, control: false}
"""
    )
    run = estimate_run(load(tmp_path, text), prefill_tok_s=1000)
    on = by_name(run)["on"]
    assert len(on.all_warnings) == 1 and on.all_warnings[0].startswith("quality: ")
    assert by_name(run)["off"].all_warnings == ()
    q = work(on, "quality")
    assert q.expected_tokens == q.computed_tokens  # nothing expected from the host tier


def test_prompt_longer_than_the_server_takes(tmp_path):
    # (a pool pinned by --max-total-tokens makes `validate` refuse it; a stated one is only known here)
    text = f"""
name: g
server: {{backend: sglang, model_path: {MODELS / "llama-tiny"}}}
variants: [{{name: on, hicache: {{ratio: 2}}}}]
workloads: [{{kind: cold_prefill, prompt_tokens: 12000, warmup: 0}}]
"""
    run = estimate_run(load(tmp_path, text), prefill_tok_s=1000, gpu_pool_tokens=10_000)
    assert run.variants[0].all_warnings == (
        "cold_prefill: a 12,000-token prompt exceeds what the server accepts "
        "(min(context, GPU pool) - 1 = 9,999): it will be refused",
    )


def test_hybrid_lengths_on_a_multiple_of_64(tmp_path):
    text = _variant_text(
        "{ratio: 2, mem_layout: page_first}", "  - {kind: parallel_prefixes, k: 4, prompt_tokens: 3072}"
    ).replace("llama-tiny", "qwen3next-tiny")
    ws = estimate_run(load(tmp_path, text), prefill_tok_s=1000).variants[0].all_warnings
    assert any("3,072 is a multiple of 64 on a hybrid model" in w for w in ws)


def test_host_memory_budget_against_the_declared_outcome(tmp_path):
    text = _variant_text("{size_gb: 100}", "  []").replace("model_path:", "sim: {mem_available_gib: 16}\n  model_path:")
    ws = estimate_run(load(tmp_path, text), prefill_tok_s=1000).variants[0].all_warnings
    assert any("declare expect: startup_failed, expect_cause: host_memory" in w for w in ws)


def test_pool_unknown_before_launch_is_said_not_guessed(tmp_path):
    text = f"""
name: g
server:
  backend: sglang
  model_path: {MODELS / "llama-tiny"}
  args: {{--mem-fraction-static: 0.5}}
variants:
  - name: on
    hicache: {{ratio: 2}}
workloads:
  - {{kind: parallel_prefixes, k: 4, prompt_tokens: "0.3x pool"}}
"""
    s = load(tmp_path, text)
    unknown = estimate_run(s, prefill_tok_s=1000).variants[0]
    assert unknown.pool.source == POOL_UNKNOWN and unknown.sent_tokens is None and unknown.seconds is None
    assert "GPU pool unknown before launch" in unknown.warnings[0]
    assert "?" in "\n".join(estimate_run(s, prefill_tok_s=1000).to_lines())
    stated = estimate_run(s, prefill_tok_s=1000, gpu_pool_tokens=10_000).variants[0]
    assert stated.pool.source == POOL_STATED and stated.sent_tokens == 24_000 and stated.pool.host_tokens == 20_001
    # a stated GPU memory and --mem-fraction-static give a prediction, labelled as one
    predicted = estimate_run(s, prefill_tok_s=1000, gpu_mem_gib=10).variants[0]
    assert predicted.pool.source == POOL_PREDICTED and predicted.pool.gpu_tokens > 100_000
    assert "predicted from config.json" in predicted.pool.note


def test_gpu_pool_prediction_refuses_what_the_config_cannot_tell():
    tiny = load_model_shape(MODELS / "llama-tiny")
    tokens, _ = gpu_pool.predict_gpu_pool_tokens(tiny, 1, 10, 0.5)
    weights = tiny.approx_params() * 2
    assert tokens == int((10 * 1024**3 * 0.5 - weights) // tiny.kv_bytes_per_token(1))
    # seed 000's 27B on a 12 GB GPU: the bf16 weights of the config alone do not fit (the real
    # checkpoint is quantized), so no number is made up
    gdn = load_model_shape(MODELS / "hybrid-gdn-27b")
    tokens, why = gpu_pool.predict_gpu_pool_tokens(gdn, 2, 12, 0.85, 0.375, 32)
    assert tokens is None and "exceed" in why
    assert gpu_pool.predict_gpu_pool_tokens(gdn, 2, 80, 0.85)[0] is None  # hybrid needs the mamba slots


def test_churn_chunks_without_the_planner():
    assert churn_chunks(15_000, 10_000) == [5000, 5000, 5000]
    assert churn_chunks(12_000, 10_000) == [5000, 5000, 5000]  # full chunks: 15,000 sent
    assert churn_chunks(4000, 10_000) == [4000] and churn_chunks(0, 10_000) == []


def test_speeds_from_the_scenario_block_and_required(small):
    class WithBlock:  # a scenario that has the proposed `estimate:` block
        def __init__(self, s):
            self._s = s
            self.estimate = type(
                "E",
                (),
                {
                    "prefill_tok_s": 1000,
                    "decode_tok_s": 100,
                    "startup_s": 10,
                    "gpu_pool_tokens": None,
                    "gpu_mem_gib": None,
                    "mem_available_gib": None,
                    "limit_minutes": 90,
                },
            )()

        def __getattr__(self, name):
            return getattr(self._s, name)

    run = estimate_run(WithBlock(small))
    assert run.seconds == pytest.approx(estimate_run(small, prefill_tok_s=1000, decode_tok_s=100, startup_s=10).seconds)
    assert run.limit_minutes == 90
    bare = estimate_run(small)  # no speed: tokens and warnings, no minutes
    assert bare.minutes is None and bare.sent_tokens == run.sent_tokens
    with pytest.raises(ValueError, match="prefill_tok_s"):
        estimate_run(small, prefill_tok_s=0)


# Seed 000 (docs: /work/shared/seeds/000_*.txt): cold prefill 1010 tok/s OFF and 964 ON at 75K,
# decode 51.5 / 50.7 tok/s, ~4 minutes per server start, a 32 GB host whose sglang rule left
# (MemAvailable - 10 GiB) / 2 = 3.17 GB per rank while the weights loaded (15.9 GiB).
SEED000 = dict(prefill_tok_s=964, decode_tok_s=50.7, startup_s=240, mem_available_gib=15.9, limit_minutes=90)


def test_nightly_scenario_fits_90_minutes_at_seed_000_speed():
    s = load_scenario(ROOT / "scenarios" / "wsl_tp2.yaml", {"MODEL_PATH": str(MODELS / "hybrid-gdn-27b")})
    run = estimate_run(s, **SEED000)
    assert run.minutes is not None and run.minutes <= 90, "\n".join(run.to_lines())
    assert not run.over_limit
    v = by_name(run)
    assert v["off"].pool.gpu_tokens == 105_000
    # the host-tier variant: its working set and its quality re-asks lie between the pools,
    # and its host pools fit the seed's budget (no warning of any kind)
    assert v["on-r1.3"].all_warnings == ()
    assert v["on-r1.3"].expected_tokens < v["on-r1.3"].computed_tokens
    assert v["on-r1.3"].pool.host_gb_per_rank < 3.17
    # ratio 2 is declared refused and the budget agrees (no "declared ... but it fits" warning)
    assert v["on-r2"].expect_cause == "host_memory" and v["on-r2"].all_warnings == ()
    # ratio 1 is told to have no room for host-only pages
    assert any("no room for host-only pages" in w or "no churn can" in w for w in v["on-r1"].all_warnings)


def test_sim_twin_matches_the_nightly_sizes():
    nightly = estimate_run(
        load_scenario(ROOT / "scenarios" / "wsl_tp2.yaml", {"MODEL_PATH": str(MODELS / "hybrid-gdn-27b")}), **SEED000
    )
    twin = estimate_run(load_scenario(ROOT / "scenarios" / "wsl_tp2_sim.yaml", {}), **SEED000)
    assert [v.name for v in twin.variants] == [v.name for v in nightly.variants]
    for a, b in zip(nightly.variants, twin.variants):
        assert (a.pool.gpu_tokens, a.pool.host_tokens, a.sent_tokens) == (
            b.pool.gpu_tokens,
            b.pool.host_tokens,
            b.sent_tokens,
        ), a.name


def test_sim_twin_carries_the_nightlys_gate():
    """The twin is where the nightly's gate is tried without a GPU: the same gate, thresholds,
    workloads (names, kinds, sizes) and quality sizing, or a change to one is never tried."""
    nightly = load_scenario(ROOT / "scenarios" / "wsl_tp2.yaml", {"MODEL_PATH": str(MODELS / "hybrid-gdn-27b")})
    twin = load_scenario(ROOT / "scenarios" / "wsl_tp2_sim.yaml", {})
    assert [g.text for g in twin.gate] == [g.text for g in nightly.gate]
    assert {
        "cold_8k.cold.prefill_tok_s",
        "on-r1.3: host_reuse.repeat_after_evict.ttft_ms",
        "on-r1.3: quality.parity",
    } <= {g.text for g in nightly.gate}
    assert twin.expectations.thresholds == nightly.expectations.thresholds
    assert twin.expectations.checks == nightly.expectations.checks
    assert [w.model_dump(exclude={"kind"}) for w in twin.workloads] == [
        w.model_dump(exclude={"kind"}) for w in nightly.workloads
    ]
    same = ("tasks", "lengths", "samples_per_task", "max_new_tokens", "reasks", "control", "churn_tokens")
    assert {k: getattr(twin.quality, k) for k in same} == {k: getattr(nightly.quality, k) for k in same}

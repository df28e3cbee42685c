"""The log parser reads real sglang 0.5.17 logs (captured on an H200 by the harness, see
docs/gpu.md) and the simulator's logs alike: same causes, same pool sizes."""

from pathlib import Path

import pytest

from harness.server import logscan
from harness.sim.testing import SimProcess, run_sim

LOGS = Path(__file__).parents[2] / "fixtures" / "sglang_logs"


def real(name: str) -> str:
    return (LOGS / name).read_text()


def test_real_ready_log_pools_and_no_cause():
    text = real("0.5.17_llama_ready_hicache.log")
    assert logscan.is_ready_line_present(text)
    assert logscan.classify_failure(text) is None
    pools = logscan.parse_pools(text)
    assert (pools.max_total_num_tokens, pools.host_pool_tokens, pools.host_pool_gb) == (20480, 40961, 0.67)


def test_real_host_memory_refusal():
    found = logscan.classify_failure(real("0.5.17_host_memory_refusal.log"))
    assert found.cause == logscan.HOST_MEMORY
    assert found.detail == {"requested_gb": 4000.0, "free_gb": 117.85}


def test_real_hybrid_layer_first_assertion():
    text = real("0.5.17_hybrid_layer_first_assert.log")
    found = logscan.classify_failure(text)
    assert found.cause == logscan.ASSERTION
    assert found.detail["message"] == "Unsupported layout: layer_first"
    # the KV host pool was allocated before the mamba pool refused the layout (seed 000's order)
    assert logscan.parse_pools(text).host_pool_tokens == 40961


def test_real_hybrid_tp2_pools_kv_and_mamba():
    pools = logscan.parse_pools(real("0.5.17_hybrid_tp2_ready_hicache.log"))
    assert pools.max_total_num_tokens == 20480
    assert {p.kind: p.gb for p in pools.host_pools} == {"kv": 0.04, "mamba": 32.02}


def test_real_unknown_error_is_named_not_guessed():
    found = logscan.classify_failure(real("0.5.17_config_attribute_error.log"))
    assert found.cause == logscan.UNKNOWN
    assert found.detail["error"] == "AttributeError"
    assert "full_attention_interval" in found.detail["message"]


@pytest.mark.parametrize(
    "extra, model, cause",
    [
        (["--enable-hierarchical-cache", "--hicache-size", "100000"], "llama-tiny", logscan.HOST_MEMORY),
        (["--enable-hierarchical-cache", "--hicache-mem-layout", "layer_first"], "qwen3next-tiny", logscan.ASSERTION),
        (["--sim-fault", "cuda_fault_at_startup"], "llama-tiny", logscan.CUDA_FAULT),
    ],
)
def test_simulator_failures_read_like_real_ones(extra, model, cause):
    proc = run_sim(extra, model=model)
    assert proc.returncode != 0
    found = logscan.classify_failure(proc.stdout)
    assert found.cause == cause
    if cause == logscan.ASSERTION:
        assert found.detail["message"] == "Unsupported layout: layer_first"  # the real message
    if cause == logscan.HOST_MEMORY:
        assert found.detail["requested_gb"] > found.detail["free_gb"]


def test_simulator_pool_lines_parse_like_real_ones():
    with SimProcess(["--enable-hierarchical-cache", "--hicache-ratio", "2", "--max-total-tokens", "20480"]) as sim:
        text = sim.output()
    assert logscan.is_ready_line_present(text)
    pools = logscan.parse_pools(text)
    assert (pools.max_total_num_tokens, pools.host_pool_tokens, pools.host_pool_gb) == (20480, 40961, 0.67)

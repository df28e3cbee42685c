"""The log parser on the seeds' own lines: seed 000's pools and refusal (mamba slots "33/65"),
seed 002's failed cudaHostRegister ("invalid argument", rollback), seed 004's mamba host pool
logged in GB only (42 vs 129 slots), and how long each host pool took to set up."""

from pathlib import Path

import pytest

from harness.core.model_config import load_model_shape
from harness.server import logscan

ROOT = Path(__file__).resolve().parents[3]
MODELS = ROOT / "scenarios" / "models"
LOGS = Path(__file__).parents[2] / "fixtures" / "sglang_logs"

# seed 000 (its fork of 0.5.19, TP2, ratio 2): "KV succeeded on both ranks, then mamba failed"
SEED_000_REFUSAL = """\
hierarchical KV host pool: 420001 tokens, 2.58 GB
Not enough host memory available. Requesting 2.55 GB but only have 0.59 GB free
"""
# seed 000's pre-launch check of the mamba backup kernel's inputs, as its log printed them
SEED_000_SLOTS = """\
num_layers=48 item_size=786432B
device[shape=(33, 24, 128, 128) slots=33]
host[shape=(65, 48, 1, 24, 128, 128) slots=65 stride0=37748736B]
src_idx=[6,6] dst_idx=[0,0] n=1
"""
# seed 002: sglang PR #36798's message (its f-string) with CUDA's text for rc=1 (cudaErrorInvalidValue)
SEED_002_CHUNKED = """\
[2026-09-01 10:00:00 TP0] Allocating kv hierarchical KV host pool: 80000001 tokens, 614.40 GB host memory.
Traceback (most recent call last):
  File "/sgl/python/sglang/srt/mem_cache/pool_host/common.py", line 171, in _cuda_host_register
    raise RuntimeError(
RuntimeError: cudaHostRegister failed (rc=1, invalid argument) at offset=549755813888 size=64644192256 \
(total=614400006144, chunk_limit=274877906944); host buffer is not pinned and device transfers may \
silently return stale data.
"""
# sglang 0.5.17's unchunked form (pool_host/common.py)
REGISTER_0517 = (
    "RuntimeError: cudaHostRegister failed (rc=1, invalid argument) for ptr=0x7f3a40000000 "
    "size=671088640; host buffer is not pinned and device transfers may silently return stale data.\n"
)
# seed 000: the message itself raised, hiding the real failure
SEED_000_BROKEN_MESSAGE = """\
  File ".../pool_host/common.py", line 126, in _cuda_host_register
    f"{cudart.cudaGetErrorString(rc)}) ..."
TypeError: cudaGetErrorString(): incompatible function arguments. The following argument types are supported:
"""


def _bps(model: str, tp: int) -> int:
    return load_model_shape(MODELS / model).mamba_bytes_per_slot(tp)


def test_seed_000_refused_mamba_pool_is_65_slots():
    found = logscan.classify_failure(SEED_000_REFUSAL)
    assert found.cause == logscan.HOST_MEMORY
    pools = logscan.parse_pools(SEED_000_REFUSAL, mamba_bytes_per_slot=_bps("hybrid-gdn-27b", 2))
    assert pools.host_pool_tokens == 420001
    assert (pools.refused.kind, pools.refused.tokens, pools.refused.gb) == ("mamba", 65, 2.55)
    assert pools.to_json()["refused_pool"]["source"] == "derived"


def test_seed_000_fork_says_33_device_and_65_host_slots():
    pools = logscan.parse_pools(SEED_000_SLOTS).to_json()
    assert (pools["mamba_device_slots"], pools["mamba_host_slots"]) == (33, 65)
    assert pools["host_pool_gb"] is None  # the slots line has no GB


@pytest.mark.parametrize("gb, slots", [("2.16", 42), ("6.64", 129)])
def test_seed_004_mamba_slots_derived_from_the_gb_line(gb, slots):
    line = (
        f"[2026-09-20 08:00:01 TP0] Allocating {gb} GB host memory for hierarchical Mamba cache (layout=page_first).\n"
    )
    pools = logscan.parse_pools(line, mamba_bytes_per_slot=_bps("qwen3.5-4b-shape", 1))
    assert (pools.mamba_host_slots, pools.host_pools[0].source) == (slots, "derived")
    assert logscan.parse_pools(line).mamba_host_slots is None  # without the model: GB only, never a guess


def test_slots_not_derived_when_the_rounding_allows_two_answers():
    assert logscan.derive_slots(32.02, 1_000_000) is None  # 32,015..32,025 slots
    assert logscan.derive_slots(2.55, 39_223_296) == 65


def test_newer_boot_line_says_the_slots():
    text = (
        "[2026-09-14 10:00:00 TP0] Allocating 11.07 GB host memory for hierarchical Mamba cache (layout=page_first).\n"
        "[2026-09-14 10:00:02 TP0] HiCache host split (proportional, --hicache-size 32 GB): KV 20.93 GB, mamba "
        "11.07 GB; host mamba slots 565 cover 2220032 tokens at one checkpoint per 4096-token chunk; KV host "
        "tier 2680896 tokens (coverage 82%)\n"
    )
    pools = logscan.parse_pools(text, mamba_bytes_per_slot=19_640_320)
    assert (pools.mamba_host_slots, pools.host_pools[0].source) == (565, "log")


def test_seed_002_invalid_argument_is_a_registration_failure_with_its_rollback():
    found = logscan.classify_failure(SEED_002_CHUNKED)
    assert found.cause == logscan.HOST_REGISTER
    assert found.detail["rc"] == 1 and found.detail["error"] == "invalid argument"
    assert found.detail["chunk_limit"] == 256 * 1024**3
    assert found.detail["chunks_rolled_back"] == 2  # the chunks before offset 512 GiB were unregistered
    assert logscan.HOST_REGISTER not in logscan.TRANSIENT_CAUSES


def test_0517_registration_failure_and_the_broken_message():
    found = logscan.classify_failure(REGISTER_0517)
    assert (found.cause, found.detail["error"], found.detail["size"]) == (
        logscan.HOST_REGISTER,
        "invalid argument",
        671088640,
    )
    assert "chunks_rolled_back" not in found.detail
    broken = logscan.classify_failure(SEED_000_BROKEN_MESSAGE)
    assert broken.cause == logscan.HOST_REGISTER and broken.detail["message_broken"]


def test_pool_setup_seconds_from_the_real_0517_log():
    """Allocation line to the same rank's next line: KV 16 s, the 32 GB mamba pool 28 s (touch and
    cudaHostRegister happen between them; 1 s resolution)."""
    text = (LOGS / "0.5.17_hybrid_tp2_ready_hicache.log").read_text()
    pools = {p.kind: p for p in logscan.parse_pools(text).host_pools}
    assert (pools["kv"].setup_s, pools["mamba"].setup_s) == (16.0, 28.0)
    assert logscan.parse_pools(text).mamba_device_slots == 9945

"""The preflight on the seeds' cases: MLA models sized from the latent (not as MHA, ~7x too big),
the host-size split of a hybrid model (sglang 0.5.17's proportional split, each-pool, and
--hicache-mamba-size-gb), and the GPU pool predicted before launch when sglang sizes it itself."""

from __future__ import annotations

import json

import pytest

from harness.core.model_config import load_model_shape, shape_from_dict
from harness.run.gpu_pool import default_mem_fraction_static
from harness.run.hostpool import host_size_split, predict_host_pool, preflight_line, preflight_variant
from tests.unit.run.scenario_objects import MODELS, scenario, variant


def test_mla_kv_bytes_are_the_latent_on_every_rank():
    shape = load_model_shape(MODELS / "deepseek-v2-lite")
    assert shape.is_mla and not shape.is_hybrid
    # (kv_lora_rank 512 + qk_rope_head_dim 64) x 27 layers x 2 B, the same on each TP rank
    assert shape.kv_bytes_per_token(1) == shape.kv_bytes_per_token(2) == 31_104
    raw = json.loads((MODELS / "deepseek-v2-lite" / "config.json").read_text())
    as_mha = shape_from_dict({k: v for k, v in raw.items() if k != "kv_lora_rank"})
    assert as_mha.kv_bytes_per_token(1) / shape.kv_bytes_per_token(1) == pytest.approx(7.11, abs=0.01)
    p = predict_host_pool(shape, {"ratio": 2}, 100_000, 2)
    assert p.kv_host_bytes == 200_001 * 31_104  # ~6.2 GB per rank, where the MHA formula said ~22 GB
    assert shape.kv_bytes_per_token(1, 1) == 15_552  # fp8 KV halves it


def _scn(backend="sglang", split="auto", sim_split="each", gpu_mem_gib=None, model="llama3-8b", args=None):
    sim = {"host_split": sim_split} if backend == "sim" else None
    return scenario(backend, model, args=args, sim=sim, host_size_split=split, gpu_mem_gib=gpu_mem_gib)


def test_host_size_split_auto_follows_the_server():
    assert host_size_split(_scn()) == "proportional"  # sglang 0.5.17's _split_hicache_size
    assert host_size_split(_scn(backend="sim")) == "each"
    assert host_size_split(_scn(backend="sim", sim_split="proportional")) == "proportional"
    assert host_size_split(_scn(split="each")) == "each"


def test_seed_004_split_native_129_slots_and_explicit_mamba_size():
    shape = load_model_shape(MODELS / "qwen3.5-4b-shape")
    prop = predict_host_pool(shape, {"size_gb": 14}, 176_256, 1, mamba_device_slots=100, size_split="proportional")
    assert prop.mamba_host_slots == 129 and f"{prop.kv_host_bytes / 1e9:.2f}" == "7.40"
    each = predict_host_pool(shape, {"size_gb": 14}, 176_256, 1, mamba_device_slots=100, size_split="each")
    assert each.mamba_host_slots == int(14e9 // shape.mamba_bytes_per_slot(1)) + 1
    # --hicache-mamba-size-gb 6 (sglang PR #39436): mamba 6 GB, KV the other 8
    explicit = predict_host_pool(shape, {"size_gb": 14}, None, 1, mamba_size_gb=6, size_split="proportional")
    assert explicit.known and explicit.size_split == "explicit"
    assert explicit.mamba_host_slots == int(6e9 // shape.mamba_bytes_per_slot(1)) + 1
    sc = _scn(model="qwen3.5-4b-shape", args={"--hicache-mamba-size-gb": 6, "--max-total-tokens": 176_256})
    rec = preflight_variant(sc, variant(sc, "v", {"size_gb": 14}), mem_available_kib=64 << 20)
    assert rec["prediction"]["mamba_host_slots"] == explicit.mamba_host_slots


def test_gpu_pool_predicted_before_launch_when_sglang_sizes_it():
    # reserve 512 MB + 8192 tokens x 1.5 MB + 1/8 GB = 12,928 MB (over the 10 GB floor)
    assert default_mem_fraction_static(141.0) == pytest.approx((141 * 1024 - 12_928) / (141 * 1024), abs=1e-3)
    assert default_mem_fraction_static(141.0, chunked_prefill_size=2048) == pytest.approx(0.929, abs=1e-3)
    sc = _scn(gpu_mem_gib=141.0)
    v = variant(sc, "on-r2", {"ratio": 2})
    rec = preflight_variant(sc, v, mem_available_kib=2000 << 20)
    pool = rec["device_pool"]
    assert pool["source"] == "predicted" and pool["gpu_mem_source"] == "preflight.gpu_mem_gib"
    # (141 GiB x 0.91 - ~16 GB of Llama-3-8B weights) / 131,072 B per token
    assert 900_000 < pool["tokens"] < 960_000
    assert rec["prediction"]["kv_host_tokens"] == 2 * pool["tokens"] + 1 and rec["fits"] is True
    line = preflight_line("on-r2", rec)
    assert line.startswith("preflight: on-r2: GPU pool ~") and "fits" in line
    # given --mem-fraction-static wins over the default rule
    rec2 = preflight_variant(sc, variant(sc, "v", {"ratio": 2}, {"--mem-fraction-static": 0.5}))
    assert rec2["device_pool"]["mem_fraction_static"] == 0.5 and rec2["device_pool"]["tokens"] < pool["tokens"]
    # a pool the args fix is not predicted and not printed
    fixed = preflight_variant(sc, variant(sc, "f", {"ratio": 2}, {"--max-total-tokens": 20480}))
    assert fixed["device_pool"]["source"] == "--max-total-tokens" and preflight_line("f", fixed) is None

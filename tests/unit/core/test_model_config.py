"""ModelShape from config.json: layer split and per-rank pool sizes against real logged numbers."""

import json
from pathlib import Path

import pytest

from harness.core.model_config import ModelConfigError, load_model_shape, shape_from_dict

MODELS = Path(__file__).resolve().parents[3] / "scenarios" / "models"


def test_llama_tiny_matches_sglang_0517_host_pool_line():
    s = load_model_shape(MODELS / "llama-tiny")
    assert not s.is_hybrid and s.num_full_attention_layers == 8
    assert s.kv_bytes_per_token(1) == 16384
    # "Allocating kv hierarchical KV host pool: 40961 tokens, 0.67 GB host memory."
    assert f"{40961 * s.kv_bytes_per_token(1) / 1e9:.2f}" == "0.67"


def test_hybrid_27b_matches_seed_000():
    s = load_model_shape(MODELS / "hybrid-gdn-27b")
    assert s.is_hybrid
    assert (s.num_full_attention_layers, s.num_mamba_layers) == (16, 48)
    assert s.full_attention_layers[:2] == (3, 7)
    assert s.mamba_temporal_bytes_per_slot(2) == 37_748_736  # host stride0 in seed 000
    # 65 host slots -> "Requesting 2.55 GB" for the mamba pool
    assert f"{65 * s.mamba_bytes_per_slot(2) / 1e9:.2f}" == "2.55"
    # int2 KV (0.375 B/elem): "hierarchical KV host pool: 420001 tokens, 2.58 GB"
    assert f"{420001 * s.kv_bytes_per_token(2, 0.375) / 1e9:.2f}" == "2.58"


def test_qwen3next_tiny_interval_split():
    s = load_model_shape(MODELS / "qwen3next-tiny")
    assert s.full_attention_layers == (3, 7)
    assert len(s.mamba_layers) == 6
    assert s.kv_bytes_per_token(1) == 2 * 2 * 2 * 128 * 2


def test_layer_types_list_and_tp_replication():
    cfg = {
        "num_hidden_layers": 4,
        "hidden_size": 64,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 16,
        "torch_dtype": "float16",
        "layer_types": ["linear_attention", "full_attention", "linear_attention", "full_attention"],
        "linear_num_key_heads": 2,
        "linear_num_value_heads": 4,
        "linear_key_head_dim": 8,
        "linear_value_head_dim": 8,
        "linear_conv_kernel_dim": 4,
    }
    s = shape_from_dict(cfg)
    assert s.full_attention_layers == (1, 3) and s.mamba_layers == (0, 2)
    # tp 4 > 2 kv heads: heads are replicated, one per rank
    assert s.kv_bytes_per_token(4) == 2 * 1 * 16 * 2 * 2
    assert s.kv_bytes_per_token(1, kv_dtype_bytes=1) == 2 * 2 * 16 * 1 * 2


def test_errors_are_model_config_errors(tmp_path):
    with pytest.raises(ModelConfigError):
        load_model_shape(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"hidden_size": 8}))
    with pytest.raises(ModelConfigError):
        load_model_shape(tmp_path)
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(ModelConfigError):
        load_model_shape(tmp_path)


def test_ssm_state_is_float32_unless_the_config_says_so():
    """sglang 0.5.17 (mamba2_state_dtype): its real log of qwen3next-tiny at TP2, ratio 2 of 9,945
    slots, is "Allocating 32.02 GB host memory for hierarchical Mamba cache" = 19,891 x 1,609,728 B."""
    s = load_model_shape(MODELS / "qwen3next-tiny")
    assert s.mamba_bytes_per_slot(2) == 1_609_728
    assert f"{19_891 * s.mamba_bytes_per_slot(2) / 1e9:.2f}" == "32.02"
    bf16 = shape_from_dict({**s.raw, "mamba_ssm_dtype": "bfloat16"})
    assert bf16.mamba_temporal_bytes_per_slot(2) * 2 == s.mamba_temporal_bytes_per_slot(2)


def test_a_config_that_is_a_device_a_fifo_or_huge_is_refused_naming_it(tmp_path):
    """config.json -> /dev/zero grew the harness to 23.6 GB until the kernel killed it (and hung
    validate); a FIFO would block; a 5 MB one is no model config."""
    import os

    from harness.core.model_config import model_vocab_size

    cfg = tmp_path / "config.json"
    cfg.symlink_to("/dev/zero")
    with pytest.raises(ModelConfigError, match=r"config.json: not a regular file"):
        load_model_shape(tmp_path)
    assert model_vocab_size(tmp_path) == 32000  # the default, at once
    cfg.unlink()
    os.mkfifo(cfg)
    with pytest.raises(ModelConfigError, match=r"config.json: not a regular file"):
        load_model_shape(tmp_path)
    cfg.unlink()
    cfg.write_text(json.dumps({"hidden_size": 8, "pad": "x" * (5 << 20)}))
    with pytest.raises(ModelConfigError, match=r"config.json: larger than 4,194,304 bytes"):
        load_model_shape(tmp_path)


@pytest.mark.parametrize("key", ["num_hidden_layers", "hidden_size", "num_attention_heads"])
def test_an_absurd_model_shape_is_refused_naming_the_key(key):
    """A huge layer count crashed validate (its pools and prompts sized from it)."""
    cfg = {"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4, key: 10**12}
    with pytest.raises(ModelConfigError, match=rf"{key} = 1,000,000,000,000: no model has more than"):
        shape_from_dict(cfg)

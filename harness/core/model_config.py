"""Model ``config.json`` -> :class:`ModelShape`: the sizes HiCache pools are made of.

One job: say, from a Hugging Face style config alone (no weights, no torch), how many layers
keep a KV cache (full attention) and how many keep a recurrent state (mamba / GDN / linear
attention), and from that the bytes one token costs in a KV pool and the bytes one request
slot costs in a mamba pool, per tensor-parallel rank.  The simulated server sizes its pools
with it and the preflight predicts the real server's host-pool request with the same numbers,
so the two can never disagree.

Checked against the real numbers we have:
- llama-tiny (8 layers, 8 KV heads x 64, bf16): 16,384 B/token; sglang 0.5.17 logged
  ``40961 tokens, 0.67 GB`` for ratio 2 of a 20480-token device pool.
- seed 000's 27B hybrid GDN model at TP2: 48 mamba layers with a (24, 128, 128) temporal
  state per rank -> 37,748,736 B temporal stride per slot; plus the conv state
  (5120 x 3 per layer per rank) 39,223,296 B per slot, which is exactly the
  ``Requesting 2.55 GB`` of its 65-slot mamba host pool.
- The recurrent (SSM) state is float32 unless the config's ``mamba_ssm_dtype`` says otherwise, as
  sglang decides it: the real 0.5.17 log of qwen3next-tiny at TP2 allocates 32.02 GB for 19,891
  host slots = 1,609,728 B each (fp32 state 1,572,864 + bf16 conv 36,864); seed 000's model state
  is bf16 (its logged stride), which its config (hybrid-gdn-27b) states.
- MLA models (DeepSeek-V2/V3: ``kv_lora_rank`` in the config) keep one compressed latent per
  token and layer, ``kv_lora_rank + qk_rope_head_dim`` elements, the same on every TP rank
  (sglang's ``MLATokenToKVPool``: ``kv_cache_dim = kv_lora_rank + qk_rope_head_dim``), not
  K and V per KV head: DeepSeek-V2-Lite is (512 + 64) x 27 x 2 B = 31,104 B/token, where the
  MHA formula said 221,184 (7.1x too big).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.core.bounds import MAX_HIDDEN, MAX_LAYERS, MODEL_CONFIG_BYTES, TooLarge, read_bytes_bounded
from harness.core.errors import BadInput

# torch dtype name -> bytes per element.  Fractional entries are packed formats.
DTYPE_BYTES: dict[str, float] = {
    "float32": 4,
    "fp32": 4,
    "float": 4,
    "bfloat16": 2,
    "bf16": 2,
    "float16": 2,
    "fp16": 2,
    "half": 2,
    "float8_e4m3fn": 1,
    "float8_e5m2": 1,
    "fp8_e4m3": 1,
    "fp8_e5m2": 1,
    "int8": 1,
    "fp4_e2m1": 0.5,
}

# sglang ``--kv-cache-dtype`` value -> bytes per KV element ("auto" = model dtype).
# int2 is seed 000's fork: 2-bit codes plus fp32 scale/zero per 64 elements = 0.375 B.
KV_CACHE_DTYPE_BYTES: dict[str, float | None] = {
    "auto": None,
    "bf16": 2,
    "bfloat16": 2,
    "float16": 2,
    "fp16": 2,
    "fp8_e4m3": 1,
    "fp8_e5m2": 1,
    "int8": 1,
    "fp4_e2m1": 0.5,
    "int4": 0.5,
    "int2": 0.375,
}

_MAMBA_LAYER_TYPES = {"linear_attention", "mamba", "mamba2", "gdn", "linear"}
_FULL_LAYER_TYPES = {"full_attention", "attention", "full"}


class ModelConfigError(BadInput, ValueError):
    """config.json is missing, unreadable or lacks a field the shape needs."""


@dataclass(frozen=True)
class ModelShape:
    """The cache-relevant shape of a model (whole model; per-rank numbers via methods)."""

    model_type: str
    architectures: tuple[str, ...]
    num_layers: int
    full_attention_layers: tuple[int, ...]
    mamba_layers: tuple[int, ...]
    num_attention_heads: int
    num_kv_heads: int
    head_dim: int
    hidden_size: int
    intermediate_size: int
    vocab_size: int
    dtype_bytes: float
    max_position_embeddings: int
    eos_token_ids: tuple[int, ...] = ()
    # linear-attention (GDN / mamba) geometry; zeros for dense models
    linear_num_key_heads: int = 0
    linear_num_value_heads: int = 0
    linear_key_head_dim: int = 0
    linear_value_head_dim: int = 0
    linear_conv_kernel_dim: int = 0
    ssm_dtype_bytes: float = 2
    # MLA (multi-head latent attention) geometry; zeros for MHA/GQA models
    kv_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    raw: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def is_hybrid(self) -> bool:
        """True when some layers keep a recurrent (mamba) state instead of a KV cache."""
        return len(self.mamba_layers) > 0

    @property
    def is_mla(self) -> bool:
        """True when the KV cache holds one MLA latent per token and layer (DeepSeek-V2/V3)."""
        return self.kv_lora_rank > 0

    @property
    def num_full_attention_layers(self) -> int:
        return len(self.full_attention_layers)

    @property
    def num_mamba_layers(self) -> int:
        return len(self.mamba_layers)

    def kv_heads_per_rank(self, tp_size: int) -> int:
        # sglang replicates KV heads when tp_size > num_kv_heads, so never below 1.
        return max(1, self.num_kv_heads // max(1, tp_size))

    def kv_bytes_per_token(self, tp_size: int = 1, kv_dtype_bytes: float | None = None) -> int:
        """K+V bytes of one token over all full-attention layers on one TP rank (MLA: the latent,
        ``kv_lora_rank + qk_rope_head_dim`` elements per layer, replicated on every rank)."""
        elem = self.dtype_bytes if kv_dtype_bytes is None else kv_dtype_bytes
        if self.is_mla:
            return int(round((self.kv_lora_rank + self.qk_rope_head_dim) * elem * self.num_full_attention_layers))
        per_layer = 2 * self.kv_heads_per_rank(tp_size) * self.head_dim * elem
        return int(round(per_layer * self.num_full_attention_layers))

    def mamba_temporal_bytes_per_slot(self, tp_size: int = 1) -> int:
        """Recurrent (SSM) state bytes of one request slot over all mamba layers, one rank."""
        if not self.is_hybrid:
            return 0
        v_heads = max(1, self.linear_num_value_heads // max(1, tp_size))
        per_layer = v_heads * self.linear_key_head_dim * self.linear_value_head_dim
        return int(round(per_layer * self.ssm_dtype_bytes * self.num_mamba_layers))

    def mamba_conv_bytes_per_slot(self, tp_size: int = 1) -> int:
        """Short-convolution state bytes of one slot (conv_dim x (kernel-1)) per rank."""
        if not self.is_hybrid or self.linear_conv_kernel_dim <= 1:
            return 0
        conv_dim = (
            2 * self.linear_num_key_heads * self.linear_key_head_dim
            + self.linear_num_value_heads * self.linear_value_head_dim
        )
        per_rank = conv_dim // max(1, tp_size)
        per_layer = per_rank * (self.linear_conv_kernel_dim - 1) * self.dtype_bytes
        return int(round(per_layer * self.num_mamba_layers))

    def mamba_bytes_per_slot(self, tp_size: int = 1) -> int:
        """Conv + temporal state of one request slot over all mamba layers, per rank."""
        return self.mamba_temporal_bytes_per_slot(tp_size) + self.mamba_conv_bytes_per_slot(tp_size)

    def approx_params(self) -> int:
        """Rough parameter count (embeddings + per-layer attention/MLP); feeds cost models only."""
        h = self.hidden_size
        attn = (
            h * (self.num_attention_heads + 2 * self.num_kv_heads) * self.head_dim
            + self.num_attention_heads * self.head_dim * h
        )
        mlp = 3 * h * self.intermediate_size
        experts = int(self.raw.get("n_routed_experts") or 0) + int(self.raw.get("n_shared_experts") or 0)
        moe_size = int(self.raw.get("moe_intermediate_size") or 0)
        if experts and moe_size:  # DeepSeek-style MoE: the first k layers dense, the rest experts
            dense = min(self.num_layers, int(self.raw.get("first_k_dense_replace") or 0))
            return int(
                2 * self.vocab_size * h
                + self.num_layers * attn
                + dense * mlp
                + (self.num_layers - dense) * 3 * h * moe_size * experts
            )
        return int(2 * self.vocab_size * h + self.num_layers * (attn + mlp))


def _layer_split(cfg: dict[str, Any], n: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(full-attention layer ids, mamba layer ids) from whichever convention the config uses."""
    types = cfg.get("layer_types")
    if isinstance(types, list) and len(types) == n:
        full = tuple(i for i, t in enumerate(types) if str(t).lower() in _FULL_LAYER_TYPES)
        mamba = tuple(i for i, t in enumerate(types) if str(t).lower() in _MAMBA_LAYER_TYPES)
        # sliding-window and other attention kinds still hold KV: count them as full
        rest = tuple(i for i in range(n) if i not in full and i not in mamba)
        return tuple(sorted(full + rest)), mamba
    interval = cfg.get("full_attention_interval")
    if isinstance(interval, int) and interval > 0:
        # qwen3_next: layer i is full attention when (i + 1) % interval == 0
        full = tuple(i for i in range(n) if (i + 1) % interval == 0)
        return full, tuple(i for i in range(n) if (i + 1) % interval != 0)
    return tuple(range(n)), ()


def _dtype_bytes(name: Any, default: float = 2) -> float:
    if name is None:
        return default
    key = str(name).replace("torch.", "").lower()
    if key not in DTYPE_BYTES:
        raise ModelConfigError(f"unknown dtype {name!r}")
    return DTYPE_BYTES[key]


def shape_from_dict(cfg: dict[str, Any]) -> ModelShape:
    """Build a ModelShape from an already-parsed config.json mapping."""
    if isinstance(cfg.get("text_config"), dict):
        # multimodal wrappers (qwen3_5, llava...) keep the language model one level down
        cfg = {**cfg, **cfg["text_config"]}
    try:
        n = int(cfg["num_hidden_layers"])
        hidden = int(cfg["hidden_size"])
        n_heads = int(cfg["num_attention_heads"])
    except (KeyError, TypeError, ValueError) as exc:
        raise ModelConfigError(f"config.json lacks a usable {exc}") from exc
    for key, value, most in (
        ("num_hidden_layers", n, MAX_LAYERS),
        ("hidden_size", hidden, MAX_HIDDEN),
        ("num_attention_heads", n_heads, MAX_HIDDEN),
    ):
        if value < 1:
            raise ModelConfigError(f"config.json has {key} = {value}: must be >= 1")
        if value > most:
            raise ModelConfigError(f"config.json has {key} = {value:,}: no model has more than {most:,}")
    n_kv = int(cfg.get("num_key_value_heads") or n_heads)
    head_dim = int(cfg.get("head_dim") or hidden // n_heads)
    full, mamba = _layer_split(cfg, n)
    dtype_b = _dtype_bytes(cfg.get("torch_dtype") or cfg.get("dtype"))
    eos = cfg.get("eos_token_id")
    eos_ids = tuple(eos) if isinstance(eos, list) else ((int(eos),) if eos is not None else ())
    return ModelShape(
        model_type=str(cfg.get("model_type", "unknown")),
        architectures=tuple(cfg.get("architectures") or ()),
        num_layers=n,
        full_attention_layers=full,
        mamba_layers=mamba,
        num_attention_heads=n_heads,
        num_kv_heads=n_kv,
        head_dim=head_dim,
        hidden_size=hidden,
        intermediate_size=int(cfg.get("intermediate_size") or 4 * hidden),
        vocab_size=int(cfg.get("vocab_size") or 32000),
        dtype_bytes=dtype_b,
        max_position_embeddings=int(cfg.get("max_position_embeddings") or 4096),
        eos_token_ids=eos_ids,
        linear_num_key_heads=int(cfg.get("linear_num_key_heads") or 0),
        linear_num_value_heads=int(cfg.get("linear_num_value_heads") or 0),
        linear_key_head_dim=int(cfg.get("linear_key_head_dim") or 0),
        linear_value_head_dim=int(cfg.get("linear_value_head_dim") or 0),
        linear_conv_kernel_dim=int(cfg.get("linear_conv_kernel_dim") or 0),
        # sglang (configs/mamba_utils.py mamba2_state_dtype): float32 unless the config says otherwise
        ssm_dtype_bytes=_dtype_bytes(cfg.get("mamba_ssm_dtype"), default=4),
        kv_lora_rank=int(cfg.get("kv_lora_rank") or 0),
        qk_rope_head_dim=int(cfg.get("qk_rope_head_dim") or 0) if cfg.get("kv_lora_rank") else 0,
        raw=dict(cfg),
    )


def load_model_shape(model_dir: str | Path) -> ModelShape:
    """Read ``<model_dir>/config.json`` (or a config.json path) into a ModelShape."""
    path = Path(model_dir)
    if path.is_dir():
        path = path / "config.json"
    try:
        cfg = json.loads(read_bytes_bounded(path, MODEL_CONFIG_BYTES, "model config.json").decode("utf-8"))
    except FileNotFoundError as exc:
        raise ModelConfigError(f"{path}: no such file") from exc
    except TooLarge as exc:
        raise ModelConfigError(str(exc)) from None
    except RecursionError:
        raise ModelConfigError(f"{path}: nested too deep to read") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ModelConfigError(f"{path}: {exc}") from exc
    if not isinstance(cfg, dict):
        raise ModelConfigError(f"{path}: not a JSON object")
    return shape_from_dict(cfg)


def model_vocab_size(model_path: str | Path | None, default: int = 32000) -> int:
    """``vocab_size`` from a model's config.json (also under ``text_config``), or ``default`` when
    the config cannot be read: token-id prompts draw their ids below it."""
    try:
        raw = read_bytes_bounded(Path(model_path) / "config.json", MODEL_CONFIG_BYTES)  # type: ignore[arg-type]
        cfg = json.loads(raw.decode("utf-8"))
        v = cfg.get("vocab_size") or (cfg.get("text_config") or {}).get("vocab_size")
        return int(v) if v else default
    except Exception:  # noqa: BLE001 - unreadable config: use the default
        return default

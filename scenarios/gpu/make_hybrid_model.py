#!/usr/bin/env python3
"""Write a random-weight Qwen3-Next (hybrid GDN) checkpoint that sglang 0.5.17 loads.

Why not transformers: transformers 5.12 saves qwen3_next in a form sglang 0.5.17 rejects. Its
config class pops ``full_attention_interval`` into ``layer_types`` (sglang's own Qwen3NextConfig
computes ``layers_block_type`` from ``full_attention_interval``: AttributeError), and it builds a
dense MLP (``mlp.gate_proj/up_proj/down_proj``) for ``mlp_only_layers`` while sglang's decoder
layers are always sparse (``is_layer_sparse = True``: ``Qwen2MoeSparseMoeBlock`` in every layer),
so the loader looks for ``model.layers.N.mlp.down_proj.weight`` among its parameters and fails.

So this script writes config.json itself (``full_attention_interval`` *and* a matching
``layer_types``, ``mlp_only_layers: []``) and the tensors sglang's
``Qwen3NextForCausalLM.load_weights`` maps, named as a real Qwen3-Next checkpoint names them and
shaped as sglang's modules are built (sglang/srt/models/qwen3_next.py and qwen2_moe.py, 0.5.17):

  model.embed_tokens.weight [V, H]        lm_head.weight [V, H] (x HEAD_SCALE)     model.norm.weight [H]
  every layer i:  input_layernorm.weight [H], post_attention_layernorm.weight [H]   (GemmaRMSNorm: 1 + w)
    full attention, (i+1) % full_attention_interval == 0 -> "self_attn." (the loader strips it):
      q_proj [heads*head_dim*(1+attn_output_gate), H]  k_proj, v_proj [kv_heads*head_dim, H]
      o_proj [H, heads*head_dim]   q_norm, k_norm [head_dim]          -> qkv_proj (stacked q/k/v)
    linear attention (Qwen3GatedDeltaNet), "linear_attn.":
      in_proj_qkvz [2*Kd + 2*Vd, H]  (Kd = linear_key_head_dim*linear_num_key_heads,
                                       Vd = linear_value_head_dim*linear_num_value_heads;
                                       fused/packed: loaded whole by the packed weight loader)
      in_proj_ba [2*num_v_heads, H]   conv1d [2*Kd + Vd, 1, linear_conv_kernel_dim]
      dt_bias [num_v_heads]   A_log [num_v_heads] (fp32)   norm [linear_value_head_dim]   out_proj [H, Vd]
    MoE (Qwen2MoeSparseMoeBlock), "mlp.":
      gate [num_experts, H]   experts.E.{gate_proj,up_proj} [moe_intermediate_size, H]
      experts.E.down_proj [H, moe_intermediate_size]    (-> FusedMoE w13/w2 via the expert mapping)
      shared_expert.{gate_proj,up_proj} [shared_expert_intermediate_size, H], .down_proj [H, S]
      shared_expert_gate [1, H]      (with CUDA shared-expert fusion the loader renames
                                      shared_expert.* to experts.<num_experts>.*: same tensors)

Init (CPU generator, so a seed gives the same weights on every machine): matrices N(0,
initializer_range); Gemma norms 0 (scale 1); the gated norm 1; A_log = log U(1, 16); dt_bias 1;
conv1d U(-1/sqrt(k), 1/sqrt(k)); lm_head x HEAD_SCALE (default 40) so greedy margins are wide and
equivalent kernels rarely flip a near-tie (as make_random_model.py does for llama-sharp).

Usage: make_hybrid_model.py CONFIG_DIR OUT_DIR [SEED] [--head-scale 40] [--vocab N]
       make_hybrid_model.py --check OUT_DIR   (build sglang's model on CPU and load the checkpoint
                                               through its own load_weights; needs sglang + torch)
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

DTYPE = "bfloat16"


# ---------------------------------------------------------------------------------------------
# Config (pure)


def sglang_config(src: dict, vocab: int | None = None) -> dict:
    """The config sglang 0.5.17's Qwen3NextConfig reads, from a qwen3_next config dict (a
    transformers-saved one with only ``layer_types`` works too: the interval is recovered)."""
    cfg = dict(src)
    n = int(cfg["num_hidden_layers"])
    interval = cfg.get("full_attention_interval")
    if interval is None:
        types = cfg.get("layer_types") or []
        full = [i for i, t in enumerate(types) if t == "full_attention"]
        if not full:
            raise ValueError("config has neither full_attention_interval nor a full_attention layer in layer_types")
        interval = full[0] + 1
        if full != [i for i in range(n) if (i + 1) % interval == 0]:
            raise ValueError(f"layer_types {types} is not periodic: sglang 0.5.17 only has full_attention_interval")
    interval = int(interval)
    cfg["full_attention_interval"] = interval
    cfg["layer_types"] = ["full_attention" if (i + 1) % interval == 0 else "linear_attention" for i in range(n)]
    cfg["mlp_only_layers"] = []  # sglang builds the MoE block in every layer whatever this says
    cfg["decoder_sparse_step"] = 1
    if int(cfg.get("num_experts", 0)) <= 0:
        raise ValueError("sglang 0.5.17's Qwen3-Next layers are always MoE: num_experts must be > 0")
    cfg.setdefault("attn_output_gate", True)
    cfg.setdefault("head_dim", int(cfg["hidden_size"]) // int(cfg["num_attention_heads"]))
    cfg.setdefault("initializer_range", 0.02)
    cfg.setdefault("tie_word_embeddings", False)
    if vocab:
        cfg["vocab_size"] = int(vocab)
    cfg["architectures"] = ["Qwen3NextForCausalLM"]
    cfg["model_type"] = "qwen3_next"
    cfg["torch_dtype"] = DTYPE
    cfg.pop("dtype", None)
    cfg.pop("transformers_version", None)
    return cfg


def is_full_attention(cfg: dict, i: int) -> bool:
    return (i + 1) % int(cfg["full_attention_interval"]) == 0


def expected_tensors(cfg: dict) -> dict[str, tuple[tuple[int, ...], str]]:
    """Checkpoint tensor name -> (shape, init kind), in the order a real checkpoint lists them."""
    H = int(cfg["hidden_size"])
    V = int(cfg["vocab_size"])
    heads, kv, hd = int(cfg["num_attention_heads"]), int(cfg["num_key_value_heads"]), int(cfg["head_dim"])
    gate = 1 + int(bool(cfg.get("attn_output_gate", True)))
    nk, nv = int(cfg["linear_num_key_heads"]), int(cfg["linear_num_value_heads"])
    dk, dv = int(cfg["linear_key_head_dim"]), int(cfg["linear_value_head_dim"])
    Kd, Vd = nk * dk, nv * dv
    ker = int(cfg["linear_conv_kernel_dim"])
    E, I, S = int(cfg["num_experts"]), int(cfg["moe_intermediate_size"]), int(cfg["shared_expert_intermediate_size"])

    t: dict[str, tuple[tuple[int, ...], str]] = {"model.embed_tokens.weight": ((V, H), "normal")}
    for i in range(int(cfg["num_hidden_layers"])):
        p = f"model.layers.{i}."
        t[p + "input_layernorm.weight"] = ((H,), "zeros")
        t[p + "post_attention_layernorm.weight"] = ((H,), "zeros")
        if is_full_attention(cfg, i):
            a = p + "self_attn."
            t[a + "q_proj.weight"] = ((heads * hd * gate, H), "normal")
            t[a + "k_proj.weight"] = ((kv * hd, H), "normal")
            t[a + "v_proj.weight"] = ((kv * hd, H), "normal")
            t[a + "o_proj.weight"] = ((H, heads * hd), "normal")
            t[a + "q_norm.weight"] = ((hd,), "zeros")
            t[a + "k_norm.weight"] = ((hd,), "zeros")
        else:
            a = p + "linear_attn."
            t[a + "in_proj_qkvz.weight"] = ((2 * Kd + 2 * Vd, H), "normal")
            t[a + "in_proj_ba.weight"] = ((2 * nv, H), "normal")
            t[a + "conv1d.weight"] = ((2 * Kd + Vd, 1, ker), "conv")
            t[a + "dt_bias"] = ((nv,), "ones")
            t[a + "A_log"] = ((nv,), "a_log")
            t[a + "norm.weight"] = ((dv,), "ones")
            t[a + "out_proj.weight"] = ((H, Vd), "normal")
        m = p + "mlp."
        t[m + "gate.weight"] = ((E, H), "normal")
        for e in range(E):
            t[m + f"experts.{e}.gate_proj.weight"] = ((I, H), "normal")
            t[m + f"experts.{e}.up_proj.weight"] = ((I, H), "normal")
            t[m + f"experts.{e}.down_proj.weight"] = ((H, I), "normal")
        if S > 0:
            t[m + "shared_expert.gate_proj.weight"] = ((S, H), "normal")
            t[m + "shared_expert.up_proj.weight"] = ((S, H), "normal")
            t[m + "shared_expert.down_proj.weight"] = ((H, S), "normal")
        t[m + "shared_expert_gate.weight"] = ((1, H), "normal")
    t["model.norm.weight"] = ((H,), "zeros")
    if not cfg.get("tie_word_embeddings", False):
        t["lm_head.weight"] = ((V, H), "head")
    return t


def n_params(cfg: dict) -> int:
    return sum(math.prod(s) for s, _ in expected_tensors(cfg).values())


# ---------------------------------------------------------------------------------------------
# Writing (torch + safetensors)


def random_tensors(cfg: dict, seed: int, head_scale: float):
    import torch

    g = torch.Generator().manual_seed(seed)
    std = float(cfg.get("initializer_range", 0.02))
    out = {}
    for name, (shape, kind) in expected_tensors(cfg).items():
        if kind in ("normal", "head"):
            x = torch.empty(shape).normal_(0.0, std, generator=g)
            if kind == "head":
                x.mul_(head_scale)
        elif kind == "zeros":
            x = torch.zeros(shape)
        elif kind == "ones":
            x = torch.ones(shape)
        elif kind == "conv":
            bound = 1.0 / math.sqrt(shape[-1])
            x = torch.empty(shape).uniform_(-bound, bound, generator=g)
        elif kind == "a_log":
            out[name] = torch.empty(shape).uniform_(1.0, 16.0, generator=g).log().to(torch.float32)
            continue
        else:  # pragma: no cover - expected_tensors only makes the kinds above
            raise ValueError(kind)
        out[name] = x.to(torch.bfloat16).contiguous()
    return out


def write_model(config_dir: str | Path, out_dir: str | Path, seed: int = 0, head_scale: float = 40.0,
                vocab: int | None = None) -> dict:
    from safetensors.torch import save_file

    src = json.loads((Path(config_dir) / "config.json").read_text())
    cfg = sglang_config(src, vocab)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tensors = random_tensors(cfg, seed, head_scale)
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    (out / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    (out / "generation_config.json").write_text(json.dumps(
        {"bos_token_id": cfg.get("bos_token_id", 1), "eos_token_id": cfg.get("eos_token_id", 2), "do_sample": False},
        indent=2) + "\n")
    return cfg


# ---------------------------------------------------------------------------------------------
# Check against sglang itself (CPU, no GPU needed)


def build_sglang_model(model_dir: str | Path):
    """sglang's own Qwen3NextForCausalLM for ``model_dir``, built on the CPU with a one-process
    gloo group (tp 1), as its ModelRunner would build it (quant_config None)."""
    import os
    import socket

    import torch

    os.environ.setdefault("SGLANG_USE_CPU_ENGINE", "0")
    from sglang.srt.configs.model_config import ModelConfig
    from sglang.srt.distributed import bootstrap
    from sglang.srt.runtime_context import get_context
    from sglang.srt.server_args import ServerArgs

    sa = ServerArgs(model_path=str(model_dir), device="cpu", skip_tokenizer_init=True, load_format="auto",
                    attention_backend="triton", sampling_backend="pytorch", grammar_backend="none",
                    disable_radix_cache=True)  # CPU: the Mamba radix cache validation wants CUDA
    get_context().set_server_args(sa)
    mc = ModelConfig.from_server_args(sa)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    import torch.distributed as dist

    if not dist.is_initialized():
        bootstrap._init_parallel_groups(backend="gloo", dist_init_method=f"tcp://127.0.0.1:{port}", server_args=sa,
                                        model_config=mc, gpu_id=0, tp_rank=0, tp_size=1, pp_rank=0, pp_size=1,
                                        attn_dp_size=1, attn_cp_size=1, moe_ep_size=1, moe_dp_size=1, dcp_size=1)
    # Off CUDA, sglang's RotaryEmbedding imports vllm's rope kernel (used only in forward, which
    # this check never runs): a stand-in module lets the module tree be built.
    import importlib.util
    import types

    from sglang.srt.models.qwen3_next import Qwen3NextForCausalLM

    if "vllm" not in sys.modules and importlib.util.find_spec("vllm") is None:
        stub = types.ModuleType("vllm._custom_ops")
        stub.rotary_embedding = None
        sys.modules["vllm"] = types.ModuleType("vllm")
        sys.modules["vllm._custom_ops"] = stub
    torch.set_default_dtype(torch.bfloat16)
    try:
        model = Qwen3NextForCausalLM(mc.hf_config, quant_config=None)
    finally:
        torch.set_default_dtype(torch.float32)
    return model, mc


def check_with_sglang(model_dir: str | Path) -> dict:
    """Load ``model_dir``'s safetensors through sglang's own ``load_weights`` into its model and
    compare: every checkpoint tensor must be consumed, every model parameter filled, with the
    values arriving where the loader puts them. Returns a report; raises on a mismatch."""
    import torch
    from safetensors.torch import load_file

    model, _ = build_sglang_model(model_dir)
    params = dict(model.named_parameters())
    before = {n: p.detach().clone() for n, p in params.items()}
    ckpt = load_file(str(Path(model_dir) / "model.safetensors"))
    loaded = model.load_weights(iter(ckpt.items()))
    unfilled = sorted(set(params) - set(loaded))
    unknown = sorted(set(loaded) - set(params))
    changed = sorted(n for n, p in params.items() if not torch.equal(p.detach(), before[n]))
    # parameters whose checkpoint values are all-zero / all-one legitimately equal their init
    same_init = [n for n in params if n not in changed]
    report = {"checkpoint_tensors": len(ckpt), "model_params": len(params), "loaded_param_names": len(loaded),
              "unfilled": unfilled, "unknown": unknown, "params_unchanged_by_load": same_init}
    if unfilled or unknown:
        raise AssertionError(f"sglang load mismatch: unfilled {unfilled[:10]}, unknown {unknown[:10]}")
    report["values_checked"] = _check_values(params, ckpt)
    return report


def _check_values(params: dict, ckpt: dict) -> int:
    """Where the loader put each checkpoint tensor (tp 1): the stacked/fused parameters hold the
    concatenation of their parts, every other parameter the tensor itself. Returns how many
    parameters were compared; raises on the first difference."""
    import torch

    def same(pname: str, expect) -> None:
        got = params[pname].detach().to(torch.float32)
        exp = expect.to(torch.float32).reshape(got.shape)
        if not torch.equal(got, exp):
            raise AssertionError(f"{pname}: loaded values differ from the checkpoint's")

    n = 0
    done = set()
    for pname in params:
        if pname.endswith("qkv_proj.weight"):
            base = pname[: -len("qkv_proj.weight")] + "self_attn."
            same(pname, torch.cat([ckpt[base + f"{x}_proj.weight"] for x in "qkv"]))
        elif pname.endswith("gate_up_proj.weight"):
            base = pname[: -len("gate_up_proj.weight")]
            same(pname, torch.cat([ckpt[base + "gate_proj.weight"], ckpt[base + "up_proj.weight"]]))
        elif pname.endswith("experts.w13_weight"):
            base = pname[: -len("w13_weight")]
            E = params[pname].shape[0]
            same(pname, torch.stack([torch.cat([ckpt[base + f"{e}.gate_proj.weight"], ckpt[base + f"{e}.up_proj.weight"]])
                                     for e in range(E)]))
        elif pname.endswith("experts.w2_weight"):
            base = pname[: -len("w2_weight")]
            same(pname, torch.stack([ckpt[base + f"{e}.down_proj.weight"] for e in range(params[pname].shape[0])]))
        elif ".self_attn." not in pname:
            key = pname
            if key not in ckpt:  # attention layers' own params: q_norm, k_norm, o_proj
                parts = pname.split(".")
                key = ".".join(parts[:3] + ["self_attn"] + parts[3:])
            if key not in ckpt:
                continue
            same(pname, ckpt[key])
        else:
            continue
        done.add(pname)
        n += 1
    missing = sorted(set(params) - done)
    if missing:
        raise AssertionError(f"no value check for {missing[:10]}")
    return n


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("config_dir", nargs="?")
    ap.add_argument("out_dir")
    ap.add_argument("seed", nargs="?", type=int, default=0)
    ap.add_argument("head_scale_pos", nargs="?", type=float, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--head-scale", type=float, default=40.0, help="lm_head multiplier (default 40)")
    ap.add_argument("--vocab", type=int, default=None, help="override vocab_size")
    ap.add_argument("--check", action="store_true", help="OUT_DIR only: load it through sglang's load_weights on CPU")
    a = ap.parse_args(argv)
    if a.check:
        rep = check_with_sglang(a.out_dir if a.config_dir is None else a.config_dir)
        print(json.dumps({k: (v if not isinstance(v, list) or len(v) < 20 else v[:20] + ["..."])
                          for k, v in rep.items()}, indent=2))
        return 0
    if a.config_dir is None:
        ap.error("CONFIG_DIR OUT_DIR [SEED] required")
    head_scale = a.head_scale_pos if a.head_scale_pos is not None else a.head_scale
    t = time.time()
    cfg = write_model(a.config_dir, a.out_dir, a.seed, head_scale, a.vocab)
    print(f"hybrid model: {n_params(cfg) / 1e6:.1f}M params, {cfg['num_hidden_layers']} layers "
          f"(full attention every {cfg['full_attention_interval']}), {cfg['num_experts']} experts "
          f"-> {a.out_dir} in {time.time() - t:.1f}s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

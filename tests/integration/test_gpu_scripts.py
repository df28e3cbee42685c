"""The GPU-host scripts' CPU paths: the answering model's tokenizer, examples and schedule (what it
is taught to say is what the harness scores as right), the hybrid checkpoint's tensor list, and
both scenarios validating and launching as intended. Torch/transformers/sglang paths (train tiny,
save, reload, greedy-decode; write the hybrid checkpoint and load it through sglang's own
load_weights) are `slow` and skip where those packages are missing."""

from __future__ import annotations

import importlib.util
import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
GPU = ROOT / "scenarios" / "gpu"
QWEN3NEXT_TINY = ROOT / "scenarios" / "models" / "qwen3next-tiny"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, GPU / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod  # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def train():
    return _load("train_answering_model")


@pytest.fixture(scope="module")
def hybrid():
    return _load("make_hybrid_model")


@pytest.fixture(scope="module")
def tok(train):
    pytest.importorskip("tokenizers")
    return train.build_tokenizer(1024, seed=0)


def _has(*mods: str) -> bool:
    return all(importlib.util.find_spec(m) is not None for m in mods)


# ---------------------------------------------------------------------------------------------
# Answering model: pure parts


def test_train_script_imports_without_torch(train):
    assert "torch" not in train.__dict__
    assert set(train.DEFAULT_TASKS) <= set(__import__("harness.quality.tasks", fromlist=["TASKS"]).TASKS)


def test_tokenizer_round_trips_and_splits_symbols(tok, train):
    from harness.quality.tasks import TASKS, generate

    assert [tok.token_to_id(t) for t in train.SPECIAL] == [train.PAD, train.BOS, train.EOS]
    assert tok.get_vocab_size() <= 1024
    for task in TASKS:
        s = generate(task, 2000, 3, 99)
        ids = tok.encode(s.prompt_text).ids
        assert tok.decode(ids) == s.prompt_text  # exact: the scorer sees what the model wrote
        assert train.BOS not in ids and train.EOS not in ids  # no special tokens added to prompts
    # digits and capital letters are single tokens (copied symbol by symbol)
    for text in (" 3944856", " TJCTS", " LB-7300"):
        pieces = [tok.id_to_token(i) for i in tok.encode(text).ids]
        assert all(len(p.replace("Ġ", "")) <= 1 or not any(c.isdigit() or c.isupper() for c in p) for p in pieces), (
            pieces
        )


@pytest.mark.parametrize("task", ["needle", "multi_needle", "variable_tracking", "ordered_codes", "aggregation"])
def test_training_target_is_what_the_harness_scores_correct(tok, train, task):
    """The answer the model is taught, decoded the way run_quality decodes (skip special tokens,
    with the </s> tail and anything after it), scores 1.0 with the harness's own scorer."""
    from harness.quality.fit import as_tokenizer
    from harness.quality.scoring import score_answer
    from harness.quality.tasks import generate

    ex = train.make_example(tok, task, 1500, seed=train.TRAIN_SEED_BASE + 5)
    assert ex.answer[-train.EOS_TAIL :] == [train.EOS] * train.EOS_TAIL
    s = generate(task, 1500, 0, train.TRAIN_SEED_BASE + 5, filler_units=0)
    text = as_tokenizer(tok).decode(ex.answer + [train.EOS] * 30)
    assert text == train.answer_text(s)
    assert score_answer(s.answer, text).correct


@pytest.mark.parametrize("length", [700, 2000, 4096])
def test_examples_fit_their_length(tok, train, length):
    for task in train.DEFAULT_TASKS:
        ex = train.make_example(tok, task, length, seed=train.TRAIN_SEED_BASE + length)
        assert 0.85 * length <= len(ex.prompt) <= length, (task, len(ex.prompt))


def test_examples_are_the_harness_prompt_tokens(tok, train):
    """A training prompt is exactly how the harness tokenizes that sample (fit_sample encodes
    prompt_text the same way), so the model sees at serving time what it saw in training."""
    from harness.quality.fit import fit_sample
    from harness.quality.tasks import generate

    fp = fit_sample(generate("needle", 3000, 2, 7), tok)
    assert list(fp.input_ids) == tok.encode(generate("needle", 3000, 2, 7, fp.sample.filler_units).prompt_text).ids
    assert fp.n_tokens <= 3000


def test_worker_batch_is_seeded(tok, train):
    train._worker_init(tok.to_str())
    a = train._worker_batch((("needle", "ordered_codes"), 600, 3, 11))
    b = train._worker_batch((("needle", "ordered_codes"), 600, 3, 11))
    assert [(e.task, e.prompt, e.answer) for e in a] == [(e.task, e.prompt, e.answer) for e in b]
    assert len(a) == 3 and {e.task for e in a} <= {"needle", "ordered_codes"}


def test_curriculum_and_lr(train):
    p = train.Plan(length=4096, min_length=256, ramp=0.5, lr=1e-3, warmup_steps=100)
    lens = [train.max_length_at(p, f / 100) for f in range(101)]
    assert lens[0] == 256 and lens[50] == 4096 and lens[-1] == 4096
    assert lens == sorted(lens)
    rng = random.Random(0)
    for f in (0.0, 0.2, 0.6, 1.0):
        for _ in range(200):
            L = train.batch_length(p, f, rng)
            assert p.min_length // 2 <= L <= train.max_length_at(p, f)
    assert train.lr_at(p, 0, 0.0) == pytest.approx(1e-5)
    assert train.lr_at(p, 100, 0.0) == pytest.approx(1e-3)
    assert train.lr_at(p, 5000, 1.0) == pytest.approx(1e-4)


def test_harness_reads_the_model_folder_in_text_mode(tok, train, tmp_path):
    """What run_quality does with the trained model's folder: finds tokenizer.json, reads the
    vocab from config.json, fits every sample to the scenario's length."""
    from harness.quality.fit import load_tokenizer, model_vocab_size
    from harness.quality.run import build_prompts, plan_quality

    tok.save(str(tmp_path / "tokenizer.json"))
    (tmp_path / "config.json").write_text(json.dumps({"vocab_size": 1024, "max_position_embeddings": 16384}))
    t = load_tokenizer(tmp_path)
    assert t is not None and model_vocab_size(tmp_path) == 1024
    plan = plan_quality(
        {"tasks": list(train.DEFAULT_TASKS), "lengths": [4000], "samples_per_task": 2, "mode": "text"}, 20480, True
    )
    prompts = build_prompts(plan, 7, t, 1024)
    assert len(prompts) == 8
    assert all(0.97 * 4000 <= p.n_tokens <= 4000 and max(p.input_ids) < 1024 for p in prompts)


# ---------------------------------------------------------------------------------------------
# Hybrid checkpoint: pure parts


def test_hybrid_config_is_what_sglang_reads(hybrid):
    src = json.loads((QWEN3NEXT_TINY / "config.json").read_text())
    cfg = hybrid.sglang_config(src)
    assert cfg["full_attention_interval"] == 4
    assert cfg["layer_types"] == ["linear_attention"] * 3 + ["full_attention"] + ["linear_attention"] * 3 + [
        "full_attention"
    ]
    assert cfg["mlp_only_layers"] == [] and cfg["decoder_sparse_step"] == 1
    assert cfg["architectures"] == ["Qwen3NextForCausalLM"] and cfg["torch_dtype"] == "bfloat16"
    # a transformers-saved config (layer_types, no interval) is recovered
    tf = {k: v for k, v in cfg.items() if k != "full_attention_interval"}
    assert hybrid.sglang_config(tf)["full_attention_interval"] == 4
    bad = dict(tf, layer_types=["full_attention", "linear_attention"] * 4)
    bad["layer_types"][2] = "full_attention"
    with pytest.raises(ValueError, match="periodic"):
        hybrid.sglang_config(bad)
    with pytest.raises(ValueError, match="num_experts"):
        hybrid.sglang_config(dict(src, num_experts=0))


def test_hybrid_tensor_list(hybrid):
    cfg = hybrid.sglang_config(json.loads((QWEN3NEXT_TINY / "config.json").read_text()))
    t = hybrid.expected_tensors(cfg)
    # 3 norms/embeddings outside the layers; per linear layer 2 norms + 7 GDN; per full layer
    # 2 norms + 6 attention; per layer 1 router + 4 experts x 3 + 3 shared + 1 shared gate
    assert len(t) == 3 + 6 * (2 + 7) + 2 * (2 + 6) + 8 * (1 + 4 * 3 + 3 + 1)
    shape = {k: v[0] for k, v in t.items()}
    assert shape["model.layers.3.self_attn.q_proj.weight"] == (8 * 128 * 2, 1024)  # attn_output_gate
    assert shape["model.layers.3.self_attn.k_proj.weight"] == (2 * 128, 1024)
    assert shape["model.layers.3.self_attn.o_proj.weight"] == (1024, 8 * 128)
    assert shape["model.layers.0.linear_attn.in_proj_qkvz.weight"] == (2 * 512 + 2 * 1024, 1024)
    assert shape["model.layers.0.linear_attn.in_proj_ba.weight"] == (16, 1024)
    assert shape["model.layers.0.linear_attn.conv1d.weight"] == (2 * 512 + 1024, 1, 4)
    assert shape["model.layers.0.linear_attn.A_log"] == (8,)
    assert shape["model.layers.0.linear_attn.norm.weight"] == (128,)
    assert shape["model.layers.0.linear_attn.out_proj.weight"] == (1024, 1024)
    assert shape["model.layers.7.mlp.experts.3.down_proj.weight"] == (1024, 512)
    assert shape["model.layers.7.mlp.shared_expert_gate.weight"] == (1, 1024)
    assert "model.layers.0.mlp.down_proj.weight" not in t  # the dense MLP sglang has no slot for
    assert "model.layers.3.linear_attn.A_log" not in t and "model.layers.0.self_attn.q_proj.weight" not in t
    assert 150e6 < hybrid.n_params(cfg) < 170e6


# ---------------------------------------------------------------------------------------------
# Scenarios


def _harness(*args: str, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "harness", *args],
        check=False,
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        timeout=120,
    )


def _llama_dir(tmp_path: Path) -> Path:
    d = tmp_path / "answering"
    d.mkdir()
    (d / "config.json").write_text(
        json.dumps(
            {
                "architectures": ["LlamaForCausalLM"],
                "model_type": "llama",
                "hidden_size": 384,
                "intermediate_size": 1024,
                "num_hidden_layers": 4,
                "num_attention_heads": 6,
                "num_key_value_heads": 6,
                "head_dim": 64,
                "max_position_embeddings": 16384,
                "vocab_size": 1024,
                "torch_dtype": "bfloat16",
            }
        )
    )
    return d


def test_answering_scenario_validates_and_broken_variant_gets_its_pythonpath(tmp_path):
    d = _llama_dir(tmp_path)
    env = {"ANSWERING_MODEL_PATH": str(d), "PYTHONPATH": f"{ROOT}{os.pathsep}/opt/site", "BROKEN_SGLANG": "/opt/broken"}
    v = _harness("validate", "scenarios/gpu/h200_answering.yaml", env=env)
    assert v.returncode == 0, v.stdout + v.stderr
    r = _harness("run", "scenarios/gpu/h200_answering.yaml", "--dry-run", env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    blocks = {b.split("\n", 1)[0].strip(): b for b in r.stdout.split("# variant ")[1:]}
    assert set(blocks) == {"off", "on-r2", "on-r2-broken"}
    assert f"PYTHONPATH=/opt/broken/python:{ROOT}{os.pathsep}/opt/site" in blocks["on-r2-broken"]
    assert "HICACHE_CORRUPT_LOAD=1" in blocks["on-r2-broken"]
    assert "PYTHONPATH=" not in blocks["on-r2"] and "HICACHE_CORRUPT_LOAD" not in blocks["on-r2"]
    assert "--enable-hierarchical-cache" in blocks["on-r2-broken"]


def test_hybrid_parity_scenario_validates_with_non_aligned_sizes(tmp_path, hybrid):
    import yaml

    d = tmp_path / "hyb"
    d.mkdir()
    (d / "config.json").write_text(
        json.dumps(hybrid.sglang_config(json.loads((QWEN3NEXT_TINY / "config.json").read_text())))
    )
    v = _harness("validate", "scenarios/gpu/h200_hybrid_parity.yaml", env={"HYBRID_MODEL_PATH": str(d)})
    assert v.returncode == 0, v.stdout + v.stderr
    doc = yaml.safe_load((GPU / "h200_hybrid_parity.yaml").read_text())
    sizes = [w["prompt_tokens"] for w in doc["workloads"]] + doc["quality"]["lengths"]
    assert all(isinstance(s, int) and s % 64 for s in sizes), sizes  # hybrid hits are 64-aligned
    assert all(v.get("hicache", {}).get("mem_layout") != "layer_first" for v in doc["variants"] if v.get("hicache"))


# ---------------------------------------------------------------------------------------------
# torch / transformers / sglang (slow; skipped where missing)


@pytest.mark.slow
@pytest.mark.skipif(not _has("torch", "transformers", "safetensors", "tokenizers"), reason="needs torch+transformers")
def test_tiny_training_saves_a_model_transformers_reloads_and_decodes(train, tmp_path):
    import torch
    from transformers import AutoModelForCausalLM

    from harness.quality.fit import fit_sample, load_tokenizer
    from harness.quality.tasks import generate

    out = tmp_path / "m"
    rep = train.train(out, train.tiny_plan(max_steps=3, minutes=30.0), "cpu", log=lambda m: None)
    assert rep["steps"] == 3 and set(rep["scenario_greedy"]["per_task"]) == {f"{t}@512" for t in train.DEFAULT_TASKS}
    for f in ("config.json", "model.safetensors", "generation_config.json", "tokenizer.json", "train_report.json"):
        assert (out / f).is_file(), f
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["architectures"] == ["LlamaForCausalLM"] and cfg["model_type"] == "llama"
    assert cfg["rope_theta"] == 10000.0 and cfg["torch_dtype"] == "bfloat16" and cfg["vocab_size"] == 512
    model = AutoModelForCausalLM.from_pretrained(out, dtype=torch.bfloat16)
    tok = load_tokenizer(out)
    fp = fit_sample(generate("needle", 512, 0, 7), tok)
    ids = torch.tensor([list(fp.input_ids)])
    gen = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=8, do_sample=False, pad_token_id=0)
    assert gen.shape[1] == ids.shape[1] + 8 or train.EOS in gen[0, ids.shape[1] :].tolist()
    assert isinstance(tok.decode(gen[0, ids.shape[1] :].tolist()), str)


@pytest.mark.slow
@pytest.mark.skipif(not _has("torch", "safetensors"), reason="needs torch+safetensors")
def test_hybrid_checkpoint_has_exactly_the_expected_tensors(hybrid, tmp_path):
    import torch
    from safetensors.torch import load_file

    src = tmp_path / "cfg"
    src.mkdir()
    small = json.loads((QWEN3NEXT_TINY / "config.json").read_text())
    small.update(
        hidden_size=128,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=64,
        linear_key_head_dim=32,
        linear_value_head_dim=32,
        linear_num_key_heads=2,
        linear_num_value_heads=4,
        moe_intermediate_size=64,
        shared_expert_intermediate_size=64,
        vocab_size=512,
        num_hidden_layers=4,
        full_attention_interval=2,
    )
    (src / "config.json").write_text(json.dumps(small))
    cfg = hybrid.write_model(src, tmp_path / "out", seed=1)
    got = load_file(str(tmp_path / "out" / "model.safetensors"))
    exp = hybrid.expected_tensors(cfg)
    assert {k: tuple(v.shape) for k, v in got.items()} == {k: s for k, (s, _) in exp.items()}
    assert got["model.layers.0.linear_attn.A_log"].dtype == torch.float32
    assert got["lm_head.weight"].dtype == torch.bfloat16
    again = hybrid.random_tensors(cfg, 1, 40.0)
    assert all(torch.equal(again[k], got[k]) for k in got)  # the seed decides the weights
    if _has("sglang"):  # the real test: sglang's own module tree and load_weights, on the CPU
        rep = hybrid.check_with_sglang(tmp_path / "out")
        assert rep["unfilled"] == [] and rep["unknown"] == [] and rep["values_checked"] == rep["model_params"]

#!/usr/bin/env python3
"""Train a small Llama that really answers the harness's quality tasks, on the GPU host, in minutes.

Why: a random-weight checkpoint answers nothing, so quality accuracy is "n/a" and parity can only
say "ON said the same tokens as OFF". A model that answers the needle / variable-tracking / ...
questions turns a broken host tier into a visible accuracy drop, not just a token diff.

What it writes to OUT_DIR (what sglang 0.5.17 loads, and what the harness reads):
  config.json + model.safetensors + generation_config.json   (HF ``LlamaForCausalLM``, bf16)
  tokenizer.json     a byte-level BPE (vocab 1024) trained here on the tasks' own text. sglang is
                     still started with ``--skip-tokenizer-init``: the harness's quality ``mode:
                     text`` reads this file (``harness.core.tokenizers.load_tokenizer``), fits every
                     sample to its token budget, sends ``input_ids`` and decodes/scores the output
                     ids itself. (``mode: token_ids`` sends random ids with no answer at all: it
                     can never be scored, whatever the model.)
  train_report.json  the curve (held-out accuracy per eval) and the final greedy accuracy on the
                     exact samples the scenario will ask (same seed, lengths, indices, harness
                     fit and scorer).

Data: ``harness.quality.tasks.generate`` with random 48-bit seeds (the scenario's small seeds are
never trained on), tokenized with the BPE; target = " " + the answer items joined by ", " +
</s> x4 (so that under ``ignore_eos`` the model keeps emitting </s>, which decoding drops). Loss on
the answer tokens (plus ``--lm-weight`` x next-token loss on everything). Curriculum: context
lengths grow geometrically from ``--min-length`` to ``--length`` over the first ``--ramp`` of the
time budget; a constant number of tokens per batch; AdamW, fp32 master weights, bf16 autocast,
torch SDPA (flash) attention; LR warmup then cosine to 10% over the time budget.

Held-out accuracy printed every ``--eval-every`` seconds is teacher-forced exact match (every
answer token is the argmax) — for greedy decoding that is the same as "the greedy answer is
exactly right", in one forward pass.

Usage (GPU host, after ``source .gpu/install.sh``):
    python3 scenarios/gpu/train_answering_model.py /tmp/models/answering --minutes 2.5
Here (CPU, a minute or two; the whole path: train, save, reload, greedy-decode with the harness's
fit and scorer):
    python scenarios/gpu/train_answering_model.py /tmp/ans-tiny --tiny

What an H200 should reach (an estimate: CPUs here could not run the full configuration). The
default model is 7.9M parameters (4 layers x 384, 6 heads of 64, vocab 1024; 15.7 MB in bf16,
so it comes back through $OUT). At ~80 MFLOP per trained token (4K context, attention included)
and ~100 TFLOP/s reached by matrices this small, plus ~20 ms of Python per 64K-token step, it
trains ~0.8-1.5M tokens/s: 2.5 minutes are ~2,000-3,000 steps, ~150M tokens; 12 data processes
make ~2M tokens/s, so the GPU should not wait (the log prints data-wait). Expected on the
scenario's samples at 4,000 tokens (chance is ~0 for all: 7-digit numbers, 5-letter names):
  needle              0.9-1.0  one digit run in the whole context: an induction copy
  multi_needle        0.5-0.9  (share of the 4 numbers found) key matching, as in MQAR
  ordered_codes       0.5-0.9  (LCS order score) copy each code, then find the next one
  variable_tracking   0.3-0.8  (share of the 5 names) four hops of "which VAR = VAR X"
The held-out curve printed every 30 s says early whether this holds. Longer training (--minutes
5-6) needs a call of its own, and the harness call must then carry the model in: .gpu (46 MB) +
this model is over the 64 MiB a call carries, so train it smaller then (--hidden 256: 8 MB).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from harness.quality.tasks import TASKS, generate

PAD, BOS, EOS = 0, 1, 2
SPECIAL = ["<pad>", "<s>", "</s>"]
EOS_TAIL = 4  # </s> tokens trained after each answer
TRAIN_SEED_BASE = 1 << 50  # training/held-out sample seeds live far above any scenario seed
HELDOUT_SEED_BASE = 1 << 49
DEFAULT_TASKS = ("needle", "multi_needle", "variable_tracking", "ordered_codes")


# ---------------------------------------------------------------------------------------------
# Tokenizer (pure Python + `tokenizers`)


def build_tokenizer(vocab_size: int = 1024, seed: int = 0, n_per_task: int = 60, length: int = 768):
    """A byte-level BPE trained on the tasks' own text. Digits and capital letters are always
    single tokens (numbers, variable names and codes are copied symbol by symbol); filler words
    come out as whole words. Decoding reproduces the text exactly, so the harness's scorer sees
    what the model wrote."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

    corpus = []
    for task in TASKS:
        for i in range(n_per_task):
            s = generate(task, length, i, HELDOUT_SEED_BASE - 1 - seed)
            corpus.append(s.prompt_text + " " + ", ".join(s.answer.items()))
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(r"[A-Z0-9]"), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=2, special_tokens=SPECIAL,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(corpus, trainer)
    assert [tok.token_to_id(t) for t in SPECIAL] == [PAD, BOS, EOS]
    return tok


def answer_text(sample) -> str:
    """What the model is taught to say after "Answer:" (items in the generator's order: the asked
    keys' order, the chain from its root, the codes in order, the words by frequency)."""
    return " " + ", ".join(sample.answer.items())


@dataclass
class Example:
    task: str
    prompt: list[int]
    answer: list[int]  # answer ids + EOS_TAIL x </s>

    @property
    def n(self) -> int:
        return len(self.prompt) + len(self.answer)


_TPU: dict = {}  # per-process tokens-per-filler-unit estimates (task -> (base, per_unit))


def _tokens_per_unit(tok, task: str) -> tuple[int, float]:
    if task not in _TPU:
        base = len(tok.encode(generate(task, 1000, 0, 12345, filler_units=0).prompt_text).ids)
        full = len(tok.encode(generate(task, 1000, 0, 12345, filler_units=200).prompt_text).ids)
        _TPU[task] = (base, max(1.0, (full - base) / 200))
    return _TPU[task]


def make_example(tok, task: str, length: int, seed: int, index: int = 0) -> Example:
    """One sample of ``task`` with a prompt of at most ``length`` tokens (a little below it; a
    length below the filler-free prompt gives the filler-free prompt)."""
    base, per = _tokens_per_unit(tok, task)
    units = max(0, int((length - base) / per * 0.98))
    while True:
        s = generate(task, length, index, seed, filler_units=units)
        ids = tok.encode(s.prompt_text).ids
        if len(ids) <= length or units == 0:
            break
        units = max(0, int(units * length / len(ids)) - 1)
    ans = tok.encode(answer_text(s)).ids + [EOS] * EOS_TAIL
    return Example(task, ids, ans)


_WORKER_TOK = None


def _worker_init(tok_json: str) -> None:
    global _WORKER_TOK
    from tokenizers import Tokenizer

    _WORKER_TOK = Tokenizer.from_str(tok_json)


def _worker_batch(req: tuple) -> list[Example]:
    tasks, length, n, seed = req
    rng = random.Random(seed)
    return [make_example(_WORKER_TOK, rng.choice(tasks), length, TRAIN_SEED_BASE + rng.getrandbits(48))
            for _ in range(n)]


# ---------------------------------------------------------------------------------------------
# Schedule (pure)


@dataclass
class Plan:
    length: int = 4096  # final context length (prompt tokens)
    min_length: int = 256
    ramp: float = 0.45  # fraction of the budget over which the max length grows to `length`
    batch_tokens: int = 65536
    minutes: float = 3.0
    max_steps: int = 0  # 0: time-bound only
    lr: float = 1e-3
    warmup_steps: int = 100
    lm_weight: float = 0.0  # answer-only loss: filler is random, predicting it only adds noise
    weight_decay: float = 0.05
    tasks: tuple = DEFAULT_TASKS
    hidden: int = 384
    layers: int = 4
    heads: int = 6
    head_dim: int = 64
    intermediate: int = 1024
    vocab: int = 1024
    rope_theta: float = 10000.0
    max_position: int = 16384
    eval_every_s: float = 30.0
    eval_samples: int = 8
    workers: int = 8
    seed: int = 0
    scenario_seed: int = 7  # the final greedy check asks exactly the scenario's samples
    scenario_lengths: tuple = (4000,)
    scenario_samples: int = 3
    max_new_tokens: int = 64


def max_length_at(plan: Plan, frac: float) -> int:
    """The curriculum's longest context at time fraction ``frac`` (geometric growth)."""
    if plan.ramp <= 0 or frac >= plan.ramp or plan.min_length >= plan.length:
        return plan.length
    f = max(0.0, frac) / plan.ramp
    return round(plan.min_length * (plan.length / plan.min_length) ** f)


def batch_length(plan: Plan, frac: float, rng: random.Random) -> int:
    """This batch's context length: mostly near the current maximum, sometimes anything shorter
    (so short-context skills are kept)."""
    hi = max_length_at(plan, frac)
    if rng.random() < 0.75:
        return max(plan.min_length // 2, int(hi * rng.uniform(0.5, 1.0)))
    lo = min(plan.min_length, hi)
    return round(math.exp(rng.uniform(math.log(lo), math.log(hi))))


def lr_at(plan: Plan, step: int, frac: float) -> float:
    warm = min(1.0, (step + 1) / max(1, plan.warmup_steps))
    cos = 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, max(0.0, frac))))
    return plan.lr * warm * cos


def tiny_plan(**over) -> Plan:
    p = Plan(length=512, min_length=384, batch_tokens=4096, minutes=1.0, max_steps=8, lr=3e-3, warmup_steps=2,
             hidden=64, layers=2, heads=2, head_dim=32, intermediate=128, vocab=512, max_position=2048,
             eval_every_s=1e9, eval_samples=2, workers=0, scenario_lengths=(512,), scenario_samples=1,
             max_new_tokens=40)
    for k, v in over.items():
        setattr(p, k, v)
    return p


# ---------------------------------------------------------------------------------------------
# Model, batches, loss (torch)


def model_config(plan: Plan, vocab_size: int):
    from transformers import LlamaConfig

    cfg = LlamaConfig(
        vocab_size=vocab_size, hidden_size=plan.hidden, intermediate_size=plan.intermediate,
        num_hidden_layers=plan.layers, num_attention_heads=plan.heads, num_key_value_heads=plan.heads,
        head_dim=plan.head_dim, hidden_act="silu", max_position_embeddings=plan.max_position,
        rms_norm_eps=1e-5, tie_word_embeddings=False, attention_bias=False, mlp_bias=False,
        initializer_range=0.02, pad_token_id=PAD, bos_token_id=BOS, eos_token_id=EOS,
        rope_parameters={"rope_type": "default", "rope_theta": plan.rope_theta},
    )
    cfg.architectures = ["LlamaForCausalLM"]
    return cfg


def collate(examples: list[Example], device):
    """Right-padded ids, and the target of every position (-100 where no answer loss)."""
    import torch

    n = max(e.n for e in examples)
    ids = torch.full((len(examples), n), PAD, dtype=torch.long)
    tgt = torch.full((len(examples), n), -100, dtype=torch.long)
    valid = torch.zeros((len(examples), n), dtype=torch.bool)
    for i, e in enumerate(examples):
        seq = e.prompt + e.answer
        ids[i, : len(seq)] = torch.tensor(seq)
        p = len(e.prompt)
        # position t predicts token t+1: the answer tokens are predicted from p-1 .. p+len-2
        tgt[i, p - 1: p - 1 + len(e.answer)] = torch.tensor(e.answer)
        valid[i, : len(seq) - 1] = True
    return ids.to(device), tgt.to(device), valid.to(device)


def losses(model, ids, tgt, valid, lm_weight: float):
    """(total loss, answer loss, per-example exact flag, answer-token accuracy)."""
    import torch
    import torch.nn.functional as F

    h = model.model(input_ids=ids).last_hidden_state
    amask = tgt != -100
    logits_a = model.lm_head(h[amask]).float()
    loss_a = F.cross_entropy(logits_a, tgt[amask])
    with torch.no_grad():
        right = torch.zeros_like(tgt, dtype=torch.bool)
        right[amask] = logits_a.argmax(-1) == tgt[amask]
        exact = (right | ~amask).all(dim=1)
        tok_acc = right[amask].float().mean()
    loss = loss_a
    if lm_weight > 0:
        lm_mask = valid & ~amask
        nxt = torch.roll(ids, -1, dims=1)
        logits = model.lm_head(h[lm_mask]).float()
        loss = loss + lm_weight * F.cross_entropy(logits, nxt[lm_mask])
    return loss, loss_a.detach(), exact, tok_acc


def heldout_sets(tok, plan: Plan, lengths: list[int]) -> dict:
    out = {}
    for L in lengths:
        for task in plan.tasks:
            out[(task, L)] = [make_example(tok, task, L, HELDOUT_SEED_BASE + 1000 * L + i, i)
                              for i in range(plan.eval_samples)]
    return out


def evaluate(model, sets: dict, device, autocast) -> dict:
    """Teacher-forced exact-answer accuracy per (task, length)."""
    import torch

    model.eval()
    res = {}
    with torch.no_grad(), autocast():
        for (task, L), exs in sets.items():
            ids, tgt, valid = collate(exs, device)
            _, _, exact, tok_acc = losses(model, ids, tgt, valid, 0.0)
            res[f"{task}@{L}"] = {"exact": round(exact.float().mean().item(), 3), "tok": round(tok_acc.item(), 3)}
    model.train()
    return res


def greedy_on_scenario(model, tok, plan: Plan, device) -> dict:
    """The scenario's own samples, fitted by the harness, greedy-decoded, scored by the harness."""
    import torch

    from harness.core.tokenizers import as_tokenizer
    from harness.quality.fit import fit_sample
    from harness.quality.scoring import score_answer

    adapter = as_tokenizer(tok)
    model.eval()
    out: dict = {"per_task": {}, "samples": []}
    for L in plan.scenario_lengths:
        for task in plan.tasks:
            scores = []
            for i in range(plan.scenario_samples):
                fp = fit_sample(generate(task, L, i, plan.scenario_seed), adapter)
                ids = torch.tensor([list(fp.input_ids)], device=device)
                with torch.no_grad():
                    gen = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=plan.max_new_tokens,
                                         do_sample=False, pad_token_id=PAD, eos_token_id=None)
                new = gen[0, ids.shape[1]:].tolist()
                text = adapter.decode(new)
                sc = score_answer(fp.sample.answer, text)
                scores.append(sc.value)
                out["samples"].append({"task": task, "length": L, "index": i, "prompt_tokens": fp.n_tokens,
                                       "answer": fp.sample.answer.to_json(), "output": text, "score": sc.value})
            out["per_task"][f"{task}@{L}"] = round(sum(scores) / len(scores), 3)
    model.train()
    return out


def pick_device(name: str):
    import torch

    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def save_model(model, tok, out: Path, plan: Plan) -> None:
    """bf16 safetensors + config sglang 0.5.17 reads (plus the legacy rope_theta/torch_dtype keys)."""
    import torch

    out.mkdir(parents=True, exist_ok=True)
    model.to(torch.bfloat16).save_pretrained(out, safe_serialization=True)
    model.float()
    cfg_path = out / "config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg.setdefault("rope_theta", plan.rope_theta)
    cfg.setdefault("torch_dtype", "bfloat16")
    cfg["architectures"] = ["LlamaForCausalLM"]
    cfg_path.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    tok.save(str(out / "tokenizer.json"))
    gen = out / "generation_config.json"
    if not gen.exists():
        gen.write_text(json.dumps({"bos_token_id": BOS, "eos_token_id": EOS, "pad_token_id": PAD,
                                   "do_sample": False}, indent=2) + "\n")


def train(out_dir: str | Path, plan: Plan, device_name: str = "auto", log=print) -> dict:
    import torch

    t_start = time.time()
    torch.manual_seed(plan.seed)
    device = pick_device(device_name)
    cuda = device.type == "cuda"
    if cuda:
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    out = Path(out_dir)

    tok = build_tokenizer(plan.vocab, plan.seed)
    vocab = tok.get_vocab_size()
    vocab_padded = ((vocab + 63) // 64) * 64
    log(f"tokenizer: {vocab} tokens ({time.time() - t_start:.1f}s)")

    from transformers import LlamaForCausalLM

    cfg = model_config(plan, vocab_padded)
    model = LlamaForCausalLM._from_config(cfg, attn_implementation="sdpa", dtype=torch.float32).to(device)
    n_params = sum(p.numel() for p in model.parameters())
    log(f"model: {n_params / 1e6:.2f}M params, {plan.layers} layers x {plan.hidden}, device {device}")

    decay = [p for n, p in model.named_parameters() if p.ndim >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.ndim < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": plan.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=plan.lr, betas=(0.9, 0.95), eps=1e-8, fused=cuda)

    def autocast():
        return torch.autocast(device.type, dtype=torch.bfloat16, enabled=cuda)

    eval_lengths = sorted({plan.length, max(plan.min_length, plan.length // 4)})
    held = heldout_sets(tok, plan, eval_lengths)

    budget = plan.minutes * 60.0
    rng = random.Random(plan.seed)
    pool = None
    pending: list = []
    if plan.workers > 0:
        import multiprocessing as mp

        pool = mp.get_context("spawn").Pool(plan.workers, initializer=_worker_init, initargs=(tok.to_str(),))
    else:
        _worker_init(tok.to_str())

    def request(frac: float):
        L = batch_length(plan, frac, rng)
        n = max(1, plan.batch_tokens // L)
        return (tuple(plan.tasks), L, n, rng.getrandbits(62))

    t0 = time.time()
    curve: list[dict] = []
    step, last_eval, seen_tokens, wait_s = 0, t0, 0, 0.0
    ema = None
    try:
        if pool is not None:
            pending = [pool.apply_async(_worker_batch, (request(0.0),)) for _ in range(plan.workers * 2)]
        while True:
            frac = (time.time() - t0) / budget
            if frac >= 1.0 or (plan.max_steps and step >= plan.max_steps):
                break
            if pool is not None:
                tw = time.time()
                batch = pending.pop(0).get()
                wait_s += time.time() - tw
                pending.append(pool.apply_async(_worker_batch, (request(frac),)))
            else:
                batch = _worker_batch(request(frac))
            ids, tgt, valid = collate(batch, device)
            for g in opt.param_groups:
                g["lr"] = lr_at(plan, step, frac)
            with autocast():
                loss, loss_a, _, _ = losses(model, ids, tgt, valid, plan.lm_weight)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            step += 1
            seen_tokens += int(ids.numel())
            la = loss_a.item() if step % 10 == 0 or step < 3 else None
            if la is not None:
                ema = la if ema is None else 0.9 * ema + 0.1 * la
            now = time.time()
            if now - last_eval >= plan.eval_every_s:
                last_eval = now
                res = evaluate(model, held, device, autocast)
                row = {"t_s": round(now - t0, 1), "step": step, "max_len": max_length_at(plan, frac),
                       "answer_loss_ema": round(ema or float("nan"), 4), "tokens": seen_tokens,
                       "tok_per_s": round(seen_tokens / (now - t0)), "data_wait_s": round(wait_s, 1), "heldout": res}
                curve.append(row)
                acc = " ".join(f"{k}={v['exact']:.2f}" for k, v in res.items())
                log(f"[{now - t0:6.1f}s step {step:5d} len<={row['max_len']:5d} bs={len(batch):3d}x{ids.shape[1]} "
                    f"{row['tok_per_s'] / 1e3:.0f}Ktok/s data-wait {wait_s:.0f}s] "
                    f"ans_loss {row['answer_loss_ema']:.3f} | held-out exact: {acc}")
    finally:
        if pool is not None:
            pool.terminate()
    train_s = time.time() - t0
    log(f"trained {step} steps, {seen_tokens / 1e6:.1f}M tokens in {train_s:.1f}s (waited {wait_s:.0f}s for data)")

    final_tf = evaluate(model, held, device, autocast)
    log("held-out exact (teacher forced): " + " ".join(f"{k}={v['exact']:.2f}" for k, v in final_tf.items()))
    save_model(model, tok, out, plan)
    log(f"saved -> {out}")
    model.to(torch.bfloat16)
    scen = greedy_on_scenario(model, tok, plan, device)
    log("greedy on the scenario's samples (harness fit + scorer): "
        + " ".join(f"{k}={v:.2f}" for k, v in scen["per_task"].items()))
    report = {"plan": {k: (list(v) if isinstance(v, tuple) else v) for k, v in asdict(plan).items()},
              "params": n_params, "steps": step, "tokens": seen_tokens, "train_s": round(train_s, 1),
              "total_s": round(time.time() - t_start, 1), "device": str(device), "curve": curve,
              "final_heldout_teacher_forced": final_tf, "scenario_greedy": scen}
    (out / "train_report.json").write_text(json.dumps(report, indent=2) + "\n")
    return report


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out_dir")
    ap.add_argument("--minutes", type=float, default=None, help="training time budget (default 3; tiny 0.5)")
    ap.add_argument("--tiny", action="store_true", help="CPU smoke: tiny model, 8 steps, 512-token contexts")
    ap.add_argument("--length", type=int, default=None, help="final context length in tokens (default 4096)")
    ap.add_argument("--min-length", type=int, default=None)
    ap.add_argument("--batch-tokens", type=int, default=None)
    ap.add_argument("--max-steps", type=int, default=None)
    ap.add_argument("--lr", type=float, default=None)
    ap.add_argument("--warmup-steps", type=int, default=None)
    ap.add_argument("--lm-weight", type=float, default=None)
    ap.add_argument("--hidden", type=int, default=None)
    ap.add_argument("--layers", type=int, default=None)
    ap.add_argument("--heads", type=int, default=None)
    ap.add_argument("--intermediate", type=int, default=None)
    ap.add_argument("--tasks", default=None, help="comma-separated (default needle,multi_needle,"
                    "variable_tracking,ordered_codes)")
    ap.add_argument("--workers", type=int, default=None, help="data processes (default min(12, cores-2); tiny 0)")
    ap.add_argument("--eval-every", type=float, default=None, help="seconds between held-out evals")
    ap.add_argument("--eval-samples", type=int, default=None)
    ap.add_argument("--scenario-seed", type=int, default=None, help="seed of the scenario whose samples "
                    "the final greedy check asks (default 7: h200_answering.yaml)")
    ap.add_argument("--scenario-lengths", default=None, help="comma-separated (default 4000)")
    ap.add_argument("--scenario-samples", type=int, default=None)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--device", default="auto")
    a = ap.parse_args(argv)

    plan = tiny_plan() if a.tiny else Plan(workers=max(0, min(12, (os.cpu_count() or 2) - 2)))
    over = {"minutes": a.minutes, "length": a.length, "min_length": a.min_length, "batch_tokens": a.batch_tokens,
            "max_steps": a.max_steps, "lr": a.lr, "warmup_steps": a.warmup_steps, "lm_weight": a.lm_weight, "hidden": a.hidden, "layers": a.layers,
            "heads": a.heads, "intermediate": a.intermediate, "workers": a.workers, "eval_every_s": a.eval_every,
            "eval_samples": a.eval_samples, "scenario_seed": a.scenario_seed, "scenario_samples": a.scenario_samples,
            "seed": a.seed}
    for k, v in over.items():
        if v is not None:
            setattr(plan, k, v)
    if a.tasks:
        plan.tasks = tuple(t.strip() for t in a.tasks.split(",") if t.strip())
        bad = [t for t in plan.tasks if t not in TASKS]
        if bad:
            ap.error(f"unknown task(s) {bad}; known: {', '.join(TASKS)}")
    if a.scenario_lengths:
        plan.scenario_lengths = tuple(int(x) for x in a.scenario_lengths.split(","))
    if plan.hidden != plan.heads * plan.head_dim:
        plan.head_dim = plan.hidden // plan.heads
    train(a.out_dir, plan, a.device, log=lambda m: print(m, flush=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())

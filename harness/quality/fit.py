"""Fit a task sample to a target token length; produce the exact input ids both arms get.

One job: choose the amount of filler so that the tokenized prompt is as long as possible
without exceeding the target (binary search on the filler amount, as RULER does), keeping the
needles at their relative depths, and return the final ``input_ids``. Both arms are sent these
ids, so tokenization can never differ between them.

Without a tokenizer (``--skip-tokenizer-init`` servers with no tokenizer files, random-weight
models, the simulator) there is token-id mode: a seeded random token-id context of exactly the
target length whose last ``suffix_len`` ids are a fixed per-task "question". Nothing can be
scored there (accuracy is n/a); parity still can.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass
from typing import Any, Literal

from harness.core.tokenizers import as_tokenizer
from harness.quality.tasks import Sample, default_filler_units, generate, sample_seed, with_filler

Mode = Literal["text", "token_ids"]


@dataclass(frozen=True)
class FittedPrompt:
    """A sample with its final input ids. ``text`` is None in token-id mode."""

    sample: Sample
    mode: Mode
    input_ids: tuple[int, ...]
    text: str | None

    @property
    def n_tokens(self) -> int:
        return len(self.input_ids)

    @property
    def input_hash(self) -> str:
        return input_hash(self.input_ids)


def input_hash(ids: tuple[int, ...] | list[int]) -> str:
    return hashlib.sha256(",".join(map(str, ids)).encode()).hexdigest()


def fit_sample(sample: Sample, tokenizer: Any, target_tokens: int | None = None) -> FittedPrompt:
    """The sample with the most filler whose tokenized prompt has at most ``target_tokens``
    tokens (default ``sample.length_target``). If even no filler is too long, the filler-free
    prompt is returned (longer than the target)."""
    tok = as_tokenizer(tokenizer)
    target = sample.length_target if target_tokens is None else target_tokens
    cache: dict[int, tuple[Sample, list[int]]] = {}

    def measure(units: int) -> int:
        if units not in cache:
            s = with_filler(sample, units)
            cache[units] = (s, tok.encode(s.prompt_text))
        return len(cache[units][1])

    # bracket [lo, hi): lo fits, hi does not (found by growing from an estimate)
    lo = 0
    if measure(0) > target:
        s, ids = cache[0]
        return FittedPrompt(s, "text", tuple(ids), s.prompt_text)
    guess = max(1, default_filler_units(sample.task, target))
    hi = guess
    while measure(hi) <= target:
        lo, hi = hi, hi * 2
    if guess > 1 and lo == 0:  # the estimate overshot: search below it
        probe = guess // 2
        while probe > 0 and measure(probe) > target:
            hi, probe = probe, probe // 2
        lo = probe
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if measure(mid) <= target:
            lo = mid
        else:
            hi = mid
    s, ids = cache[lo]
    return FittedPrompt(s, "text", tuple(ids), s.prompt_text)


def token_id_prompt(
    task: str, length_target: int, index: int, seed: int, vocab_size: int = 32000, suffix_len: int = 16
) -> FittedPrompt:
    """Token-id mode: ``length_target`` seeded ids; the last ``suffix_len`` are the task's fixed
    "question" (the same for every sample of a task). Ids avoid the lowest 10 (special tokens)."""
    if length_target <= suffix_len:
        raise ValueError(f"length {length_target} must exceed the question suffix ({suffix_len} tokens)")
    lo_id, hi_id = 10, max(11, vocab_size)
    ctx_rng = random.Random(sample_seed(seed, task, length_target, index, salt="token_ids"))
    q_rng = random.Random(sample_seed(seed, task, 0, 0, salt="question"))
    ids = [ctx_rng.randrange(lo_id, hi_id) for _ in range(length_target - suffix_len)]
    ids += [q_rng.randrange(lo_id, hi_id) for _ in range(suffix_len)]
    return FittedPrompt(generate(task, length_target, index, seed, filler_units=0), "token_ids", tuple(ids), None)

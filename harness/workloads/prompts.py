"""Seeded token-id prompts of an exact length (any server, `input_ids`).

Distinctness is a guarantee, not a likelihood: every prompt a `PromptFactory` makes starts with a
first token that no earlier prompt of that factory used, so two distinct prompts share no prefix
at all (sglang's radix cache matches from token 0; a differing first token means a differing
first page, whatever the page size). Ids avoid the special ids 0-2 (pad/bos/eos in llama-style
vocabularies).
"""

from __future__ import annotations

import hashlib
from typing import Sequence

import numpy as np

FIRST_REGULAR_ID = 3  # ids below are special (unk/bos/eos)
PAGE_TOKENS = 64


def derive_seed(*parts: object) -> int:
    """A stable 64-bit seed from any parts (e.g. base seed, workload, repeat, purpose)."""
    digest = hashlib.sha256(repr(parts).encode()).digest()
    return int.from_bytes(digest[:8], "little")


class PromptFactory:
    """Makes token-id prompts whose first tokens are pairwise distinct across everything this
    factory ever made (one factory per server run keeps cold prompts cold)."""

    def __init__(self, seed: int, vocab_size: int) -> None:
        if vocab_size <= FIRST_REGULAR_ID + 1:
            raise ValueError(f"vocab_size {vocab_size} leaves no regular ids")
        self.seed = seed
        self.vocab_size = vocab_size
        self.used_first: set[int] = set()

    @property
    def capacity(self) -> int:
        """How many more distinct prompts can still be made."""
        return self.vocab_size - FIRST_REGULAR_ID - len(self.used_first)

    def _fresh_first(self, rng: np.random.Generator) -> int:
        if self.capacity <= 0:
            raise ValueError(
                f"all {self.vocab_size - FIRST_REGULAR_ID} first tokens used: "
                "vocabulary too small for this many distinct prompts"
            )
        while True:
            t = int(rng.integers(FIRST_REGULAR_ID, self.vocab_size))
            if t not in self.used_first:
                self.used_first.add(t)
                return t

    def distinct(self, count: int, n_tokens: int, *, key: object) -> list[list[int]]:
        """`count` prompts of exactly `n_tokens` ids, each with a never-used first token.
        Same (seed, key, factory history) → same prompts."""
        if n_tokens < 1:
            raise ValueError(f"n_tokens must be >= 1, got {n_tokens}")
        out = []
        for i in range(count):
            rng = np.random.default_rng(derive_seed(self.seed, key, i))
            first = self._fresh_first(rng)
            rest = rng.integers(FIRST_REGULAR_ID, self.vocab_size, size=n_tokens - 1).tolist()
            out.append([first] + rest)
        return out

    def one(self, n_tokens: int, *, key: object) -> list[int]:
        return self.distinct(1, n_tokens, key=key)[0]

    def extend(self, prefix: Sequence[int], n_tokens: int, *, key: object) -> list[int]:
        """`prefix` followed by `n_tokens` fresh seeded ids (a new user turn on a history)."""
        rng = np.random.default_rng(derive_seed(self.seed, "extend", key))
        return list(prefix) + rng.integers(FIRST_REGULAR_ID, self.vocab_size, size=n_tokens).tolist()

    def shared_prefix(self, count: int, prefix_tokens: int, suffix_tokens: int, *, key: object) -> list[list[int]]:
        """`count` prompts sharing one fresh prefix, each continued by its own suffix."""
        prefix = self.one(prefix_tokens, key=(key, "prefix"))
        return [self.extend(prefix, suffix_tokens, key=(key, "suffix", i)) for i in range(count)]

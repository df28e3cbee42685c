"""Seeded prompts of an exact token length: token-id prompts (any server, `input_ids`) and text
prompts fitted with a real tokenizer.

Distinctness is a guarantee, not a likelihood: every prompt a `PromptFactory` makes starts with a
first token that no earlier prompt of that factory used, so two distinct prompts share no prefix
at all (sglang's radix cache matches from token 0; a differing first token means a differing
first page, whatever the page size). Ids avoid the special ids 0-2 (pad/bos/eos in llama-style
vocabularies).
"""

from __future__ import annotations

import hashlib
from typing import Any, Protocol, Sequence

import numpy as np

FIRST_REGULAR_ID = 3  # ids below are special (unk/bos/eos)
PAGE_TOKENS = 64


def derive_seed(*parts: object) -> int:
    """A stable 64-bit seed from any parts (e.g. base seed, workload, repeat, purpose)."""
    digest = hashlib.sha256(repr(parts).encode()).digest()
    return int.from_bytes(digest[:8], "little")


def token_ids(n_tokens: int, seed: int, vocab_size: int) -> list[int]:
    """`n_tokens` ids uniform in [3, vocab_size), fixed by `seed`."""
    if n_tokens < 0:
        raise ValueError(f"n_tokens must be >= 0, got {n_tokens}")
    if vocab_size <= FIRST_REGULAR_ID + 1:
        raise ValueError(f"vocab_size {vocab_size} leaves no regular ids")
    rng = np.random.default_rng(seed)
    return rng.integers(FIRST_REGULAR_ID, vocab_size, size=n_tokens).tolist()


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
            raise ValueError(f"all {self.vocab_size - FIRST_REGULAR_ID} first tokens used: "
                             "vocabulary too small for this many distinct prompts")
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

    def shared_prefix(self, count: int, prefix_tokens: int, suffix_tokens: int, *,
                      key: object) -> list[list[int]]:
        """`count` prompts sharing one fresh prefix, each continued by its own suffix."""
        prefix = self.one(prefix_tokens, key=(key, "prefix"))
        return [self.extend(prefix, suffix_tokens, key=(key, "suffix", i)) for i in range(count)]


def first_pages(prompts: Sequence[Sequence[int]], page_tokens: int = PAGE_TOKENS) -> list[tuple[int, ...]]:
    return [tuple(p[:page_tokens]) for p in prompts]


# -- text prompts ---------------------------------------------------------------------------

class Tokenizer(Protocol):
    def encode(self, text: str, *args: Any, **kwargs: Any) -> Any: ...
    def decode(self, ids: Any, *args: Any, **kwargs: Any) -> str: ...


def encode(tokenizer: Tokenizer, text: str) -> list[int]:
    """Ids without special tokens, for a `tokenizers.Tokenizer` or a transformers tokenizer."""
    try:
        r = tokenizer.encode(text, add_special_tokens=False)
    except TypeError:
        r = tokenizer.encode(text)
    ids = getattr(r, "ids", r)
    return list(ids)


_SYLLABLES = ["ka", "lo", "mi", "ne", "ru", "ta", "vo", "si", "pe", "du", "an", "or", "el",
              "in", "us", "be", "ga", "fi", "ho", "ju"]
_FILLERS = [" a", " the", " of", ".", ",", " I", "a", " x", "!", " and", "e", " o"]


def _words(rng: np.random.Generator, count: int) -> list[str]:
    lens = rng.integers(1, 4, size=count)
    picks = rng.integers(0, len(_SYLLABLES), size=int(lens.sum()))
    out, j = [], 0
    for n in lens:
        out.append("".join(_SYLLABLES[k] for k in picks[j:j + n]))
        j += n
    return out


def text_prompt(tokenizer: Tokenizer, n_tokens: int, seed: int, *, lead: str = "") -> str:
    """A seeded text whose encoding (without special tokens) is exactly `n_tokens` long.
    Binary-searches the number of words, then tops up with short fillers one token at a time.
    Raises ValueError if the tokenizer makes an exact fit impossible."""
    if n_tokens < 0:
        raise ValueError(f"n_tokens must be >= 0, got {n_tokens}")
    if n_tokens == 0:
        return ""
    rng = np.random.default_rng(seed)
    words = _words(rng, max(16, n_tokens))
    while len(encode(tokenizer, lead + " ".join(words))) < n_tokens:
        words += _words(rng, len(words))

    def count(w: int) -> int:
        return len(encode(tokenizer, lead + " ".join(words[:w])))

    lo, hi = 0, len(words)  # largest w with count(w) <= n_tokens
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if count(mid) <= n_tokens:
            lo = mid
        else:
            hi = mid - 1
    text = lead + " ".join(words[:lo])
    for _ in range(4 * PAGE_TOKENS + n_tokens):
        have = len(encode(tokenizer, text))
        if have == n_tokens:
            return text
        if have > n_tokens:
            text = text[:-1]
            continue
        gains = [(len(encode(tokenizer, text + f)) - have, f) for f in _FILLERS]
        fitting = [(g, f) for g, f in gains if 0 < g <= n_tokens - have]
        if not fitting:
            text = text[:-1]
            continue
        text += max(fitting)[1]
    raise ValueError(f"could not fit a text of exactly {n_tokens} tokens with this tokenizer")


def distinct_text_prompts(tokenizer: Tokenizer, count: int, n_tokens: int, seed: int) -> list[str]:
    """`count` texts of exactly `n_tokens` tokens whose first `PAGE_TOKENS` tokens all differ
    (checked on the encodings; a colliding one is redrawn)."""
    out: list[str] = []
    seen: set[tuple[int, ...]] = set()
    attempt = 0
    while len(out) < count:
        text = text_prompt(tokenizer, n_tokens, derive_seed(seed, "text", len(out), attempt))
        page = tuple(encode(tokenizer, text)[:PAGE_TOKENS])
        attempt += 1
        if page in seen:
            if attempt > 100 * (count + 1):
                raise ValueError("could not draw distinct first pages")
            continue
        seen.add(page)
        out.append(text)
    return out

"""The simulated model: deterministic next-token candidates, and a trivial tokenizer.

One job: give every (prompt, generated-so-far) state the same five candidate tokens with the
same logprobs every time, so greedy outputs are a pure function of the prompt ids, as with a
real server under ``--enable-deterministic-inference``.  The state is a 64-bit running hash of
the prompt ids and then of each emitted token, so once two runs emit different tokens they
keep diverging, like a real model.  About one position in eight is a near-tie (top-1 and top-2
logprobs within 0.01), which is what the ``near_tie_flips`` fault flips and what parity's
tie-epsilon must recognise.  EOS is never a candidate: generations always run to
``max_new_tokens`` (finish_reason ``length``).

The tokenizer (used without ``--skip-tokenizer-init``): text -> UTF-8 bytes -> ids 3..258;
ids back -> bytes where they are bytes, else a pseudo-word derived from the id.
"""

from __future__ import annotations

import hashlib
import random
import struct
from dataclasses import dataclass

import numpy as np

TOP_K = 5
NEAR_TIE_PROB = 0.125
NEAR_TIE_MAX_GAP = 0.01
_BYTE_OFFSET = 3
_MASK = (1 << 64) - 1
# distinct constant mixed into the state when host-loaded KV is "corrupt"
CORRUPT_SALT = 0x5EED_C0FF_EE00_0001


def prompt_state(input_ids: list[int]) -> int:
    """64-bit digest of the prompt ids (numpy for speed on 100K-token prompts)."""
    data = np.asarray(input_ids, dtype=np.int64).tobytes()
    return struct.unpack("<Q", hashlib.blake2b(data, digest_size=8).digest())[0]


def advance(state: int, token: int) -> int:
    """State after emitting ``token`` (splitmix64-style mixing)."""
    z = (state ^ ((token + 0x9E3779B97F4A7C15) & _MASK)) & _MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
    return z ^ (z >> 31)


@dataclass(frozen=True)
class Candidates:
    """Top-k (token, logprob) pairs, best first."""

    tokens: tuple[int, ...]
    logprobs: tuple[float, ...]

    @property
    def margin(self) -> float:
        return self.logprobs[0] - self.logprobs[1]


class TokenModel:
    """Candidate generator for one vocabulary."""

    def __init__(self, vocab_size: int, special_ids: tuple[int, ...] = ()) -> None:
        self.vocab_size = max(vocab_size, 300)
        self.special = set(special_ids) | {0, 1, 2}

    def candidates(self, state: int) -> Candidates:
        rng = random.Random(state)
        toks: list[int] = []
        while len(toks) < TOP_K:
            t = rng.randrange(_BYTE_OFFSET, self.vocab_size)
            if t not in self.special and t not in toks:
                toks.append(t)
        lp = -rng.uniform(0.005, 1.2)
        lps = [lp]
        gap = rng.uniform(0.0005, NEAR_TIE_MAX_GAP) if rng.random() < NEAR_TIE_PROB else rng.uniform(0.15, 2.5)
        lps.append(lp - gap)
        for _ in range(TOP_K - 2):
            lps.append(lps[-1] - rng.uniform(0.05, 1.5))
        return Candidates(tuple(toks), tuple(round(x, 6) for x in lps))

    def sample(self, cand: Candidates, temperature: float, rng: random.Random) -> int:
        """Softmax-at-temperature draw among the candidates (temperature > 0)."""
        weights = np.exp((np.asarray(cand.logprobs) - cand.logprobs[0]) / max(temperature, 1e-6))
        return cand.tokens[rng.choices(range(TOP_K), weights=weights.tolist())[0]]

    def outside(self, cand: Candidates, token: int) -> int:
        """A token guaranteed not among ``cand``'s top-k (for corrupted host loads)."""
        while token in cand.tokens or token in self.special:
            token = _BYTE_OFFSET + (token * 7919 + 17) % (self.vocab_size - _BYTE_OFFSET)
        return token


def encode_text(text: str) -> list[int]:
    return [b + _BYTE_OFFSET for b in text.encode("utf-8")]


_SYL = ["ka", "to", "mi", "ra", "ne", "su", "lo", "vi", "de", "pa", "qu", "zo", "be", "ha", "ri", "no"]


def decode_ids(ids: list[int]) -> str:
    out: list[str] = []
    buf = bytearray()
    for t in ids:
        if _BYTE_OFFSET <= t < _BYTE_OFFSET + 256:
            buf.append(t - _BYTE_OFFSET)
            continue
        if buf:
            out.append(buf.decode("utf-8", errors="replace"))
            buf.clear()
        word, n = "", t
        for _ in range(3):
            word += _SYL[n % 16]
            n //= 16
        out.append(" " + word)
    if buf:
        out.append(buf.decode("utf-8", errors="replace"))
    return "".join(out)

"""The simulated model: deterministic next-token candidates, and a trivial tokenizer.

One job: give every (prompt, generated-so-far) state the same five candidate tokens with the
same logprobs every time, so greedy outputs are a pure function of the prompt ids, as with a
real server under ``--enable-deterministic-inference``.  The state is a 64-bit running hash of
the prompt ids and then of each emitted token, so once two runs emit different tokens they
keep diverging, like a real model.  About one position in eight is a near-tie (top-1 and top-2
logprobs within 0.01), which is what the ``near_tie_flips`` fault flips and what parity's
tie-epsilon must recognise.  EOS is never a candidate: generations always run to
``max_new_tokens`` (finish_reason ``length``).

The tokenizer (used without ``--skip-tokenizer-init``, and by the OpenAI endpoints for text):
`SimTokenizer`. With a ``tokenizer.json`` in the model folder (``--tokenizer-path`` or
``--model-path``) and the ``tokenizers`` package, that tokenizer: text counts as the model's
tokens, as sglang counts them. Without one, a documented approximation (`approx_encode`): text is
cut into pieces the way byte-level BPE pre-tokenizers cut it — a word of up to 6 letters with its
leading space, a run of up to 3 digits, one other character, whitespace — and each piece is one
id, a hash of the piece into the vocabulary (deterministic, so a shared text prefix is a shared
id prefix and the prefix cache sees it). English prose comes to ~1.2-1.4 tokens a word, within
about 20 % of a BPE tokenizer's count (UTF-8 bytes, what this module used to count, are ~4-6x).
Outputs decode through the loaded tokenizer; without one, ids decode to pseudo-words.
Chat messages become one prompt through `chat_prompt` (a fixed template: the model's own chat
template is not applied; the role and content tokens are counted).
"""

from __future__ import annotations

import hashlib
import json
import random
import re
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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


# byte-level BPE pre-tokenization, approximately: a word (up to 6 letters) with its leading space,
# digits in threes, any other character alone, whitespace runs
_PIECE = re.compile(r" ?[^\W\d_]{1,6}| ?\d{1,3}| ?[^\s\w]|\s+(?!\S)|\s+|_")


def approx_encode(text: str, vocab_size: int) -> list[int]:
    """The approximate tokenizer: one id per piece (see the module docstring), ids in
    ``[3, vocab_size)``; the same piece is the same id everywhere."""
    span = max(vocab_size, 300) - _BYTE_OFFSET
    out = []
    for piece in _PIECE.findall(text):
        h = hashlib.blake2b(piece.encode("utf-8"), digest_size=8).digest()
        out.append(_BYTE_OFFSET + int.from_bytes(h, "little") % span)
    return out


class SimTokenizer:
    """Text <-> ids for the simulator: the model folder's ``tokenizer.json`` when it has one and
    ``tokenizers`` is installed, else `approx_encode` (``kind`` says which)."""

    def __init__(self, vocab_size: int, path: str | Path | None = None) -> None:
        self.vocab_size = max(vocab_size, 300)
        self._tok: Any = None
        self.kind = "approximate (pieces of up to 6 letters, docs/simulator.md)"
        file = Path(path) / "tokenizer.json" if path is not None else None
        if file is not None and file.is_file():
            try:
                from tokenizers import Tokenizer
            except ImportError:
                self.kind += f"; {file} found but the tokenizers package is not installed"
            else:
                self._tok = Tokenizer.from_file(str(file))
                self.kind = f"tokenizer.json ({file})"
                # generated ids must decode: a tokenizer smaller than config.json's vocab bounds them
                self.vocab_size = max(min(self.vocab_size, self._tok.get_vocab_size()), 300)

    def encode(self, text: str) -> list[int]:
        if self._tok is not None:
            return list(self._tok.encode(text, add_special_tokens=False).ids)
        return approx_encode(text, self.vocab_size)

    def decode(self, ids: list[int]) -> str:
        if self._tok is not None:
            return self._tok.decode(list(ids))
        return decode_ids(ids)


def chat_prompt(messages: Any) -> str:
    """OpenAI chat messages -> the one prompt text the simulator tokenizes: each message as
    ``<|role|>\ncontent\n``, then ``<|assistant|>\n`` (content given as a list of parts: its
    text parts joined). ValueError for messages that are not a list of objects with a role."""
    if not isinstance(messages, list) or not messages:
        raise ValueError("messages must be a non-empty list")
    out = []
    for m in messages:
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise ValueError("each message must be an object with a role")
        content = m.get("content")
        if isinstance(content, list):
            content = "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
        elif content is None:
            content = ""
        elif not isinstance(content, str):
            content = json.dumps(content)
        out.append(f"<|{m['role']}|>\n{content}\n")
    return "".join(out) + "<|assistant|>\n"

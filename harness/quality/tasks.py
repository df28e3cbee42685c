"""Seeded long-context tasks with exact known answers (RULER-style), as pure data.

One job: turn (task, target length, index, seed, amount of filler) into a `Sample` whose prompt
text holds everything needed to recover its answer. Every sample has its own `random.Random`
seeded from a sha256 of (seed, task, target length, index), so any subset regenerates
identically. The needles and the answer are drawn first and never depend on the amount of
filler; the filler is a prefix-stable stream of plain English sentences (sentence n is the
same whatever the total), and needles sit at fixed relative depths. `fit.py` chooses the
amount of filler that meets a token budget.

Tasks (modelled on NVIDIA RULER's generators):
- ``needle``: one key → 7-digit value hidden in the filler; answer: the value (str).
- ``multi_needle``: several keys (plus unasked distractor keys); answer: all asked values
  (unordered list).
- ``variable_tracking``: chains ``VAR X = 12345.`` then ``VAR Y = VAR X.`` ... (plus a
  distractor chain); answer: every variable equal to the asked value (unordered list).
- ``aggregation``: a numbered list of words with a planted frequency distribution; answer:
  the K most common words (unordered list).
- ``ordered_codes``: K distinct codes planted in order; answer: the codes in order (ordered).
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass, field
from typing import Literal

TASKS: tuple[str, ...] = ("needle", "multi_needle", "variable_tracking", "aggregation", "ordered_codes")

AnswerKind = Literal["str", "ordered", "unordered"]


@dataclass(frozen=True)
class Answer:
    """The known answer: one string, or a list whose order matters (``ordered``) or not."""

    kind: AnswerKind
    value: str | tuple[str, ...]

    def items(self) -> tuple[str, ...]:
        return (self.value,) if isinstance(self.value, str) else tuple(self.value)

    def to_json(self) -> str | list[str]:
        return self.value if isinstance(self.value, str) else list(self.value)


@dataclass(frozen=True)
class Needle:
    """A sentence planted at a relative depth (0..1) of the filler."""

    text: str
    depth: float


@dataclass(frozen=True)
class Sample:
    """One generated question. ``parts`` are the context pieces in order (filler runs and
    needle sentences, or list items for ``aggregation``); ``prompt_text`` joins them."""

    task: str
    length_target: int
    index: int
    seed: int
    filler_units: int
    preamble: str
    parts: tuple[str, ...]
    question: str
    answer: Answer
    needles: tuple[Needle, ...] = field(default=(), repr=False)

    @property
    def key(self) -> tuple[str, int, int, int]:
        return (self.task, self.length_target, self.index, self.seed)

    @property
    def context(self) -> str:
        sep = "\n" if self.task == "aggregation" else " "
        return sep.join(p for p in self.parts if p)

    @property
    def prompt_text(self) -> str:
        return f"{self.preamble}\n\n{self.context}\n\n{self.question}\nAnswer:"


def sample_seed(seed: int, task: str, length_target: int, index: int, salt: str = "") -> int:
    """A 64-bit seed from a sha256 of the sample's identity (stable across Python versions)."""
    digest = hashlib.sha256(f"{seed}|{task}|{length_target}|{index}|{salt}".encode()).digest()
    return int.from_bytes(digest[:8], "big")


# ---------------------------------------------------------------------------------------------
# Filler: procedurally generated plain English. No digits, no upper-case runs, no word "VAR",
# so no filler sentence can look like a needle.

_SUBJECTS = (
    "the old miller",
    "a young teacher",
    "the harbour master",
    "my grandmother",
    "the baker on the corner",
    "a tired traveller",
    "the village doctor",
    "our neighbour",
    "the librarian",
    "a quiet student",
    "the ferry captain",
    "the gardener",
    "a street musician",
    "the night watchman",
    "the potter",
    "a retired sailor",
    "the shepherd",
    "the innkeeper",
    "a curious child",
    "the carpenter",
    "the mayor",
    "a wandering poet",
    "the blacksmith",
    "the weaver",
    "a local farmer",
    "the stationmaster",
    "the choir director",
    "a visiting painter",
    "the postwoman",
    "the cook",
)
_VERBS = (
    "carried",
    "repaired",
    "painted",
    "described",
    "borrowed",
    "polished",
    "remembered",
    "sold",
    "wrapped",
    "counted",
    "cleaned",
    "admired",
    "forgot",
    "mended",
    "discovered",
    "sketched",
    "returned",
    "measured",
    "planted",
    "opened",
    "folded",
    "collected",
    "noticed",
    "traded",
)
_ADJECTIVES = (
    "small",
    "heavy",
    "faded",
    "wooden",
    "bright",
    "narrow",
    "crooked",
    "gentle",
    "ancient",
    "copper",
    "woollen",
    "curious",
    "hollow",
    "silver",
    "dusty",
    "painted",
    "broken",
    "quiet",
    "golden",
    "sturdy",
    "rusty",
    "fragile",
    "crimson",
    "plain",
)
_OBJECTS = (
    "basket of apples",
    "lantern",
    "map of the coast",
    "kettle",
    "wheelbarrow",
    "bundle of letters",
    "fishing net",
    "violin",
    "clock",
    "loaf of bread",
    "pair of boots",
    "umbrella",
    "chair",
    "garden gate",
    "book of songs",
    "jar of honey",
    "weather vane",
    "bicycle",
    "quilt",
    "compass",
    "teapot",
    "rowing boat",
    "window frame",
    "sack of flour",
    "music box",
    "mirror",
)
_PLACES = (
    "near the river",
    "behind the chapel",
    "at the market",
    "on the hill",
    "in the orchard",
    "by the harbour",
    "under the bridge",
    "in the square",
    "beside the mill",
    "at the edge of the forest",
    "in the station hall",
    "along the canal",
    "on the village green",
    "in the back garden",
    "outside the bakery",
    "at the crossroads",
    "in the attic",
    "near the lighthouse",
)
_TIMES = (
    "early in the morning",
    "after the storm",
    "before supper",
    "on a rainy afternoon",
    "late in the evening",
    "during the festival",
    "at first light",
    "in the middle of winter",
    "one summer",
    "when the bells rang",
    "just before dusk",
    "on market day",
)
_FEELINGS = ("pleased", "surprised", "puzzled", "delighted", "worried", "amused", "relieved", "proud")
_WEATHER = (
    "The wind came in cold from the sea",
    "A light rain fell over the rooftops",
    "The sky was pale and still",
    "Fog lay low over the fields",
    "The sun warmed the stone walls",
    "Clouds gathered slowly over the hills",
    "The air smelled of wet leaves and smoke",
    "Snow had settled on the chimneys",
)
_REMARKS = (
    "Nobody could quite say why it mattered so much",
    "It was the kind of thing people talked about for weeks",
    "Some said it was luck and others said it was patience",
    "The story changed a little every time it was told",
    "Most of the town had already gone home by then",
    "Even the dogs seemed to notice that something was different",
    "There was no hurry, and nobody pretended otherwise",
    "It seemed ordinary at the time",
)


def _cap(s: str) -> str:
    return s[:1].upper() + s[1:]


def _filler_sentence(rng: random.Random) -> str:
    s, v, a, o = rng.choice(_SUBJECTS), rng.choice(_VERBS), rng.choice(_ADJECTIVES), rng.choice(_OBJECTS)
    p, t, f = rng.choice(_PLACES), rng.choice(_TIMES), rng.choice(_FEELINGS)
    s2 = rng.choice(_SUBJECTS)
    form = rng.randrange(8)
    if form == 0:
        return f"{_cap(s)} {v} the {a} {o} {p} {t}."
    if form == 1:
        return f"{_cap(t)}, {s} {v} a {a} {o} and left it {p}."
    if form == 2:
        return f"{rng.choice(_WEATHER)} when {s} {v} the {o}."
    if form == 3:
        return f"{_cap(s)} was {f} to find that {s2} had {v} the {a} {o}."
    if form == 4:
        return f"{rng.choice(_REMARKS)}."
    if form == 5:
        return f"According to {s2}, the {a} {o} {p} had been left there {t}."
    if form == 6:
        return f"{_cap(s)} and {s2} talked for a while {p}, then {v} the {o} together."
    return f"If you ask {s}, the {o} was never as {a} as people claim."


def filler_sentences(filler_seed: int, n: int) -> list[str]:
    """The first ``n`` sentences of the seeded filler stream (prefix-stable)."""
    rng = random.Random(filler_seed)
    return [_filler_sentence(rng) for _ in range(n)]


def filler_corpus(n: int = 2000, seed: int = 0) -> list[str]:
    """Sentences from the filler grammar, e.g. to train a test tokenizer."""
    return filler_sentences(sample_seed(seed, "corpus", 0, 0), n)


# ---------------------------------------------------------------------------------------------
# Needle vocabulary

_KEY_WORDS = (
    "amber",
    "falcon",
    "harbor",
    "willow",
    "cobalt",
    "meadow",
    "granite",
    "lantern",
    "saffron",
    "orchid",
    "thistle",
    "marble",
    "juniper",
    "walnut",
    "sparrow",
    "glacier",
    "tundra",
    "cedar",
    "velvet",
    "comet",
    "ember",
    "quartz",
    "maple",
    "otter",
    "heron",
    "canyon",
    "prairie",
    "basil",
    "coral",
    "pepper",
)
_SYLLABLES = tuple(c + v for c in "bdfgklmnprstvz" for v in "aeiou") + ("shan", "tor", "vel", "mir", "dak")
_UPPER = "ABCDEFGHJKLMNPQRSTUVWXYZ"


def _key(rng: random.Random, used: set[str]) -> str:
    while True:
        k = f"{rng.choice(_KEY_WORDS)}-{rng.choice(_KEY_WORDS)}"
        if k not in used and k.split("-")[0] != k.split("-")[1]:
            used.add(k)
            return k


def _number(rng: random.Random, used: set[str], digits: int = 7) -> str:
    while True:
        v = str(rng.randrange(10 ** (digits - 1), 10**digits))
        if v not in used:
            used.add(v)
            return v


def _var_name(rng: random.Random, used: set[str]) -> str:
    while True:
        v = "".join(rng.choice(_UPPER) for _ in range(5))
        if v not in used:
            used.add(v)
            return v


def _code(rng: random.Random, used: set[str]) -> str:
    while True:
        c = f"{rng.choice(_UPPER)}{rng.choice(_UPPER)}-{rng.randrange(1000, 10000)}"
        if c not in used:
            used.add(c)
            return c


def _pseudo_word(rng: random.Random) -> str:
    return "".join(rng.choice(_SYLLABLES) for _ in range(rng.choice((2, 3, 3, 4))))


def _depths(rng: random.Random, n: int, lo: float = 0.05, hi: float = 0.95) -> list[float]:
    return sorted(round(rng.uniform(lo, hi), 4) for _ in range(n))


# ---------------------------------------------------------------------------------------------
# Task specs: (preamble, needles, question, answer), all independent of the filler amount.


@dataclass(frozen=True)
class _Spec:
    preamble: str
    needles: tuple[Needle, ...]
    question: str
    answer: Answer


def _spec_needle(rng: random.Random) -> _Spec:
    used: set[str] = set()
    key, value = _key(rng, used), _number(rng, used)
    return _Spec(
        preamble="A special magic number is hidden within the following text. Make sure to "
        "memorize it. I will quiz you about the number afterwards.",
        needles=(
            Needle(f"One of the special magic numbers for {key} is: {value}.", round(rng.uniform(0.05, 0.95), 4)),
        ),
        question=f"What is the special magic number for {key} mentioned in the provided text?",
        answer=Answer("str", value),
    )


def _spec_multi_needle(rng: random.Random, n_asked: int = 4, n_distractors: int = 2) -> _Spec:
    used: set[str] = set()
    keys = [_key(rng, used) for _ in range(n_asked + n_distractors)]
    values = [_number(rng, used) for _ in keys]
    order = list(range(len(keys)))
    rng.shuffle(order)
    depths = _depths(rng, len(keys))
    needles = tuple(
        Needle(f"One of the special magic numbers for {keys[i]} is: {values[i]}.", d) for i, d in zip(order, depths)
    )
    asked = keys[:n_asked]
    return _Spec(
        preamble="Some special magic numbers are hidden within the following text. Make sure to "
        "memorize them. I will quiz you about the numbers afterwards.",
        needles=needles,
        question="What are the special magic numbers for " + ", ".join(asked[:-1]) + f" and {asked[-1]} "
        "mentioned in the provided text? List every number.",
        answer=Answer("unordered", tuple(values[:n_asked])),
    )


def _spec_variable_tracking(rng: random.Random, n_chains: int = 2, n_hops: int = 4) -> _Spec:
    used_names: set[str] = set()
    used_values: set[str] = set()
    chains: list[tuple[str, list[str], list[str]]] = []  # (value, names, statements)
    for _ in range(n_chains):
        names = [_var_name(rng, used_names) for _ in range(n_hops + 1)]
        value = _number(rng, used_values, digits=5)
        stmts = [f"VAR {names[0]} = {value}."] + [f"VAR {names[i]} = VAR {names[i - 1]}." for i in range(1, len(names))]
        chains.append((value, names, stmts))
    # interleave the chains' statements, each chain's own statements in order
    labels = [c for c in range(n_chains) for _ in range(n_hops + 1)]
    rng.shuffle(labels)
    depths = _depths(rng, len(labels))
    cursor = [0] * n_chains
    needles = []
    for lab, d in zip(labels, depths):
        needles.append(Needle(chains[lab][2][cursor[lab]], d))
        cursor[lab] += 1
    value, names, _ = chains[0]
    return _Spec(
        preamble="Memorize and track the chain(s) of variable assignment hidden in the following text.",
        needles=tuple(needles),
        question=f"Find all variables that are assigned the value {value} in the text above. List every variable name.",
        answer=Answer("unordered", tuple(names)),
    )


def _spec_ordered_codes(rng: random.Random, k: int = 6) -> _Spec:
    used: set[str] = set()
    codes = [_code(rng, used) for _ in range(k)]
    depths = _depths(rng, k)
    return _Spec(
        preamble="Several checkpoint codes are written in the following text, one at a time. "
        "Keep track of them and of the order in which they appear.",
        needles=tuple(Needle(f"The next checkpoint code is {c}.", d) for c, d in zip(codes, depths)),
        question=f"List the {k} checkpoint codes in the order they appear in the text, separated by commas.",
        answer=Answer("ordered", tuple(codes)),
    )


AGG_K = 5
AGG_COMMON_BASE = 10  # the K common words appear 10 + 2*(K-1-i) times; others 1..3 times


def _spec_aggregation(rng: random.Random) -> _Spec:
    common: list[str] = []
    while len(common) < AGG_K:
        w = _pseudo_word(rng)
        if w not in common:
            common.append(w)
    return _Spec(
        preamble="Below is a numbered list of words. In these words, some appear more often than others. "
        "Memorize the ones that appear most often.",
        needles=tuple(Needle(w, 0.0) for w in common),
        question=f"What are the {AGG_K} most common words in the above list? List the words.",
        answer=Answer("unordered", tuple(common)),
    )


_SPECS = {
    "needle": _spec_needle,
    "multi_needle": _spec_multi_needle,
    "variable_tracking": _spec_variable_tracking,
    "aggregation": _spec_aggregation,
    "ordered_codes": _spec_ordered_codes,
}


def _render_haystack(spec: _Spec, filler_seed: int, units: int) -> tuple[str, ...]:
    """Filler sentences with the needles inserted before sentence round(depth * units)."""
    sentences = filler_sentences(filler_seed, units)
    slots: dict[int, list[str]] = {}
    for nd in spec.needles:  # needles are in depth order; ties keep their order
        slots.setdefault(min(units, round(nd.depth * units)), []).append(nd.text)
    parts: list[str] = []
    start = 0
    for pos in sorted(slots):
        parts.append(" ".join(sentences[start:pos]))
        parts.extend(slots[pos])
        start = pos
    parts.append(" ".join(sentences[start:]))
    return tuple(p for p in parts if p)


def _render_word_list(spec: _Spec, filler_seed: int, units: int) -> tuple[str, ...]:
    """``units`` distinct uncommon words (1..3 occurrences each) plus the planted common words."""
    common = list(spec.answer.items())
    rng = random.Random(filler_seed)
    words: list[str] = []
    seen = set(common)
    while len(seen) - len(common) < units:
        w = _pseudo_word(rng)
        if w not in seen:
            seen.add(w)
            words.extend([w] * rng.choice((1, 1, 2, 3)))
    for i, w in enumerate(common):
        words.extend([w] * (AGG_COMMON_BASE + 2 * (AGG_K - 1 - i)))
    random.Random(filler_seed ^ units).shuffle(words)
    return tuple(f"{i + 1}. {w}" for i, w in enumerate(words))


def default_filler_units(task: str, length_target: int) -> int:
    """A rough filler amount for ``length_target`` tokens when no tokenizer refines it."""
    per_unit = 5.0 if task == "aggregation" else 16.0
    return max(1, int(length_target / per_unit))


def generate(task: str, length_target: int, index: int, seed: int, filler_units: int | None = None) -> Sample:
    """The sample (task, length_target, index, seed) rendered with ``filler_units`` of filler
    (sentences, or distinct uncommon words for ``aggregation``). Pure and deterministic."""
    if task not in _SPECS:
        raise ValueError(f"unknown quality task {task!r}; known: {', '.join(TASKS)}")
    if filler_units is None:
        filler_units = default_filler_units(task, length_target)
    if filler_units < 0:
        raise ValueError("filler_units must be >= 0")
    spec = _SPECS[task](random.Random(sample_seed(seed, task, length_target, index)))
    filler_seed = sample_seed(seed, task, length_target, index, salt="filler")
    render = _render_word_list if task == "aggregation" else _render_haystack
    return Sample(
        task=task,
        length_target=length_target,
        index=index,
        seed=seed,
        filler_units=filler_units,
        preamble=spec.preamble,
        parts=render(spec, filler_seed, filler_units),
        question=spec.question,
        answer=spec.answer,
        needles=spec.needles,
    )


def with_filler(sample: Sample, filler_units: int) -> Sample:
    """The same sample (same needles, answer and filler stream) with another amount of filler."""
    if filler_units == sample.filler_units:
        return sample
    return generate(sample.task, sample.length_target, sample.index, sample.seed, filler_units)

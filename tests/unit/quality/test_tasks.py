"""Quality tasks: seeded determinism, distinctness, and answers recoverable from the prompt alone."""

from __future__ import annotations

import re
from collections import Counter

import pytest

from harness.quality.tasks import TASKS, Answer, filler_corpus, generate, sample_seed, with_filler

# ---- reference solvers: recover the answer from the prompt text only -------------------------


def solve_needle(prompt: str) -> Answer:
    key = re.search(r"magic number for (\S+) mentioned", prompt).group(1)
    return Answer("str", re.search(rf"magic numbers for {re.escape(key)} is: (\d+)\.", prompt).group(1))


def solve_multi_needle(prompt: str) -> Answer:
    asked = re.search(r"magic numbers for (.+) mentioned", prompt).group(1)
    keys = re.split(r", | and ", asked)
    found = dict(re.findall(r"magic numbers for (\S+) is: (\d+)\.", prompt))
    return Answer("unordered", tuple(found[k] for k in keys))


def solve_variable_tracking(prompt: str) -> Answer:
    value = re.search(r"assigned the value (\d+) in the text", prompt).group(1)
    names = {value}
    for name, rhs in re.findall(r"VAR ([A-Z]{5}) = (VAR [A-Z]{5}|\d+)\.", prompt):  # in text order
        if rhs.removeprefix("VAR ") in names:
            names.add(name)
    names.discard(value)
    return Answer("unordered", tuple(names))


def solve_aggregation(prompt: str) -> Answer:
    k = int(re.search(r"What are the (\d+) most common words", prompt).group(1))
    words = re.findall(r"^\d+\. (\w+)$", prompt, flags=re.M)
    return Answer("unordered", tuple(w for w, _ in Counter(words).most_common(k)))


def solve_ordered_codes(prompt: str) -> Answer:
    return Answer("ordered", tuple(re.findall(r"checkpoint code is ([A-Z]{2}-\d{4})\.", prompt)))


SOLVERS = {
    "needle": solve_needle,
    "multi_needle": solve_multi_needle,
    "variable_tracking": solve_variable_tracking,
    "aggregation": solve_aggregation,
    "ordered_codes": solve_ordered_codes,
}


def same_answer(a: Answer, b: Answer) -> bool:
    if a.kind != b.kind:
        return False
    if a.kind == "unordered":
        return sorted(a.items()) == sorted(b.items())
    return a.items() == b.items()


@pytest.mark.parametrize("task", TASKS)
def test_same_seed_same_prompt(task):
    a, b = generate(task, 4000, 3, 7), generate(task, 4000, 3, 7)
    assert a == b and a.prompt_text == b.prompt_text


@pytest.mark.parametrize("task", TASKS)
def test_different_index_seed_length_differ(task):
    base = generate(task, 4000, 0, 7)
    assert generate(task, 4000, 1, 7).prompt_text != base.prompt_text
    assert generate(task, 4000, 0, 8).prompt_text != base.prompt_text
    assert generate(task, 4001, 0, 7).prompt_text != base.prompt_text
    assert generate(task, 4000, 1, 7).answer != base.answer


def test_subset_regenerates_identically():
    """Sample i does not depend on which other samples were generated before it."""
    all_ = [generate("needle", 2000, i, 1) for i in range(5)]
    assert generate("needle", 2000, 3, 1) == all_[3]
    assert sample_seed(1, "needle", 2000, 3) == sample_seed(1, "needle", 2000, 3)


@pytest.mark.parametrize("task", TASKS)
@pytest.mark.parametrize("units", [0, 7, 60, 400])
def test_reference_solver_recovers_answer(task, units):
    for i in range(4):
        s = generate(task, 8000, i, 11, filler_units=units)
        assert same_answer(SOLVERS[task](s.prompt_text), s.answer), (task, units, i)


@pytest.mark.parametrize("task", [t for t in TASKS if t != "aggregation"])
def test_filler_amount_keeps_needles_and_depths(task):
    small, big = generate(task, 8000, 2, 5, filler_units=50), generate(task, 8000, 2, 5, filler_units=500)
    assert small.answer == big.answer and small.needles == big.needles and small.question == big.question
    for s in (small, big):
        text = s.context
        positions = [text.index(n.text) / len(text) for n in s.needles]
        assert positions == sorted(positions)  # needles appear in depth order
    # a needle at relative depth d sits near d of the way through the larger context
    for nd in big.needles:
        assert abs(big.context.index(nd.text) / len(big.context) - nd.depth) < 0.05
    # the filler stream is prefix-stable: the small context's first sentence starts the big one
    assert big.context.startswith(small.context.split(".")[0])


def test_with_filler_is_generate():
    s = generate("ordered_codes", 3000, 1, 2, filler_units=10)
    assert with_filler(s, 99) == generate("ordered_codes", 3000, 1, 2, filler_units=99)


def test_filler_is_varied_english_without_needle_patterns():
    corpus = filler_corpus(3000)
    assert len(set(corpus)) > 2500  # varied, not "hi hi hi"
    text = " ".join(corpus)
    assert not re.search(r"\d", text)
    assert "VAR " not in text and "magic" not in text and "checkpoint" not in text
    assert len(set(re.findall(r"[a-z]+", text.lower()))) > 200


def test_aggregation_planted_frequencies():
    s = generate("aggregation", 8000, 0, 3, filler_units=300)
    counts = Counter(re.findall(r"^\d+\. (\w+)$", s.prompt_text, flags=re.M))
    common = set(s.answer.items())
    assert min(counts[w] for w in common) > max(c for w, c in counts.items() if w not in common)


def test_unknown_task_rejected():
    with pytest.raises(ValueError, match="unknown quality task"):
        generate("nope", 100, 0, 0)

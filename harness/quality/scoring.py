"""Accuracy of a model's answer text against a sample's known answer.

One job: (answer, output text) → ``Score(value in [0, 1], correct)``. Pure.

- ``str`` answers (``needle``): exact match — the first run of digits of the answer's length
  in the output must equal the answer (a model that names a wrong number first is wrong even
  if the right one follows).
- ``unordered`` lists (``multi_needle``, ``variable_tracking``, ``aggregation``): all-found
  fraction — the share of expected items that occur in the output as whole words
  (case-insensitive), as RULER's ``string_match_all``.
- ``ordered`` lists (``ordered_codes``): order score = LCS(expected, predicted) / K, where
  predicted is the sequence of code-shaped tokens in the output in order of first occurrence.
  1.0 only when all K codes appear in the right relative order; a single swap of two codes
  costs 1/K; extra or repeated codes are not penalised.

``correct`` is ``value == 1.0``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from harness.quality.tasks import Answer

_CODE = re.compile(r"\b[A-Z]{2}-\d{4}\b")


@dataclass(frozen=True)
class Score:
    value: float
    correct: bool


def exact_match(expected: str, output: str) -> float:
    """1.0 if the first digit run of the answer's length (or, for non-numeric answers, the first
    whole word) in ``output`` equals ``expected``."""
    if expected.isdigit():
        found = re.findall(r"\d+", output)
        candidates = [f for f in found if len(f) == len(expected)] or found
        return 1.0 if candidates and candidates[0] == expected else 0.0
    words = re.findall(r"[\w-]+", output)
    return 1.0 if words and words[0].lower() == expected.lower() else 0.0


def all_found_fraction(expected: tuple[str, ...] | list[str], output: str) -> float:
    """Share of ``expected`` items that occur in ``output`` as whole words (case-insensitive)."""
    if not expected:
        return 1.0
    low = output.lower()
    hits = sum(1 for e in expected if re.search(rf"(?<![\w-]){re.escape(e.lower())}(?![\w-])", low))
    return hits / len(expected)


def lcs_length(a: list[str] | tuple[str, ...], b: list[str] | tuple[str, ...]) -> int:
    """Length of the longest common subsequence."""
    prev = [0] * (len(b) + 1)
    for x in a:
        cur = [0]
        for j, y in enumerate(b):
            cur.append(prev[j] + 1 if x == y else max(prev[j + 1], cur[j]))
        prev = cur
    return prev[-1]


def order_score(expected: tuple[str, ...] | list[str], output: str) -> float:
    """LCS(expected, codes in ``output`` by first occurrence) / len(expected)."""
    if not expected:
        return 1.0
    seen: list[str] = []
    for c in _CODE.findall(output):
        if c not in seen:
            seen.append(c)
    return lcs_length(list(expected), seen) / len(expected)


def score_answer(answer: Answer, output: str) -> Score:
    """The score of ``output`` for ``answer`` (dispatch on the answer's kind)."""
    if answer.kind == "str":
        assert isinstance(answer.value, str)
        v = exact_match(answer.value, output)
    elif answer.kind == "unordered":
        v = all_found_fraction(answer.items(), output)
    else:
        v = order_score(answer.items(), output)
    return Score(value=v, correct=v == 1.0)

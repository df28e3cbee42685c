"""Accuracy scoring against known answers."""

from __future__ import annotations

import pytest

from harness.quality.scoring import all_found_fraction, exact_match, lcs_length, order_score, score_answer
from harness.quality.tasks import Answer


def test_exact_match_first_number_counts():
    assert exact_match("3944856", "The special magic number is 3944856.") == 1.0
    assert exact_match("3944856", " 3944856") == 1.0
    assert exact_match("3944856", "It is 1234567, not 3944856") == 0.0  # wrong number named first
    assert exact_match("3944856", "394485") == 0.0
    assert exact_match("3944856", "no idea") == 0.0
    assert exact_match("abc", "ABC is it") == 1.0


def test_all_found_fraction_whole_words_case_insensitive():
    exp = ("CJVZV", "NSMBH", "CAHFW", "TUMLR")
    assert all_found_fraction(exp, "CJVZV, NSMBH, CAHFW, TUMLR") == 1.0
    assert all_found_fraction(exp, "cjvzv nsmbh") == 0.5
    assert all_found_fraction(exp, "XCJVZV NSMBHX") == 0.0  # not whole words
    assert all_found_fraction((), "") == 1.0


def test_lcs_and_order_score():
    assert lcs_length("abcde", "ace") == 3
    assert lcs_length([], ["a"]) == 0
    exp = ("MB-2969", "WF-7910", "QU-3957", "PU-8364")
    assert order_score(exp, "MB-2969, WF-7910, QU-3957, PU-8364") == 1.0
    assert order_score(exp, "WF-7910, MB-2969, QU-3957, PU-8364") == 0.75  # one swap costs 1/K
    assert order_score(exp, "MB-2969 MB-2969 WF-7910") == 0.5  # repeats ignored, missing ones count
    assert order_score(exp, "PU-8364 QU-3957 WF-7910 MB-2969") == 0.25


@pytest.mark.parametrize(
    "answer,text,value,correct",
    [
        (Answer("str", "1234567"), "1234567", 1.0, True),
        (Answer("unordered", ("a", "b")), "b and a", 1.0, True),
        (Answer("unordered", ("a", "b")), "a only", 0.5, False),
        (Answer("ordered", ("AB-1234", "CD-5678")), "CD-5678, AB-1234", 0.5, False),
    ],
)
def test_score_answer_dispatch(answer, text, value, correct):
    s = score_answer(answer, text)
    assert s.value == value and s.correct is correct

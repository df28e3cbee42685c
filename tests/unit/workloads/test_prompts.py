"""Prompts: exact lengths, special ids avoided, distinct first tokens, determinism."""

import pytest

from harness.workloads.prompts import FIRST_REGULAR_ID, PromptFactory


def test_factory_distinct_first_tokens_across_calls():
    f = PromptFactory(seed=0, vocab_size=40)
    a = f.distinct(20, 100, key="a")
    b = f.distinct(17, 65, key="b")
    firsts = [p[0] for p in a + b]
    assert len(set(firsts)) == len(firsts) == 37  # vocab 40 → 37 regular ids: all used, none twice
    assert all(len(p) == 100 for p in a) and all(len(p) == 65 for p in b)
    assert min(min(p) for p in a + b) >= FIRST_REGULAR_ID and max(max(p) for p in a + b) < 40
    with pytest.raises(ValueError, match="vocabulary too small"):
        f.one(10, key="c")


def test_factory_is_deterministic_per_seed_and_key():
    assert PromptFactory(1, 32000).distinct(3, 70, key="k") == PromptFactory(1, 32000).distinct(3, 70, key="k")
    assert PromptFactory(1, 32000).distinct(3, 70, key="k") != PromptFactory(1, 32000).distinct(3, 70, key="j")


def test_extend_and_shared_prefix():
    f = PromptFactory(0, 32000)
    ps = f.shared_prefix(4, 128, 16, key="s")
    assert all(len(p) == 144 for p in ps)
    assert len({tuple(p[:128]) for p in ps}) == 1
    assert len({tuple(p[128:]) for p in ps}) == 4
    longer = f.extend(ps[0], 10, key="t")
    assert longer[:144] == ps[0] and len(longer) == 154

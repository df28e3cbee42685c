"""Prompts: exact lengths, special ids avoided, distinct first pages, determinism."""

import pytest
from tokenizers import Tokenizer, models, pre_tokenizers, trainers, decoders

from harness.prompts import (PAGE_TOKENS, PromptFactory, distinct_text_prompts, encode,
                             first_pages, text_prompt, token_ids)


@pytest.fixture(scope="module")
def tiny_tokenizer() -> Tokenizer:
    """A real byte-level BPE tokenizer trained in-process on a few sentences."""
    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    corpus = ["kalo mine ruta vosi pedu anor elin usbe gafi hoju " * 20,
              "the quick brown fox jumps over the lazy dog, and a cat!"] * 10
    trainer = trainers.BpeTrainer(vocab_size=400, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(corpus, trainer)
    return tok


def test_token_ids_exact_length_range_and_seeded():
    ids = token_ids(1000, seed=7, vocab_size=50)
    assert len(ids) == 1000 and min(ids) >= 3 and max(ids) < 50
    assert ids == token_ids(1000, seed=7, vocab_size=50)
    assert ids != token_ids(1000, seed=8, vocab_size=50)


def test_factory_distinct_first_tokens_across_calls():
    f = PromptFactory(seed=0, vocab_size=40)
    a = f.distinct(20, 100, key="a")
    b = f.distinct(17, 65, key="b")
    firsts = [p[0] for p in a + b]
    assert len(set(firsts)) == len(firsts) == 37  # vocab 40 → 37 regular ids: all used, none twice
    assert all(len(p) == 100 for p in a) and all(len(p) == 65 for p in b)
    assert len(set(first_pages(a + b))) == 37
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


@pytest.mark.parametrize("n", [0, 1, 2, 7, 64, 333])
def test_text_prompt_exact_length(tiny_tokenizer, n):
    text = text_prompt(tiny_tokenizer, n, seed=n)
    assert len(encode(tiny_tokenizer, text)) == n


def test_distinct_text_prompts_first_pages(tiny_tokenizer):
    texts = distinct_text_prompts(tiny_tokenizer, 6, 100, seed=3)
    encs = [encode(tiny_tokenizer, t) for t in texts]
    assert all(len(e) == 100 for e in encs)
    assert len({tuple(e[:PAGE_TOKENS]) for e in encs}) == 6

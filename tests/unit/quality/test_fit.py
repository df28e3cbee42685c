"""Length fitting with a real (locally trained) tokenizer, and token-id mode."""

from __future__ import annotations

import pytest

from harness.core.model_config import model_vocab_size
from harness.core.tokenizers import as_tokenizer, load_tokenizer
from harness.quality.fit import fit_sample, token_id_prompt
from harness.quality.tasks import TASKS, filler_corpus, generate

tokenizers = pytest.importorskip("tokenizers")


@pytest.fixture(scope="module")
def bpe():
    """A small byte-level BPE trained on the filler grammar plus needle-like lines (no downloads)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=1500, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), special_tokens=["<s>"]
    )
    extra = [generate(t, 2000, i, 0, filler_units=5).prompt_text for t in TASKS for i in range(3)]
    tok.train_from_iterator(filler_corpus(1500) + extra, trainer)
    return tok


@pytest.fixture(scope="module")
def wordlevel():
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator(filler_corpus(1500), trainers.WordLevelTrainer(special_tokens=["[UNK]"]))
    return tok


@pytest.mark.parametrize("task", TASKS)
@pytest.mark.parametrize("target", [1500, 6000])
def test_fit_within_2_percent(bpe, task, target):
    f = fit_sample(generate(task, target, 0, 4), bpe)
    assert f.mode == "text"
    assert target * 0.98 <= f.n_tokens <= target, (task, f.n_tokens)
    assert list(f.input_ids) == bpe.encode(f.text).ids
    # the answer survives fitting
    assert all(item in f.text for item in f.sample.answer.items())


def test_fit_wordlevel_and_transformers_style(wordlevel):
    f = fit_sample(generate("needle", 3000, 1, 0), wordlevel)
    assert 0.98 * 3000 <= f.n_tokens <= 3000

    class ListTok:  # transformers-style: encode returns a list
        def encode(self, text):
            return wordlevel.encode(text).ids

    g = fit_sample(generate("needle", 3000, 1, 0), ListTok())
    assert g.input_ids == f.input_ids


def test_fit_is_deterministic_for_both_arms(bpe):
    a = fit_sample(generate("variable_tracking", 4000, 2, 9), bpe)
    b = fit_sample(generate("variable_tracking", 4000, 2, 9), bpe)
    assert a.input_ids == b.input_ids and a.input_hash == b.input_hash


def test_fit_too_small_target_returns_filler_free(bpe):
    f = fit_sample(generate("multi_needle", 20, 0, 0), bpe)
    assert f.sample.filler_units == 0 and f.n_tokens > 20


def test_as_tokenizer_rejects_non_tokenizers():
    with pytest.raises(TypeError):
        as_tokenizer(object())


def test_load_tokenizer_from_tokenizer_json(bpe, tmp_path):
    assert load_tokenizer(tmp_path) is None
    assert load_tokenizer(None) is None
    bpe.save(str(tmp_path / "tokenizer.json"))
    t = load_tokenizer(tmp_path)
    assert t.encode("the old miller") == bpe.encode("the old miller").ids
    assert "miller" in t.decode(t.encode("the old miller"))


def test_model_vocab_size(tmp_path):
    (tmp_path / "config.json").write_text('{"vocab_size": 1234}')
    assert model_vocab_size(tmp_path) == 1234
    assert model_vocab_size(tmp_path / "missing") == 32000


def test_token_id_mode_exact_length_and_fixed_question():
    a = token_id_prompt("needle", 5000, 0, 1, vocab_size=1000)
    b = token_id_prompt("needle", 5000, 1, 1, vocab_size=1000)
    c = token_id_prompt("aggregation", 5000, 0, 1, vocab_size=1000)
    assert a.mode == "token_ids" and a.text is None and a.n_tokens == 5000
    assert all(10 <= i < 1000 for i in a.input_ids)
    assert a.input_ids != b.input_ids and a.input_ids[0] != b.input_ids[0]
    assert a.input_ids[-16:] == b.input_ids[-16:]  # the task's fixed "question" suffix
    assert a.input_ids[-16:] != c.input_ids[-16:]
    assert token_id_prompt("needle", 5000, 0, 1, vocab_size=1000) == a
    with pytest.raises(ValueError):
        token_id_prompt("needle", 10, 0, 1)

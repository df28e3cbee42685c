"""The simulator as a stand-in for sglang's OpenAI server: `/v1/chat/completions` (streaming and
not), `/v1/completions` and `/v1/models`, driven by the real `openai` client library; text
counted by a tokenizer (the model folder's tokenizer.json when it has one), never as UTF-8 bytes."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import httpx
import pytest

from harness.sim.testing import MODELS, SimProcess
from harness.sim.tokens import SimTokenizer, approx_encode, chat_prompt

openai = pytest.importorskip("openai")  # the test extra brings it (pyproject [test])

VOCAB = json.loads((MODELS / "llama-tiny" / "config.json").read_text())["vocab_size"]
PROSE = (
    "HiCache keeps the KV cache of long prompts in host memory, so that a prompt evicted from the "
    "GPU comes back by a copy instead of a recompute. "
) * 20
MESSAGES = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": PROSE}]


@pytest.fixture(scope="module")
def sim():
    with SimProcess(["--enable-cache-report", "--served-model-name", "tiny-sim"], time_scale=0.01) as s:
        yield s


def _client(sim: SimProcess):
    return openai.OpenAI(base_url=sim.url + "/v1", api_key="none", max_retries=0, timeout=30)


def test_text_is_counted_as_tokens_not_bytes():
    ids = approx_encode(PROSE, VOCAB)
    words = len(PROSE.split())
    assert 1.0 * words <= len(ids) <= 1.5 * words  # BPE-like; UTF-8 bytes would be ~6 a word
    assert len(ids) < len(PROSE.encode()) / 4
    # a shared text prefix is a shared id prefix: the prefix cache sees it
    assert approx_encode(PROSE + " and more", VOCAB)[: len(ids) - 1] == ids[:-1]
    assert all(3 <= t < VOCAB for t in ids)


def test_chat_completion_through_the_openai_client(sim):
    client = _client(sim)
    r = client.chat.completions.create(model="tiny-sim", messages=MESSAGES, max_tokens=7, temperature=0)
    assert r.object == "chat.completion" and r.model == "tiny-sim"
    (choice,) = r.choices
    assert choice.message.role == "assistant" and isinstance(choice.message.content, str) and choice.message.content
    assert choice.finish_reason == "length"
    assert r.usage.completion_tokens == 7
    assert r.usage.prompt_tokens == len(approx_encode(chat_prompt(MESSAGES), VOCAB))
    assert r.usage.total_tokens == r.usage.prompt_tokens + 7


def test_streamed_chat_is_the_same_answer_in_chunks_with_usage_last(sim):
    client = _client(sim)
    whole = client.chat.completions.create(model="tiny-sim", messages=MESSAGES, max_tokens=6, temperature=0)
    stream = client.chat.completions.create(
        model="tiny-sim",
        messages=MESSAGES,
        max_tokens=6,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    assert all(c.object == "chat.completion.chunk" for c in chunks)
    content = [c for c in chunks if c.choices]
    assert content[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in content) == whole.choices[0].message.content
    assert content[-1].choices[0].finish_reason == "length"
    last = chunks[-1]
    assert last.choices == [] and last.usage.completion_tokens == 6
    assert last.usage.prompt_tokens == whole.usage.prompt_tokens
    # the second ask of the same prompt is served from the cache, and says so
    assert last.usage.prompt_tokens_details.cached_tokens > 0


def test_completions_and_models_through_the_openai_client(sim):
    client = _client(sim)
    (model,) = client.models.list().data
    assert model.id == "tiny-sim" and model.owned_by == "sglang"
    r = client.completions.create(model="tiny-sim", prompt=PROSE, max_tokens=3)
    assert r.object == "text_completion" and r.usage.completion_tokens == 3
    assert r.usage.prompt_tokens == len(approx_encode(PROSE, VOCAB))
    streamed = list(client.completions.create(model="tiny-sim", prompt=PROSE, max_tokens=3, stream=True))
    assert streamed and all(c.object == "text_completion" for c in streamed)


def test_a_bad_chat_request_is_a_400_the_client_raises(sim):
    with pytest.raises(openai.BadRequestError):
        _client(sim).chat.completions.create(model="tiny-sim", messages=[], max_tokens=2)


def _tiny_tokenizer(folder: Path) -> int:
    """A byte-level BPE tokenizer trained on the test's text, saved as the folder's
    tokenizer.json; its vocabulary size (a few hundred: smaller than config.json's 32000)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=600, special_tokens=["<s>", "</s>", "<unk>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator([PROSE, chat_prompt(MESSAGES)], trainer)
    tok.save(str(folder / "tokenizer.json"))
    return tok.get_vocab_size()


def test_the_model_folder_s_tokenizer_counts_the_text(tmp_path):
    pytest.importorskip("tokenizers")
    folder = tmp_path / "llama-tiny-tok"
    folder.mkdir()
    shutil.copy(MODELS / "llama-tiny" / "config.json", folder / "config.json")
    vocab = _tiny_tokenizer(folder)
    assert 300 < vocab < VOCAB
    expected = SimTokenizer(VOCAB, folder)
    assert expected.kind.startswith("tokenizer.json")
    n = len(expected.encode(chat_prompt(MESSAGES)))
    assert n != len(approx_encode(chat_prompt(MESSAGES), VOCAB))
    with SimProcess(model=str(folder), time_scale=0.01) as sim:
        r = _client(sim).chat.completions.create(model="m", messages=MESSAGES, max_tokens=2)
        assert r.usage.prompt_tokens == n
        info = httpx.get(sim.url + "/get_model_info", timeout=10).json()
        assert info["simulated_tokenizer"].startswith("tokenizer.json")
        # what it generates decodes: ids within the tokenizer's vocabulary, not config.json's
        out = httpx.post(
            sim.url + "/generate", json={"input_ids": [5] * 40, "sampling_params": {"max_new_tokens": 64}}, timeout=30
        ).json()
        assert len(out["output_ids"]) == 64 and max(out["output_ids"]) < vocab

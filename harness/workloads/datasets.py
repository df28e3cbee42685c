"""Requests from the local files people benchmark with: ShareGPT conversations, long-document QA
(LooGLE, LongBench), mooncake-style traces; a tokenizer from local files. Nothing is downloaded:
a path that is not there is an error naming it.

Formats (`load_dataset(fmt, path)` → `DatasetRequest` list, in file order):

- ``sharegpt``: a JSON list of ``{"conversations": [{"from": "human", "value": ...},
  {"from": "gpt", "value": ...}, ...]}`` (``conversation`` also read). The first human turn is
  the prompt, the reply after it sets the output length (as sglang's bench_serving samples it);
  conversations with fewer than two turns or not opening with a human turn are skipped.
- ``doc_qa``: JSON lines (or a JSON list) of long documents with questions. LooGLE rows
  (``{"input": document, "qa_pairs": [{"Q": ..., "A": ...}, ...]}``, ``qa_pairs`` also as the
  dataset's Python-literal string, read with ``ast.literal_eval``, never ``eval``); LongBench rows
  (``{"context": document, "input": question, "answers": [...]}``); LongBench v2 rows
  (``{"context", "question", "choice_A".."choice_D", "answer"}``). Every question is one request
  whose prompt is the document then the question, as two parts tokenized separately, so the
  questions on one document share exactly its tokens as a prefix (shared-prefix reuse: the first
  question computes the document, the others should find it cached). Rows with the same
  document text are one document.
- ``mooncake``: JSON lines ``{"timestamp": ms, "input_length": n, "output_length": m,
  "hash_ids": [...]}`` (Mooncake's FAST'25 traces, AIPerf's trace replay). Each hash id stands for
  one block of ``block_tokens`` tokens (512 in Mooncake's traces); requests that share leading
  hash ids share that prefix (`trace_input_ids`). Sorted by timestamp (stable).

Tokenizers: `load_text_tokenizer(path)` reads a ``tokenizer.json`` (the ``tokenizers`` package,
the ``[text]`` extra) or a Hugging Face model folder (through `harness.core.tokenizers.load_tokenizer`),
local files only; `WordIds` makes token ids from the words of a text when there is no tokenizer
(deterministic, lengths approximate) — the workload says so on the console when it does.
"""

from __future__ import annotations

import ast
import hashlib
import json
import math
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from harness.core import bounds
from harness.core.errors import BadInput
from harness.core.optional import require
from harness.core.tokenizers import load_tokenizer
from harness.workloads.prompts import FIRST_REGULAR_ID, derive_seed

FORMATS = ("sharegpt", "doc_qa", "mooncake")
MOONCAKE_BLOCK_TOKENS = 512  # tokens per hash id in Mooncake's traces
MAX_FILE_BYTES = 4 << 30  # a dataset file larger than this is refused, not read into memory


MAX_TRACE_SPAN_MS = (
    bounds.TRACE_SPAN_DAYS * 86_400_000
)  # a trace's last timestamp after its first (mooncake's span an hour)


class DatasetError(BadInput, ValueError):
    """A dataset file that cannot be read as its format; the message names the file (and row)."""


@dataclass(frozen=True)
class DatasetRequest:
    """One request of a dataset. Text datasets: ``parts`` (tokenized one by one and joined; a
    shared document first) and ``reply`` (the dataset's answer: the output length). Traces:
    ``timestamp_ms``, ``input_length``, ``output_length`` and ``hash_ids``. ``group``: the
    document a question is about (doc_qa)."""

    index: int
    parts: tuple[str, ...] = ()
    reply: str | None = None
    timestamp_ms: float | None = None
    input_length: int | None = None
    output_length: int | None = None
    hash_ids: tuple[int, ...] = ()
    group: int | None = None


# -------------------------------------------------------------------------------------- files


def _read_text(path: str | Path) -> str:
    p = Path(path)
    if p.exists() and not p.is_file():  # a folder, a FIFO (it would block), a device (/dev/zero never ends)
        raise DatasetError(f"{p}: not a regular file")
    if not p.is_file():
        raise DatasetError(
            f"{p}: no such file (datasets are never downloaded: put the file there, see docs/scenario-format.md)"
        )
    if p.stat().st_size > MAX_FILE_BYTES:
        raise DatasetError(f"{p}: {p.stat().st_size:,} bytes, more than {MAX_FILE_BYTES:,}")
    try:
        return p.read_text(encoding="utf-8-sig")  # a byte-order mark (Windows editors) is no text
    except UnicodeDecodeError as exc:
        raise DatasetError(f"{p}: not UTF-8 text ({exc})") from None


def _json(text: str, where: str, what: str = "not valid JSON") -> Any:
    """``json.loads``; DatasetError naming ``where`` for malformed JSON and for nesting deeper than
    the interpreter's recursion limit (RecursionError escaped every handler before)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise DatasetError(f"{where}: {what} ({exc})") from None
    except RecursionError:
        raise DatasetError(f"{where}: {what} (nested too deep to read)") from None


def _unicode(text: str, where: str, key: str) -> str:
    """``text``, refused when it holds a lone surrogate (JSON's ``"\\ud800"``): no encoder can
    send it (a UnicodeEncodeError crashed the run, exit 3)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise DatasetError(f"{where}: {key} is not valid Unicode text ({exc.reason} at {exc.start})") from None
    return text


def _rows(path: str | Path) -> list[Any]:
    """A JSON list, or JSON lines (blank lines skipped)."""
    text = _read_text(path)
    stripped = text.lstrip()
    if stripped.startswith("["):
        return list(_json(text, str(path)))
    rows = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        rows.append(_json(line, f"{path}:{n}", "not a JSON line"))
    return rows


def load_sharegpt(path: str | Path) -> list[DatasetRequest]:
    """ShareGPT conversations: the first human turn and the reply after it."""
    data = _json(_read_text(path), str(path))
    if not isinstance(data, list):
        raise DatasetError(f"{path}: expected a JSON list of conversations, got {type(data).__name__}")
    out = []
    for i, row in enumerate(data):
        conv = row.get("conversations", row.get("conversation")) if isinstance(row, dict) else None
        if not isinstance(conv, list) or len(conv) < 2:
            continue
        first, reply = conv[0], conv[1]
        if not (isinstance(first, dict) and isinstance(reply, dict)) or first.get("from") != "human":
            continue
        prompt, answer = first.get("value"), reply.get("value")
        if not isinstance(prompt, str) or not prompt or not isinstance(answer, str):
            continue
        where = f"{path} conversation {i + 1}"
        out.append(
            DatasetRequest(index=i, parts=(_unicode(prompt, where, "value"),), reply=_unicode(answer, where, "reply"))
        )
    return out


def _qa_pairs(value: Any, where: str) -> list[tuple[str, str | None]]:
    if isinstance(value, str):
        if value.strip() in ("", "none"):
            return []
        try:
            value = ast.literal_eval(value)
        except (ValueError, SyntaxError, RecursionError, MemoryError) as exc:  # nested past the parser's limit
            raise DatasetError(f"{where}: qa_pairs is neither a list nor a Python literal ({exc})") from None
    if not isinstance(value, list):
        raise DatasetError(f'{where}: qa_pairs must be a list of {{"Q": ..., "A": ...}}')
    out = []
    for qa in value:
        if isinstance(qa, dict):
            q = qa.get("Q", qa.get("question"))
            a = qa.get("A", qa.get("answer"))
            if isinstance(q, str) and q:
                out.append((q, a if isinstance(a, str) else None))
    return out


def _answer(value: Any) -> str | None:
    if isinstance(value, list):
        value = next((v for v in value if isinstance(v, str)), None)
    return value if isinstance(value, str) else None


DOC_TEMPLATE = "{document}\n\n"
QUESTION_TEMPLATE = "Question: {question}\nAnswer:"


def load_doc_qa(path: str | Path) -> list[DatasetRequest]:
    """Long-document QA (LooGLE, LongBench, LongBench v2): one request per question, the
    document first (see the module docstring)."""
    out: list[DatasetRequest] = []
    docs: dict[str, int] = {}
    for n, row in enumerate(_rows(path), 1):
        where = f"{path} row {n}"
        if not isinstance(row, dict):
            raise DatasetError(f"{where}: expected a JSON object")
        if "qa_pairs" in row:  # LooGLE
            document = row.get("input", row.get("context"))
            pairs = _qa_pairs(row["qa_pairs"], where)
        elif "question" in row:  # LongBench v2
            document = row.get("context")
            choices = "".join(f"\n{c}. {row[f'choice_{c}']}" for c in "ABCD" if isinstance(row.get(f"choice_{c}"), str))
            pairs = [(str(row["question"]) + choices, _answer(row.get("answer")))]
        else:  # LongBench
            document = row.get("context")
            q = row.get("input")
            pairs = [(q, _answer(row.get("answers")))] if isinstance(q, str) and q else []
        if not isinstance(document, str) or not document:
            raise DatasetError(f'{where}: no document (expected "input" with qa_pairs, or "context")')
        group = docs.setdefault(_unicode(document, where, "the document"), len(docs))
        for q, a in pairs:
            q, a = _unicode(q, where, "a question"), None if a is None else _unicode(a, where, "an answer")
            out.append(
                DatasetRequest(
                    index=len(out),
                    parts=(DOC_TEMPLATE.format(document=document), QUESTION_TEMPLATE.format(question=q)),
                    reply=a,
                    group=group,
                )
            )
    return out


def _int_field(row: dict, key: str, where: str, *, minimum: int = 0, default: int | None = None) -> int:
    """A whole number from ``minimum`` to `bounds.DATASET_MAX_TOKENS` (``Infinity`` crashed
    validate with an OverflowError, 1e300 became a 10^300-token request)."""
    v = row.get(key, default)
    top = bounds.DATASET_MAX_TOKENS
    if (
        isinstance(v, bool)
        or not isinstance(v, (int, float))
        or (isinstance(v, float) and not math.isfinite(v))
        or v != int(v)
        or not minimum <= v <= top
    ):
        raise DatasetError(f"{where}: {key} must be a whole number from {minimum} to {top:,}, got {_short(v)}")
    return int(v)


def _short(v: Any) -> str:
    text = repr(v)
    return text if len(text) <= 40 else text[:37] + "..."


def load_mooncake(path: str | Path) -> list[DatasetRequest]:
    """A mooncake-style trace, sorted by timestamp (ms)."""
    out = []
    for n, row in enumerate(_rows(path), 1):
        where = f"{path} row {n}"
        if not isinstance(row, dict):
            raise DatasetError(f"{where}: expected a JSON object")
        ts = row.get("timestamp", 0)
        if isinstance(ts, bool) or not isinstance(ts, (int, float)) or not 0 <= ts <= 2**53:
            # NaN passed `ts < 0` and crashed the replay's clock; a 400-digit one float() (exit 3)
            raise DatasetError(f"{where}: timestamp must be a finite number of ms from 0 to 2^53, got {_short(ts)}")
        hashes = row.get("hash_ids", [])
        if not isinstance(hashes, list) or not all(isinstance(h, int) and not isinstance(h, bool) for h in hashes):
            raise DatasetError(f"{where}: hash_ids must be a list of integers")
        if len(hashes) > bounds.DATASET_MAX_HASH_IDS:  # 2 million of them hung validate
            raise DatasetError(
                f"{where}: {len(hashes):,} hash_ids, more than {bounds.DATASET_MAX_HASH_IDS:,} (one per block of a prompt)"
            )
        out.append(
            DatasetRequest(
                index=n - 1,
                timestamp_ms=float(ts),
                input_length=_int_field(row, "input_length", where, minimum=1),
                output_length=_int_field(row, "output_length", where, minimum=1, default=1),
                hash_ids=tuple(hashes),
            )
        )
    out.sort(key=lambda r: r.timestamp_ms or 0.0)
    if out:
        span_ms = (out[-1].timestamp_ms or 0.0) - (out[0].timestamp_ms or 0.0)
        if span_ms > MAX_TRACE_SPAN_MS:  # a replay on its own clock would wait that long
            raise DatasetError(
                f"{path} row {out[-1].index + 1}: timestamp {out[-1].timestamp_ms:g} ms is {span_ms / 86_400_000:,.0f}"
                f" days after the first row's; a trace spans at most {MAX_TRACE_SPAN_MS / 86_400_000:g} days"
                " (timestamps are ms from the trace's start)"
            )
    return out


_LOADERS: dict[str, Callable[[str | Path], list[DatasetRequest]]] = {
    "sharegpt": load_sharegpt,
    "doc_qa": load_doc_qa,
    "mooncake": load_mooncake,
}


def load_dataset(fmt: str, path: str | Path) -> list[DatasetRequest]:
    """Every request of a local dataset file of format ``fmt`` (one of `FORMATS`)."""
    if fmt not in _LOADERS:
        raise DatasetError(f"unknown dataset format {fmt!r}: expected one of {', '.join(FORMATS)}")
    return _LOADERS[fmt](path)


def file_digest(path: str | Path) -> str:
    """sha256 of a dataset file (what a run read, for its log)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


# ---------------------------------------------------------------------------------- tokenizers


def load_text_tokenizer(path: str | Path | None) -> Any | None:
    """A tokenizer from local files: ``path`` is a ``tokenizer.json`` or a folder with one (or
    another Hugging Face tokenizer); None when there is none there. Needs the ``tokenizers``
    package (the ``[text]`` extra) for a ``tokenizer.json``."""
    if not path:
        return None
    p = Path(path).expanduser()
    if p.is_file():
        Tokenizer = require("tokenizers", "text", "a dataset's tokenizer.json").Tokenizer
        try:
            return _Encoded(Tokenizer.from_file(str(p)))
        except Exception as exc:  # noqa: BLE001 - a file that is not a tokenizer
            raise DatasetError(f"{p}: not a tokenizer.json ({exc})") from None
    return load_tokenizer(p)


class _Encoded:
    """``encode`` returning ``list[int]`` over a ``tokenizers.Tokenizer``."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def encode(self, text: str) -> list[int]:
        return [int(i) for i in self.inner.encode(text).ids]


_WORD = re.compile(r"\w+|[^\w\s]")


class WordIds:
    """Token ids from the words (and punctuation marks) of a text, for a run without a
    tokenizer: each word maps to a fixed id in [3, vocab) by its hash, so equal texts give equal
    ids (prefix sharing stays exact) and lengths follow the word count, not a real tokenizer's."""

    def __init__(self, vocab_size: int) -> None:
        self.span = max(1, vocab_size - FIRST_REGULAR_ID)

    def encode(self, text: str) -> list[int]:
        return [
            FIRST_REGULAR_ID + int.from_bytes(hashlib.blake2b(w.encode(), digest_size=8).digest(), "little") % self.span
            for w in _WORD.findall(text)
        ]


class PartIds:
    """Token ids of request parts, each distinct part encoded once (a document shared by many
    questions is tokenized once)."""

    def __init__(self, encoder: Any) -> None:
        self.encoder = encoder
        self._memo: dict[str, list[int]] = {}

    def of(self, part: str) -> list[int]:
        ids = self._memo.get(part)
        if ids is None:
            ids = self._memo[part] = list(self.encoder.encode(part))
        return ids

    def length(self, req: DatasetRequest) -> int:
        return sum(len(self.of(p)) for p in req.parts)

    def ids(self, req: DatasetRequest) -> list[int]:
        out: list[int] = []
        for p in req.parts:
            out += self.of(p)
        return out


# -------------------------------------------------------------------------------------- traces


def trace_block(hash_id: int, block_tokens: int, vocab_size: int, salt: object) -> list[int]:
    """The ``block_tokens`` ids a trace's hash id stands for: seeded by (salt, hash id), so equal
    hash ids are equal tokens and different ones differ."""
    rng = np.random.default_rng(derive_seed("trace-block", salt, hash_id))
    return rng.integers(FIRST_REGULAR_ID, vocab_size, size=block_tokens).tolist()


def trace_input_ids(req: DatasetRequest, block_tokens: int, vocab_size: int, salt: object) -> list[int]:
    """A trace request's ``input_length`` ids: its hash ids' blocks in order, cut to the length;
    a length past the blocks is filled with ids of its own (not shared)."""
    n = req.input_length or 0
    out: list[int] = []
    for h in req.hash_ids:
        if len(out) >= n:
            break
        out += trace_block(h, block_tokens, vocab_size, salt)
    if len(out) < n:
        rng = np.random.default_rng(derive_seed("trace-tail", salt, req.index))
        out += rng.integers(FIRST_REGULAR_ID, vocab_size, size=n - len(out)).tolist()
    return out[:n]


def trace_offsets_ns(requests: Sequence[DatasetRequest], speed: float = 1.0) -> list[int]:
    """Send offsets (ns from the first request) of trace requests on the trace's own clock,
    ``speed`` times as fast (2: twice as fast)."""
    if not requests:
        return []
    t0 = requests[0].timestamp_ms or 0.0
    return [round(((r.timestamp_ms or 0.0) - t0) * 1e6 / speed) for r in requests]


def shuffled(items: Iterable[DatasetRequest], seed: int) -> list[DatasetRequest]:
    """The requests in a seeded random order."""
    out = list(items)
    np.random.default_rng(derive_seed("dataset-order", seed)).shuffle(out)  # type: ignore[arg-type]
    return out

"""A model's tokenizer from its local files only (never a download), as ``encode`` / ``decode``
over ids: the datasets' text prompts and the quality arm's fitted prompts read it."""

from __future__ import annotations

from pathlib import Path
from typing import Any


class Tokenizer:
    """``encode(text) -> list[int]`` / ``decode(ids) -> str`` over HF ``tokenizers`` or
    ``transformers`` tokenizers (or anything whose ``encode`` returns ids or an Encoding)."""

    def __init__(self, inner: Any):
        self.inner = inner

    def encode(self, text: str) -> list[int]:
        out = self.inner.encode(text)
        ids = getattr(out, "ids", out)  # tokenizers.Encoding has .ids
        return [int(i) for i in ids]

    def decode(self, ids: list[int]) -> str:
        dec = getattr(self.inner, "decode", None)
        if dec is None:
            return ""
        try:
            return str(dec(list(ids), skip_special_tokens=True))
        except TypeError:
            return str(dec(list(ids)))

    @property
    def vocab_size(self) -> int | None:
        for name in ("get_vocab_size", "__len__"):
            f = getattr(self.inner, name, None)
            if callable(f):
                try:
                    return int(f())
                except Exception:  # noqa: BLE001 - best effort
                    pass
        return None


def as_tokenizer(obj: Any) -> Tokenizer:
    """Wrap a tokenizer object (HF ``tokenizers.Tokenizer``, ``transformers`` tokenizer, or an
    object with ``encode(text)``) so that ``encode`` returns ``list[int]``."""
    if isinstance(obj, Tokenizer):
        return obj
    if not callable(getattr(obj, "encode", None)):
        raise TypeError(f"{type(obj).__name__} has no encode(text) method")
    return Tokenizer(obj)


def load_tokenizer(model_path: str | Path | None) -> Tokenizer | None:
    """The model's tokenizer from local files only (``tokenizer.json`` through ``tokenizers``,
    else ``transformers.AutoTokenizer`` with ``local_files_only``), or None if there is none."""
    if not model_path:
        return None
    path = Path(model_path)
    tj = path / "tokenizer.json"
    if tj.is_file():
        try:
            from tokenizers import Tokenizer as HFTokenizer

            return Tokenizer(HFTokenizer.from_file(str(tj)))
        except Exception:  # noqa: BLE001 - fall through to transformers
            pass
    if path.is_dir() and any((path / f).exists() for f in ("tokenizer_config.json", "tokenizer.model", "vocab.json")):
        try:
            from transformers import AutoTokenizer

            return Tokenizer(AutoTokenizer.from_pretrained(str(path), local_files_only=True))
        except Exception:  # noqa: BLE001 - no usable tokenizer
            return None
    return None

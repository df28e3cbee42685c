"""Every key a scenario may hold -- every field of every block the `Scenario` model reaches,
each workload kind's config included -- is written in docs/scenario-format.md, in its YAML
example (``key:``, also in a flow map or a commented-out line) or in the text as a ``key`` in
backticks, or named in a YAML comment's list of fields ("every workload also takes: ...")."""

from __future__ import annotations

import re
import typing
from pathlib import Path

from pydantic import BaseModel

from harness.scenario.models import Scenario

DOC = Path(__file__).resolve().parents[3] / "docs" / "scenario-format.md"


def _models(tp, seen: set) -> set:
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        if tp not in seen:
            seen.add(tp)
            for f in tp.model_fields.values():
                _models(f.annotation, seen)
    else:
        for arg in typing.get_args(tp):
            _models(arg, seen)
    return seen


def scenario_keys() -> dict[str, set[str]]:
    """{key: the blocks (model names) that have it} of every block a scenario may hold."""
    keys: dict[str, set[str]] = {}
    for model in _models(Scenario, set()):
        for name, field in model.model_fields.items():
            keys.setdefault(field.alias or name, set()).add(model.__name__)
    return keys


def _documented(key: str, doc: str) -> bool:
    k = re.escape(key)
    if re.search(rf"(?<![\w-]){k}:|`{k}`", doc):
        return True
    comments = "\n".join(line.split("#", 1)[1] for line in doc.splitlines() if "#" in line)
    return re.search(rf"(?<![\w-]){k}(?![\w-])", comments) is not None


def undocumented(keys, doc: str) -> list[str]:
    return sorted(k for k in keys if not _documented(k, doc))


def test_every_scenario_key_is_documented():
    keys = scenario_keys()
    assert len(keys) > 100 and "prefill_tok_s" in keys and "flush_between_points" in keys  # the walk reached the blocks
    assert undocumented(keys, DOC.read_text(encoding="utf-8")) == []


def test_a_key_only_mentioned_in_passing_is_not_documented():
    assert undocumented({"gpu_pool_tokens": set()}, "a gpu_pool_tokens figure\n") == ["gpu_pool_tokens"]
    assert undocumented({"gpu_pool_tokens": set()}, "  gpu_pool_tokens: null  # the pool\n") == []

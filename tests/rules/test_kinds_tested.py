"""Every workload kind has a behaviour test: a test of tests/unit/workloads/ or tests/integration/
that sends it (``kind="<name>"``, ``kind: <name>`` or ``"kind": "<name>"``) -- validation and
estimate tests do not count."""

from __future__ import annotations

import re
from pathlib import Path

from harness.workloads import kinds

TESTS = Path(__file__).resolve().parents[1]
BEHAVIOUR_DIRS = (TESTS / "unit" / "workloads", TESTS / "integration")


def untested(names, texts: list[str]) -> list[str]:
    def sent(kind: str) -> bool:
        k = re.escape(kind)
        pattern = rf"kind\s*=\s*[\"']{k}[\"']|kind:\s*{k}\b|[\"']kind[\"']:\s*[\"']{k}[\"']"
        return any(re.search(pattern, t) for t in texts)

    return sorted(n for n in names if not sent(n))


def test_every_kind_has_a_behaviour_test():
    texts = [p.read_text(encoding="utf-8") for d in BEHAVIOUR_DIRS for p in d.rglob("test_*.py")]
    assert len(kinds()) >= 10 and texts
    assert untested(kinds(), texts) == []


def test_a_kind_named_only_in_passing_is_untested():
    assert untested(["decode"], ["def test_x():\n    assert 'decode' in s\n"]) == ["decode"]
    assert untested(["decode"], ['workload(kind="decode", batch=2)']) == []

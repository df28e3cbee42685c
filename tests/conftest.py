"""Shared fixtures and helpers of the test suite (one home: test modules never import each other)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

GOLDEN_RUNS = Path(__file__).parent / "golden" / "runs"
GOLDEN_EXPECTED = Path(__file__).parent / "golden" / "expected"


@pytest.fixture
def golden_run(tmp_path):
    """Copy a committed golden run folder (tests/golden/runs/<name>: healthy, regressed, merged,
    interrupted) into a temporary results tree and return its path: tests read real run files
    instead of starting servers, and may write next to them (report, comparison.json)."""

    def copy(name: str) -> Path:
        dst = tmp_path / "results" / "golden" / name
        shutil.copytree(GOLDEN_RUNS / name, dst)
        return dst

    return copy

"""`kinds()` finds every module of harness/workloads/kinds/ and refuses one that is no kind (a
module without ``KIND`` was skipped silently: its workloads then failed to validate as unknown)."""

from __future__ import annotations

import importlib

import pytest

from harness.core.errors import Broken
from harness.workloads import kinds

kinds_package = importlib.import_module("harness.workloads.kinds")  # the package (the name is also the function)


@pytest.fixture
def extra_module(tmp_path, monkeypatch):
    monkeypatch.setattr(kinds_package, "__path__", [*kinds_package.__path__, str(tmp_path)])
    kinds.cache_clear()
    yield tmp_path
    kinds.cache_clear()


def test_a_kind_module_without_kind_is_refused(extra_module):
    (extra_module / "zz_forgot.py").write_text("X = 1\n")
    with pytest.raises(Broken, match="zz_forgot declares no KIND"):
        kinds()


def test_a_kind_module_whose_kind_is_something_else_is_refused(extra_module):
    (extra_module / "zz_wrong.py").write_text("KIND = 'decode'\n")
    with pytest.raises(Broken, match="zz_wrong.KIND is a str"):
        kinds()

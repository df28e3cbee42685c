"""A package's public names loaded on first use: so that importing one light module of a package
(`harness validate` reading declarations) does not load the package's heavy ones."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_getattr(module_globals: dict[str, Any], homes: Mapping[str, str]) -> Callable[[str], Any]:
    """The module ``__getattr__`` that imports ``name`` from ``homes[name]`` (a module path) on
    first use and keeps it in ``module_globals``."""

    def __getattr__(name: str) -> Any:
        if name in homes:
            value = getattr(importlib.import_module(homes[name]), name)
            module_globals[name] = value
            return value
        raise AttributeError(f"module {module_globals['__name__']!r} has no attribute {name!r}")

    return __getattr__

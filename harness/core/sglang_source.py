"""An sglang source checkout (a build's ``sglang_source``): where its package is and whether it is
one. A leaf: `harness validate` asks it without loading the server's process code (or httpx)."""

from __future__ import annotations

from pathlib import Path


def source_package_dir(source: Path) -> Path:
    """The folder holding the ``sglang`` package in a checkout: ``python/`` of a git checkout of
    sglang (``python/sglang``), else the folder itself (``sglang/`` directly in it)."""
    return source / "python" if (source / "python" / "sglang").is_dir() else source


def source_problem(source: Path) -> str | None:
    """Why ``source`` is not a checkout of sglang, or None (`validate`, the dry run and the run's
    build check, `harness.run.builds`, all ask this)."""
    if not source.exists():
        return f"sglang_source {source} does not exist"
    if not source.is_dir():
        return f"sglang_source {source} is not a directory"
    if not (source_package_dir(source) / "sglang" / "__init__.py").is_file():
        return (
            f"sglang_source {source} is not a checkout of sglang: neither python/sglang/__init__.py "
            f"nor sglang/__init__.py is in it"
        )
    return None

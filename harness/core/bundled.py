"""The example scenarios the package ships, so that a wheel alone can run the smoke scenario.

The repository's ``scenarios/*.yaml`` and the model configs they name (``scenarios/models/*/
config.json``) are packaged as ``harness.bundled_scenarios`` (pyproject.toml maps that package to
the ``scenarios/`` folder: one home). ``harness run scenarios/sim_smoke.yaml`` (or
``sim_smoke.yaml``) in a folder that has no such file reads the bundled copy; its relative
``model_path`` then resolves next to it, as in the repository. A file that exists always wins.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

PACKAGE = "harness.bundled_scenarios"


def bundled_dir() -> Path | None:
    """Where the bundled scenarios are: the installed package, or in a source checkout (an
    editable install cannot map a folder without ``__init__.py``) its ``scenarios/`` folder;
    None when there are none."""
    try:  # a folder without __init__.py: a namespace package, so its search locations
        spec = importlib.util.find_spec(PACKAGE)
    except (ImportError, ValueError):
        spec = None
    found = [Path(p) for p in (spec.submodule_search_locations or [])] if spec is not None else []
    path = next((p for p in found if p.is_dir()), None)
    if path is None:
        path = Path(__file__).resolve().parents[2] / "scenarios"  # a source checkout
    return path if path.is_dir() else None


def resolve_scenario_path(path: str | Path) -> tuple[Path, bool]:
    """(the file to read, whether it is the bundled copy). A path that exists is itself; a missing
    ``scenarios/<name>.yaml`` or bare ``<name>.yaml`` is the bundled ``<name>.yaml`` when the
    package ships one; anything else is returned unchanged (the loader then says it is missing)."""
    p = Path(path)
    if p.exists():
        return p, False
    if p.parent.name not in ("", "scenarios") or len(p.parts) > 2:
        return p, False
    root = bundled_dir()
    if root is None:
        return p, False
    candidate = root / p.name
    return (candidate, True) if candidate.is_file() else (p, False)

"""Workload kinds: one module each (``harness/workloads/kinds/<kind>.py`` exporting ``KIND``).

``kinds()`` finds them by scanning ``harness.workloads.kinds``, so adding a kind is adding its module: the
scenario's ``workloads`` union, the summary's derived figures, compare, the report and the
history all read the declarations (``harness.workloads.kind``). Nothing else names a kind.
"""

from __future__ import annotations

import functools
import importlib
import pkgutil
from collections.abc import Iterable, Mapping
from typing import Any

from harness.core.errors import Broken
from harness.workloads import kinds as _kinds_package
from harness.workloads.config import WorkloadConfig
from harness.workloads.kind import Derived, WorkloadKind

# Public names of the running side, loaded on first use (they pull in the HTTP client).
_RUNNING = {
    "WorkloadContext": "context",
    "WorkloadScope": "context",
    "phase_label": "context",
    "WorkloadsOutcome": "sequence",
    "run_workloads": "sequence",
}


def __getattr__(name: str) -> Any:
    if name in _RUNNING:
        return getattr(importlib.import_module(f"{__name__}.{_RUNNING[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@functools.cache
def kinds() -> dict[str, WorkloadKind]:
    """{kind name: declaration} of every module in ``harness.workloads.kinds``, by name: each
    exports ``KIND`` (a module without one, or with another thing, is refused: `Broken`)."""
    found: dict[str, WorkloadKind] = {}
    for info in sorted(pkgutil.iter_modules(_kinds_package.__path__), key=lambda i: i.name):
        module = importlib.import_module(f"{_kinds_package.__name__}.{info.name}")
        try:
            declared = module.KIND  # a module of the kinds package is a kind: one without KIND is a bug
        except AttributeError:
            raise Broken(
                f"{module.__name__} declares no KIND (every module in harness/workloads/kinds/ is a kind)"
            ) from None
        if not isinstance(declared, WorkloadKind):
            raise Broken(f"{module.__name__}.KIND is a {type(declared).__name__}, not a WorkloadKind")
        found[declared.name] = declared
    _check_derived_names(found.values())
    return found


def _check_derived_names(declared: Iterable[WorkloadKind]) -> None:
    """One derived name means one thing: the same unit and direction in every kind."""
    seen: dict[str, Derived] = {}
    for k in declared:
        for d in k.derived:
            first = seen.setdefault(d.name, d)
            if (first.unit, first.higher_is_better) != (d.unit, d.higher_is_better):
                raise TypeError(
                    f"derived figure {d.name!r} is declared with different units or directions by two workload kinds"
                )


def derived_figures() -> dict[str, Derived]:
    """{name: declaration} of every derived figure of every kind (first declaration wins)."""
    out: dict[str, Derived] = {}
    for k in kinds().values():
        for d in k.derived:
            out.setdefault(d.name, d)
    return out


def workload_kinds(scenario_workloads: Any) -> dict[str, str]:
    """{workload name: kind} from a scenario's ``workloads`` list as parsed YAML (dicts) or as
    config models; a workload without a name is named after its kind. Unknown kinds are kept
    (an old run's file), entries that are not mappings are skipped."""
    out: dict[str, str] = {}
    for w in scenario_workloads or []:
        if isinstance(w, Mapping):
            kind, name = w.get("kind"), w.get("name")
        elif isinstance(w, WorkloadConfig):
            kind, name = w.kind, w.name  # type: ignore[attr-defined]  # kind: each kind's Literal
        else:
            continue
        if isinstance(kind, str):
            out[str(name or kind)] = kind
    return out


def kind_of(workload: str, names_to_kinds: Mapping[str, str]) -> WorkloadKind | None:
    """The declaration of a workload by its name (a run without a scenario: the name is the kind)."""
    return kinds().get(names_to_kinds.get(workload, workload))

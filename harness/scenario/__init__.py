"""Scenario YAML → typed ``Scenario``; variants resolved; config hashes; the JSON Schema.

One job: turn a scenario file (docs/scenario-format.md) into validated, typed objects, or into a
``ScenarioError`` whose lines each read ``FILE:LINE KEY.PATH: message``. The package, in the
order a file flows through it:

- ``errors``        ``ErrorItem`` / ``ScenarioError``
- ``values``        value types: ``TokenSize``, ``Check``, ``Threshold``, names, flags, env values
- ``models``        the typed blocks (pydantic, ``extra="forbid"``) and the resolved ``Variant``;
                    workload blocks come from each kind's module in ``harness/workloads/``
- ``expansion``     ``${VAR}`` / ``${VAR:-default}`` in every string value
- ``error_mapping`` pydantic errors → ``FILE:LINE KEY.PATH: message``
- ``checks``        cross-field checks
- ``variants``      explicit variants and matrix expansion → ``Variant``
- ``loading``       ``load_scenario`` / ``load_scenario_text``
- ``hashing``       ``scenario_hash``, ``variant_config_hash``, ``json_schema``

Public names are importable from ``harness.scenario`` as before; they load on first use, so
that ``harness.scenario.values`` (which workload configs import) pulls in nothing else.
"""

from __future__ import annotations

import importlib
from typing import Any

_HOME = {
    "ErrorItem": "errors",
    "ScenarioError": "errors",
    "TokenSize": "values",
    "Check": "values",
    "Threshold": "values",
    "resolve_tokens": "values",
    "parse_extra_args": "values",
    "SimOptions": "models",
    "Server": "models",
    "HiCache": "models",
    "VariantSpec": "models",
    "MatrixEntry": "models",
    "Variant": "models",
    "Workload": "models",
    "Sampling": "models",
    "Preflight": "models",
    "Quality": "models",
    "Expectations": "models",
    "Scenario": "models",
    "MEM_LAYOUTS": "models",
    "WRITE_POLICIES": "models",
    "IO_BACKENDS": "models",
    "CAUSES": "models",
    "QUALITY_TASKS": "models",
    "expand_env": "expansion",
    "load_scenario": "loading",
    "load_scenario_text": "loading",
    "variant_config_hash": "hashing",
    "scenario_hash": "hashing",
    "json_schema": "hashing",
}
__all__ = sorted(_HOME)


def __getattr__(name: str) -> Any:
    if name in _HOME:
        value = getattr(importlib.import_module(f"{__name__}.{_HOME[name]}"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

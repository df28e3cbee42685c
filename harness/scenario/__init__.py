"""Scenario YAML → typed ``Scenario``; variants resolved; config hashes; the JSON Schema.

One job: turn a scenario file (docs/scenario-format.md) into validated, typed objects, or into a
``ScenarioError`` whose lines each read ``FILE:LINE KEY.PATH: message``. The package, in the
order a file flows through it:

- ``models``        the typed blocks (pydantic, ``extra="forbid"``) and the resolved ``Variant``;
                    workload blocks come from each kind's module in ``harness/workloads/kinds/``
- ``expansion``     ``${VAR}`` / ``${VAR:-default}`` in every string value
- ``error_mapping`` pydantic errors → ``FILE:LINE KEY.PATH: message``
- ``checks``        cross-field checks
- ``variants``      explicit variants and matrix expansion → ``Variant``
- ``loading``       ``load_scenario`` / ``load_scenario_text``
- ``hashing``       ``scenario_hash``, ``variant_config_hash``, ``json_schema``

It is written in the words of ``harness.spec`` (``errors``: ``ErrorItem`` / ``ScenarioError``;
``values``: ``TokenSize``, ``Check``, ``Threshold``, names, flags, env values).

Public names are importable from ``harness.scenario`` as before; they load on first use, so
that ``harness.spec.values`` (which workload configs import) pulls in nothing else.
"""

from __future__ import annotations

from harness.core.lazy import lazy_getattr

_HOME = {
    "ErrorItem": "harness.spec.errors",
    "ScenarioError": "harness.spec.errors",
    "TokenSize": "harness.spec.values",
    "Check": "harness.spec.values",
    "Threshold": "harness.spec.values",
    "resolve_tokens": "harness.spec.values",
    "parse_extra_args": "harness.spec.values",
    "SimOptions": "harness.scenario.models",
    "Server": "harness.scenario.models",
    "HiCache": "harness.scenario.models",
    "VariantSpec": "harness.scenario.models",
    "MatrixEntry": "harness.scenario.models",
    "Variant": "harness.scenario.models",
    "Workload": "harness.scenario.models",
    "Sampling": "harness.scenario.models",
    "Preflight": "harness.scenario.models",
    "Quality": "harness.quality.config",
    "Expectations": "harness.scenario.models",
    "Scenario": "harness.scenario.models",
    "MEM_LAYOUTS": "harness.scenario.models",
    "WRITE_POLICIES": "harness.scenario.models",
    "IO_BACKENDS": "harness.scenario.models",
    "CAUSES": "harness.scenario.models",
    "expand_env": "harness.scenario.expansion",
    "load_scenario": "harness.scenario.loading",
    "load_scenario_text": "harness.scenario.loading",
    "variant_config_hash": "harness.scenario.hashing",
    "scenario_hash": "harness.scenario.hashing",
    "json_schema": "harness.scenario.hashing",
}
__all__ = sorted(_HOME)


__getattr__ = lazy_getattr(globals(), _HOME)

"""Every numeric scenario key declares a range and a unit beside itself (issue 26, item 2): the
JSON Schema `harness schema` prints holds ``minimum``, ``maximum`` (or an ``enum``) on every
numeric value and a ``unit`` on every numeric key; each default lies within its range; and
docs/scenario-format.md's "Units and ranges" table is the one `harness schema --ranges` prints.
A key added as a bare ``float``/``int`` (or the old ``PosFloat``-style types) turns this red."""

from __future__ import annotations

import math
from pathlib import Path

from pydantic import create_model

from harness.scenario.hashing import json_schema
from harness.scenario.ranges import numeric_keys, ranges_table
from harness.spec.numbers import ranged

DOC = Path(__file__).resolve().parents[2] / "docs" / "scenario-format.md"
NUMERIC = {"integer", "number"}


def _type_set(node: dict) -> set:
    t = node.get("type")
    return set(t if isinstance(t, list) else [t] if t else [])


def unbounded(schema: dict) -> list[str]:
    """Every place in the schema (models and their keys, walked without the free maps' values:
    sglang flags, env text, axis values) where a number has no range or a numeric key no unit."""
    problems: list[str] = []
    defs = schema.get("$defs", {})

    def numbers_in(node: dict, where: str, key_unit: str | None) -> bool:
        """Check every numeric alternative below ``node`` (not through $ref); True if any."""
        found = False
        unit = node.get("unit") or key_unit
        if _type_set(node) & NUMERIC or (
            "enum" in node and any(isinstance(v, (int, float)) and not isinstance(v, bool) for v in node["enum"])
        ):
            found = True
            if "enum" not in node and ("minimum" not in node or "maximum" not in node):
                problems.append(f"{where}: a number without minimum and maximum")
            if not unit:
                problems.append(f"{where}: a number without a unit")
        for k in ("anyOf", "oneOf", "allOf"):
            for q in node.get(k, []):
                found |= numbers_in(q, where, unit)
        if isinstance(node.get("items"), dict):
            found |= numbers_in(node["items"], f"{where}[]", unit)
        return found

    for name, model in [("Scenario", schema), *defs.items()]:
        for key, prop in model.get("properties", {}).items():
            numbers_in(prop, f"{name}.{key}", None)
    return problems


def test_every_numeric_key_declares_a_range_and_a_unit():
    schema = json_schema()
    assert unbounded(schema) == []
    keys = numeric_keys(schema)
    paths = {k.path for k in keys}
    # the walk reached every block: server, sim, hicache, each kind, quality, verdict, cost
    assert len(keys) > 150
    assert {"seed", "server.sim.time_scale", "variants[].hicache.ratio", "workloads[open_loop].rate"} <= paths
    assert {"workloads[soak].tolerance_per_h.swap_in_kib_s", "quality.lengths[]", "cost.gpu_hour_usd"} <= paths
    assert [k.path for k in keys if not k.declared] == []


def test_every_default_lies_within_its_range():
    outside = []

    def check(where: str, node: dict, default) -> None:
        if isinstance(default, bool) or not isinstance(default, (int, float)):
            return
        lo, hi = node.get("minimum"), node.get("maximum")
        if lo is None:
            lo = next((q.get("minimum") for q in node.get("anyOf", []) if "minimum" in q), None)
            hi = next((q.get("maximum") for q in node.get("anyOf", []) if "maximum" in q), None)
        if "enum" in node:
            if default not in node["enum"]:
                outside.append(f"{where}={default}")
        elif lo is None or hi is None or not lo <= default <= hi or not math.isfinite(default):
            outside.append(f"{where}={default} not in {lo}..{hi}")

    schema = json_schema()
    for name, model in [("Scenario", schema), *schema["$defs"].items()]:
        for key, prop in model.get("properties", {}).items():
            if "default" in prop:
                check(f"{name}.{key}", prop, prop["default"])
    assert outside == []


def test_a_key_without_a_range_or_unit_is_seen():
    bare = create_model(
        "Bare",
        plain=(float, 1.0),
        nounit=(int, 1),
        fine=(ranged(float, 0, 1, "fraction"), 0.5),
        listed=(list[float], []),
    )
    schema = {"properties": {"b": {"$ref": "#/$defs/Bare"}}, "$defs": {"Bare": bare.model_json_schema()}}
    problems = unbounded(schema)
    assert "Bare.plain: a number without minimum and maximum" in problems
    assert "Bare.nounit: a number without a unit" in problems
    assert "Bare.listed[]: a number without a unit" in problems
    assert not any(p.startswith("Bare.fine") for p in problems)
    rows = {k.path: k for k in numeric_keys(schema)}
    assert not rows["b.plain"].declared and rows["b.fine"].declared and not rows["b.listed[]"].declared


def test_the_docs_table_is_the_one_harness_schema_prints():
    doc = DOC.read_text(encoding="utf-8")
    section = doc.split("## Units and ranges", 1)[1].split("\n## ", 1)[0]
    table = section.split("```\n", 1)[1].split("```", 1)[0].rstrip("\n")
    assert table == ranges_table(json_schema()), "regenerate the table with `harness schema --ranges`"

"""Every numeric scenario key with its range and unit, read from the JSON Schema (``harness schema
--ranges``; docs/scenario-format.md "Units and ranges" holds the same table).

Each key declares both beside itself (`harness.spec.values.ranged`, or an ``enum``); this walk
only reads them back, and lists a numeric key that declares neither with ``None`` in their place
(tests/rules/test_key_ranges.py turns such a key red). Values of free maps (``server.args``,
``env``, ``extra_config``, matrix ``axes``) are sglang's flags, environment text and axis values,
not keys of the scenario: they are not walked.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from harness.spec.numbers import range_text

_NUMERIC = ("integer", "number")


@dataclass(frozen=True)
class KeyRange:
    """One numeric key: its dotted path, unit, bounds (or ``enum``'s values) and default."""

    path: str
    unit: str | None
    minimum: float | None
    maximum: float | None
    enum: tuple | None = None

    @property
    def declared(self) -> bool:
        return bool(self.unit) and (self.enum is not None or (self.minimum is not None and self.maximum is not None))

    def range_text(self) -> str:
        if self.enum is not None:
            return f"one of {', '.join(str(v) for v in self.enum)} ({self.unit})"
        if self.minimum is None or self.maximum is None or not self.unit:
            return "(no range or unit declared)"
        return range_text(self.minimum, self.maximum, self.unit)


def _types(p: dict, defs: dict) -> set[str]:
    out: set[str] = set()
    t = p.get("type")
    out |= set(t if isinstance(t, list) else [t] if t else [])
    for k in ("anyOf", "oneOf", "allOf"):
        for q in p.get(k, []):
            if "$ref" not in q:
                out |= _types(q, defs)
    if "enum" in p:
        out |= {"integer" if isinstance(v, int) else "other" for v in p["enum"] if not isinstance(v, bool)}
    return out


def _declared(p: dict, key: str) -> Any:
    """``key`` declared on the property itself, else on its first numeric alternative (a value
    or a list of them: ``rate: [1, 2]``)."""
    if key in p:
        return p[key]
    for q in [*p.get("anyOf", []), *p.get("oneOf", []), *([p["items"]] if isinstance(p.get("items"), dict) else [])]:
        if set(_types(q, {})) & set(_NUMERIC) or any(k in q for k in ("anyOf", "oneOf", "items")):
            found = _declared(q, key)
            if found is not None:
                return found
    return None


def _row(path: str, p: dict) -> KeyRange:
    enum = _declared(p, "enum")
    return KeyRange(
        path,
        _declared(p, "unit"),
        _declared(p, "minimum"),
        _declared(p, "maximum"),
        tuple(enum) if enum is not None else None,
    )


def _refs(p: dict) -> list[tuple[str, str]]:
    """(label, model name) of the models a property holds: itself, list items, union members."""
    out: list[tuple[str, str]] = []
    if "$ref" in p:
        out.append(("", p["$ref"].rsplit("/", 1)[-1]))
    mapping = (p.get("discriminator") or {}).get("mapping") or {}
    by_ref = {ref.rsplit("/", 1)[-1]: tag for tag, ref in mapping.items()}
    for k in ("anyOf", "oneOf", "allOf"):
        for q in p.get(k, []):
            for label, name in _refs(q):
                out.append((label or (f"kind={by_ref[name]}" if name in by_ref else ""), name))
    if isinstance(p.get("items"), dict):
        out += [(f"[{label}]" if label else "[]", name) for label, name in _refs(p["items"])]
    return out


def numeric_keys(schema: dict) -> list[KeyRange]:
    """Every numeric key reachable from the schema's root, with what it declares, in schema order."""
    defs = schema.get("$defs", {})
    out: list[KeyRange] = []

    def walk(model: dict, prefix: str, seen: tuple) -> None:
        for key, p in model.get("properties", {}).items():
            path = f"{prefix}{key}"
            items = p.get("items") if isinstance(p.get("items"), dict) else None
            numeric = set(_types(p, defs)) & set(_NUMERIC)
            item_numeric = items is not None and set(_types(items, defs)) & set(_NUMERIC)
            if numeric and not (items and _declared(p, "unit") is None and item_numeric):
                out.append(_row(path, p))
            elif item_numeric:
                out.append(_row(f"{path}[]", items))  # type: ignore[arg-type]
            for label, name in _refs(p):
                if name not in seen and name in defs:
                    walk(defs[name], f"{path}{label.replace('kind=', '')}.", seen + (name,))
            if isinstance(p.get("additionalProperties"), dict):
                for _, name in _refs(p["additionalProperties"]):
                    if name not in seen and name in defs:
                        walk(defs[name], f"{path}.NAME.", seen + (name,))

    walk(schema, "", ())
    return out


def ranges_table(schema: dict) -> str:
    """The table ``harness schema --ranges`` prints: key, range and unit, one key a line."""
    rows = numeric_keys(schema)
    width = max(len(r.path) for r in rows)
    return "\n".join(f"{r.path:<{width}}  {r.range_text()}" for r in rows)

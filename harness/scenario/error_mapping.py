"""pydantic validation errors → ``ErrorItem`` lines ``FILE:LINE KEY.PATH: message`` a person can act on."""

from __future__ import annotations

import re
import types
import typing
from difflib import get_close_matches
from typing import Annotated, Any, Union

from pydantic import BaseModel, ValidationError

from harness.core.yaml_lines import format_path, line_for
from harness.scenario.models import Scenario
from harness.spec.errors import ErrorItem
from harness.spec.numbers import show_value
from harness.workloads import kinds


def _unwrap(ann: Any) -> Any:
    while True:
        origin = typing.get_origin(ann)
        if origin is Annotated:
            ann = typing.get_args(ann)[0]
            continue
        if origin in (Union, types.UnionType):
            args = [a for a in typing.get_args(ann) if a is not type(None)]
            if len(args) == 1:
                ann = args[0]
                continue
        return ann


def _allowed_keys(loc: tuple) -> list[str] | None:
    """Field names of the model reached by following ``loc`` from Scenario (None if unknown)."""
    ann: Any = Scenario
    for el in loc:
        ann = _unwrap(ann)
        origin = typing.get_origin(ann)
        if origin is Union:
            members = [m for m in typing.get_args(ann) if isinstance(m, type) and issubclass(m, BaseModel)]
            ann = next(
                (
                    m
                    for m in members
                    if "kind" in m.model_fields and el in typing.get_args(m.model_fields["kind"].annotation)
                ),
                None,
            )
            if ann is None:
                return None
            continue
        if origin is list and isinstance(el, int):
            ann = typing.get_args(ann)[0]
        elif origin is dict:
            ann = typing.get_args(ann)[1]
        elif isinstance(ann, type) and issubclass(ann, BaseModel) and isinstance(el, str):
            f = ann.model_fields.get(el)
            if f is None:
                return None
            ann = f.annotation
        else:
            return None
    ann = _unwrap(ann)
    if isinstance(ann, type) and issubclass(ann, BaseModel):
        return list(ann.model_fields)
    return None


def _data_path(data: Any, loc: tuple) -> tuple:
    """Map a pydantic ``loc`` onto the data: union/tag labels are dropped; a missing last key kept."""
    out: list = []
    cur = data
    for idx, el in enumerate(loc):
        if isinstance(cur, dict) and isinstance(el, str) and el in cur:
            out.append(el)
            cur = cur[el]
        elif isinstance(cur, list) and isinstance(el, int) and 0 <= el < len(cur):
            out.append(el)
            cur = cur[el]
        elif isinstance(cur, dict) and idx == len(loc) - 1 and isinstance(el, str) and el != "[key]":
            out.append(el)
            cur = None
        # else: a union member label or discriminator tag: skip
    return tuple(out)


def message_for(err: dict, loc: tuple) -> str:
    t = err["type"]
    inp = err.get("input")
    ctx = err.get("ctx") or {}
    if t == "literal_error":
        expected = re.findall(r"'([^']*)'", ctx.get("expected", ""))
        return f"expected one of {', '.join(expected)}, got {show_value(inp)}"
    if t == "extra_forbidden":
        key = loc[-1] if loc else "?"
        allowed = _allowed_keys(tuple(loc[:-1])) or []
        msg = f"unknown key {key!r}"
        close = get_close_matches(str(key), allowed, n=1)
        if close:
            msg += f" (did you mean {close[0]!r}?)"
        if allowed:
            msg += f"; allowed: {', '.join(allowed)}"
        return msg
    if t == "missing":
        return "required key is missing"
    if t in ("int_type", "int_parsing"):
        return f"expected an integer, got {show_value(inp)}"
    if t == "int_from_float":
        return f"expected a whole number, got {show_value(inp)}"
    if t in ("float_type", "float_parsing"):
        return f"expected a number, got {show_value(inp)}"
    if t == "finite_number":
        return f"expected a finite number, got {show_value(inp)}"
    if t in ("bool_type", "bool_parsing"):
        return f"expected true or false, got {show_value(inp)}"
    if t in ("string_type",):
        return f"expected a string, got {show_value(inp)}"
    if t in ("list_type", "tuple_type"):
        return f"expected a list, got {show_value(inp)}"
    if t in ("dict_type", "model_type", "model_attributes_type", "dataclass_type"):
        return f"expected a mapping (key: value), got {show_value(inp)}"
    if t == "greater_than":
        return f"must be > {ctx.get('gt')}, got {show_value(inp)}"
    if t == "greater_than_equal":
        return f"must be >= {ctx.get('ge')}, got {show_value(inp)}"
    if t == "less_than":
        return f"must be < {ctx.get('lt')}, got {show_value(inp)}"
    if t == "less_than_equal":
        return f"must be <= {ctx.get('le')}, got {show_value(inp)}"
    if t == "too_short":
        return f"must have at least {ctx.get('min_length')} item(s)"
    if t == "union_tag_invalid":
        return f"unknown kind {ctx.get('tag')!r}: expected one of {', '.join(kinds())}"
    if t == "union_tag_not_found":
        return f"missing 'kind': expected one of {', '.join(kinds())}"
    msg = err.get("msg", str(t))
    return msg[len("Value error, ") :] if msg.startswith("Value error, ") else msg


def convert_errors(
    exc: ValidationError, data: Any, lines: dict, file: str, prefix: tuple = (), remap=None
) -> list[ErrorItem]:
    items: list[ErrorItem] = []
    for err in exc.errors(include_url=False):
        loc = tuple(err["loc"])
        rel = _data_path(data, loc)
        if err["type"] in ("union_tag_invalid", "union_tag_not_found"):
            rel = rel + ("kind",)  # point at the discriminator itself
        path = prefix + rel
        if remap is not None:
            path = remap(rel) or path
        items.append(ErrorItem(file, line_for(lines, path), format_path(path), message_for(err, loc)))
    return items

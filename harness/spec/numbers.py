"""Numeric scenario keys: each a range and a unit declared beside the key (`ranged` and its
shorthands `count`, `tokens`, `seconds`, `gib`), checked in one place with one message that names
the value, the range and the unit; the bounds every size shares (`MAX_TOKENS`, `MAX_COUNT`, ...).

A leaf module (imports nothing of the harness but the scenario's errors and the YAML loader's
numeral check): the scenario's value types, the workload configs and the scenario models use it.
"""

from __future__ import annotations

import math
import re
from typing import Annotated, Any, Callable, Union

from pydantic import Discriminator, PlainValidator, Tag, WithJsonSchema

from harness.core.yaml_lines import numeral_problem
from harness.spec.errors import field_error

# Counts of requests, prompts, passes, ...: a scenario that asks for more could only mean
# "run forever" or "allocate TiB" (hostile or mistyped input), so it is refused up front.
MAX_COUNT = 100_000
MAX_REPEATS = 1_000
MAX_TOKENS = 1_000_000_000  # longer than any model's context
MAX_POOL_FRACTION = 100.0
MAX_GIB = 65_536.0  # 64 TiB: more memory than any one host has
DAY_S = 86_400.0
WEEK_S = 7 * DAY_S

_DECIMAL = re.compile(r"^\s*[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?\s*$")


def _fmt_bound(v: float) -> str:
    if isinstance(v, float) and v.is_integer() and abs(v) < 1e16:
        v = int(v)
    if isinstance(v, int):
        return f"{v:,}" if abs(v) >= 10_000 and abs(v) < 10**16 else str(v)
    return f"{v:g}"


def range_text(lo: float, hi: float, unit: str) -> str:
    """``0.01..1,000 x the device KV pool``: a key's range and unit as messages and docs write it."""
    return f"{_fmt_bound(lo)}..{_fmt_bound(hi)} {unit}"


def _in_range(kind: type, lo: float, hi: float, unit: str, words: dict[str, Any], percent: bool) -> Callable:
    """The validator of a `ranged` key: the value as ``kind`` within ``[lo, hi]``, else one message
    that names the value, the range and the unit (the line's key path names the key)."""
    where = f"expected {'a whole number' if kind is int else 'a number'} in {range_text(lo, hi, unit)}"

    def check(v: Any) -> Any:
        if isinstance(v, str) and v.strip() in words:
            return words[v.strip()]
        if isinstance(v, bool) or v is None or not isinstance(v, (int, float, str)):
            raise field_error(f"{where}, got {show_value(v)}")
        problem = numeral_problem(v)
        if problem:
            raise field_error(f"{problem} ({where})")
        n: int | float = v  # type: ignore[assignment]
        if isinstance(v, str):
            s = v.strip()
            if percent and s.endswith("%") and _DECIMAL.match(s[:-1]):
                n = float(s[:-1]) / 100.0
            elif _DECIMAL.match(s):
                n = float(s) if any(c in s for c in ".eE") else int(s)
            else:
                raise field_error(f"{where}, got {show_value(v)}")
        if isinstance(n, float) and not math.isfinite(n):
            raise field_error(f"{where}, got {show_value(v)} (not a finite number)")
        if not lo <= n <= hi:  # an int compares exactly, however long
            raise field_error(f"{where}, got {show_value(v)}")
        if kind is int:
            if isinstance(n, float) and not n.is_integer():
                raise field_error(f"{where}, got {show_value(v)} (not a whole number)")
            return int(n)
        return float(n)

    return check


def ranged(
    kind: type, lo: float, hi: float, unit: str, *, words: dict[str, Any] | None = None, percent: bool = False
) -> Any:
    """A number key of ``kind`` (int or float) in ``[lo, hi]`` with its unit, declared beside
    the key (every numeric scenario key is one: tests/rules/test_key_ranges.py): `validate`
    refuses a value outside in one line naming the key, the value, the range and the unit;
    `harness schema` shows ``minimum``, ``maximum`` and ``unit``. ``words`` are spellings kept as
    given values (``repeats: auto``); ``percent`` also takes ``"1%"`` (0.01)."""
    if not unit:
        raise ValueError("a ranged key needs its unit")
    number = {"type": "integer" if kind is int else "number", "minimum": lo, "maximum": hi}
    schema: dict[str, Any] = {**number, "unit": unit}
    alternatives = [{"type": "string", "enum": sorted(words)}] if words else []
    if percent:
        alternatives.append({"type": "string", "pattern": r"^\s*(\d+(\.\d*)?|\.\d+)\s*%\s*$"})
    if alternatives:
        schema = {"anyOf": [number, *alternatives], "unit": unit, "minimum": lo, "maximum": hi}
    return Annotated[
        int if kind is int else float,
        PlainValidator(_in_range(kind, lo, hi, unit, words or {}, percent)),
        WithJsonSchema(schema),
    ]


def one_or_list(kind: Any) -> Any:
    """A value of ``kind`` or a list of them (a sweep: ``rate: [1, 2, 4]``), validated as the one
    its shape says, so a bad value is one error line (a plain union reports each member's)."""
    return Annotated[
        Union[Annotated[kind, Tag("one")], Annotated[list[kind], Tag("list")]],
        Discriminator(lambda v: "list" if isinstance(v, list) else "one"),
    ]


def count(unit: str, hi: int = MAX_COUNT, lo: int = 1) -> Any:
    """A count of ``unit`` (requests, sessions, ...) in ``[lo, hi]`` (`ranged`)."""
    return ranged(int, lo, hi, unit)


def tokens(hi: int = MAX_TOKENS, lo: int = 1) -> Any:
    """A whole number of tokens in ``[lo, hi]`` (`ranged`)."""
    return ranged(int, lo, hi, "tokens")


def seconds(lo: float, hi: float) -> Any:
    """A duration in seconds in ``[lo, hi]`` (`ranged`)."""
    return ranged(float, lo, hi, "s")


def gib(lo: float = 0.0, hi: float = MAX_GIB) -> Any:
    """An amount of memory in GiB in ``[lo, hi]`` (`ranged`)."""
    return ranged(float, lo, hi, "GiB")


def show_value(v: Any) -> str:
    if isinstance(v, dict):
        return "a mapping"
    if isinstance(v, list):
        return "a list"
    if v is None:
        return "null"
    if isinstance(v, bool):
        return str(v).lower()
    return repr(v)

"""The sglang flags whose values the harness itself reads as numbers, and what is wrong with a
value it cannot use (pure; checked where a scenario is, `harness.scenario.checks`)."""

from __future__ import annotations

import math
from typing import Any

# sglang flags whose values the harness itself reads as numbers (the pool prediction, the limits,
# the estimate): a value it cannot use is one line naming the key when the scenario is checked,
# not a traceback later (`--max-total-tokens: .inf` was exit 3 in `harness validate`).
_POSITIVE_INT_FLAGS = ("--max-total-tokens", "--page-size", "--max-mamba-cache-size", "--context-length")
_INT_FLAGS = ("--chunked-prefill-size",)  # sglang takes -1: no chunking
_FRACTION_FLAGS = ("--mem-fraction-static",)
_SIZE_FLAGS = ("--hicache-mamba-size-gb",)  # a number of GB, or a word sglang solves ("auto")
_FLAG_INT_MAX = 10**12


def flag_value_problem(flag: str, value: Any) -> str | None:
    """What is wrong with ``value`` for a flag the harness reads as a number (None: nothing, or
    a flag it does not read). A bare flag (``true``) or an unset one (``false``/null) is fine."""
    if value is None or isinstance(value, bool):
        return None
    if flag in _POSITIVE_INT_FLAGS or flag in _INT_FLAGS:
        try:
            n = int(str(value).strip())
        except ValueError:
            return f"{value!r} is not a whole number"
        low = 1 if flag in _POSITIVE_INT_FLAGS else -1
        if not low <= n <= _FLAG_INT_MAX or (flag in _INT_FLAGS and n == 0):
            return f"{n} is out of range ({low} to {_FLAG_INT_MAX:,}{', not 0' if flag in _INT_FLAGS else ''})"
        return None
    if flag in _FRACTION_FLAGS or flag in _SIZE_FLAGS:
        try:
            x = float(str(value).strip())
        except ValueError:
            return None if flag in _SIZE_FLAGS else f"{value!r} is not a number"
        if not math.isfinite(x) or x <= 0 or (flag in _FRACTION_FLAGS and x > 1) or x > _FLAG_INT_MAX:
            return f"{value!r} is out of range ({'(0, 1]' if flag in _FRACTION_FLAGS else 'a finite number of GB > 0'})"
    return None

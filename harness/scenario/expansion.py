"""``${VAR}`` / ``${VAR:-default}`` expansion in every string value of a scenario (``$$`` is ``$``)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

_VAR_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def expand_env(s: str, env: Mapping[str, str]) -> str:
    """Expand ``${VAR}``, ``${VAR:-default}`` (default when unset or empty) and ``$$`` in ``s``.

    Raises ValueError naming the variable when one is unset or empty and has no default. A ``$`` not
    followed by ``{`` or ``$`` is kept as is."""
    out: list[str] = []
    i, n = 0, len(s)
    while i < n:
        c = s[i]
        if c != "$" or i + 1 >= n or s[i + 1] not in "{$":
            out.append(c)
            i += 1
            continue
        if s[i + 1] == "$":
            out.append("$")
            i += 2
            continue
        end = s.find("}", i + 2)
        if end < 0:
            raise ValueError(f"unterminated '${{' in {s!r} (write $$ for a literal $)")
        inner = s[i + 2 : end]
        name, sep, default = inner.partition(":-")
        if not _VAR_NAME.match(name):
            raise ValueError(f"bad variable reference '${{{inner}}}': expected ${{NAME}} or ${{NAME:-default}}")
        value = env.get(name)
        if sep:
            out.append(value if value else default)
        elif value is None:
            raise ValueError(f"environment variable {name} is not set (give a default with ${{{name}:-default}})")
        elif value == "":  # how an unset GitHub Actions variable arrives: say which one
            raise ValueError(
                f"environment variable {name} is set but empty (give it a value, or a "
                f"default with ${{{name}:-default}})"
            )
        else:
            out.append(value)
        i = end + 1
    return "".join(out)


def expand_tree(data: Any, path: tuple, env: Mapping[str, str], errors: list[tuple[tuple, str]]) -> Any:
    """Expand every string value (errors collected as (key path, message)); a NUL byte in a key
    or value, written or expanded, is an error: no argv or environment entry can hold one."""
    if isinstance(data, str):
        value = data
        if "$" in data:
            try:
                value = expand_env(data, env)
            except ValueError as e:
                errors.append((path, str(e)))
                return data
        if "\x00" in value:
            errors.append((path, "contains a NUL byte (\\0), which no argument or environment value can hold"))
        return value
    if isinstance(data, dict):
        for k in data:
            if isinstance(k, str) and "\x00" in k:
                errors.append((path + (k,), "the key contains a NUL byte (\\0)"))
        return {k: expand_tree(v, path + (k,), env, errors) for k, v in data.items()}
    if isinstance(data, list):
        return [expand_tree(v, path + (i,), env, errors) for i, v in enumerate(data)]
    return data

"""One way to read a stored JSON object into a frozen dataclass of its readers: `from_keys`,
each field from the stored key of the same name (None where absent), the fields whose stored
shape differs given by the caller. Used by the typed views of harness/store (status, manifest
builds, probe, products, parity floor) so a field is named once, in its dataclass."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, TypeVar

T = TypeVar("T")


def from_keys(cls: type[T], data: Mapping[str, Any], **given: Any) -> T:
    """``cls`` with every field not in ``given`` read from ``data``'s key of that name."""
    names = [f.name for f in dataclasses.fields(cls) if f.name not in given]  # type: ignore[arg-type]
    return cls(**{n: data.get(n) for n in names}, **given)

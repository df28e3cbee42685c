"""Scenario errors: one ``ErrorItem`` per problem, formatted ``FILE:LINE KEY.PATH: message``."""

from __future__ import annotations

from dataclasses import dataclass

from pydantic_core import PydanticCustomError

from harness.core.errors import BadInput


@dataclass(frozen=True)
class ErrorItem:
    """One problem: ``file``, 1-based ``line`` (None if unknown), dotted key ``path``, ``message``."""

    file: str
    line: int | None
    path: str
    message: str

    def format(self) -> str:
        where = self.file if self.line is None else f"{self.file}:{self.line}"
        return f"{where} {self.path}: {self.message}" if self.path else f"{where}: {self.message}"


class ScenarioError(BadInput):
    """A scenario that cannot be used. ``errors`` is a list of ``FILE:LINE KEY.PATH: message``."""

    def __init__(self, items: list[ErrorItem] | list[str] | str):
        if isinstance(items, str):
            items = [items]
        self.items: list[ErrorItem] = [i for i in items if isinstance(i, ErrorItem)]
        self.errors: list[str] = [i.format() if isinstance(i, ErrorItem) else str(i) for i in items]
        super().__init__("\n".join(self.errors))

    @property
    def lines(self) -> list[str]:
        return self.errors


def field_error(msg: str) -> PydanticCustomError:
    return PydanticCustomError("harness", msg)

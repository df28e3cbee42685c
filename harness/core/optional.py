"""Optional dependencies: which extra of the package brings which module, and one clear line
when a command needs one that is not installed.

The core install (``pip install hicache-harness``) is what ``harness run`` needs against a real
sglang server. The rest comes in extras (pyproject.toml): ``[report]`` (matplotlib, jinja2: the
HTML report and history page), ``[sim]`` (starlette, uvicorn, prometheus-client: the simulated server), ``[stats]``
(scipy: the significance tests of ``harness compare``), ``[text]`` (tokenizers: quality prompts
as text). A command that needs an extra calls :func:`require_extra` (or :func:`require` for one
module) before it imports anything heavy; a missing module raises :class:`MissingExtra`, whose
message is the one line to print (the CLI prints it and exits 2, never a traceback)::

    harness report needs the [report] extra: pip install 'hicache-harness[report]'
"""

from __future__ import annotations

import importlib
import importlib.util
from types import ModuleType

from harness.core.errors import BadInput

DISTRIBUTION = "hicache-harness"

# extra → the modules it provides (import names). One home: pyproject.toml's extras list the
# distributions; tests/rules/test_packaging.py checks the two agree.
EXTRAS: dict[str, tuple[str, ...]] = {
    "report": ("matplotlib", "jinja2"),
    "sim": ("starlette", "uvicorn", "prometheus_client"),
    "stats": ("scipy",),
    "text": ("tokenizers",),
}


class MissingExtra(BadInput, ImportError):
    """A module of an optional extra is not installed; ``str(exc)`` is the line to print."""

    def __init__(self, what: str, extra: str, module: str):
        self.what, self.extra = what, extra
        super().__init__(install_line(what, extra), name=module)


def install_line(what: str, extra: str) -> str:
    """``<what> needs the [<extra>] extra: pip install 'hicache-harness[<extra>]'``."""
    return f"{what} needs the [{extra}] extra: pip install '{DISTRIBUTION}[{extra}]'"


def missing(extra: str) -> list[str]:
    """The modules of ``extra`` that cannot be imported here (without importing them)."""
    out = []
    for module in EXTRAS[extra]:
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            out.append(module)
    return out


def require_extra(extra: str, what: str) -> None:
    """Raise :class:`MissingExtra` when a module of ``extra`` is not installed; ``what`` names the
    command or feature that needs it (e.g. ``"harness report"``)."""
    gone = missing(extra)
    if gone:
        raise MissingExtra(what, extra, gone[0])


def require(module: str, extra: str, what: str | None = None) -> ModuleType:
    """Import ``module`` or raise :class:`MissingExtra` naming ``extra`` (``what`` defaults to
    ``"this feature"``)."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        top = (exc.name or module).split(".")[0]
        if top != module.split(".")[0]:  # the module is there but one of its own imports broke
            raise
        raise MissingExtra(what or f"this feature ({module})", extra, module) from None

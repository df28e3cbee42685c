"""Names that become paths: a variant or scenario name → one safe path component.

A leaf module: the scenario validator (two variants must not share a folder) and the run store
(where a variant's files go) both read it.
"""

from __future__ import annotations

import re

# What a run folder holds beside its variants' folders (harness.store.results): a variant whose
# folder name would be one of these (on a case-insensitive file system too) is refused.
RUN_FOLDER_ENTRIES = frozenset(
    {
        "manifest.json",
        "summary.csv",
        "expectations.json",
        "comparison.json",
        "verdict.json",
        "cost.json",
        "complete",
        "interrupted",
        ".lock",
        ".attempts",
        ".sequence",
        "report",
    }
)

_UNSAFE = re.compile(r"[^A-Za-z0-9_.=+-]")


def safe_name(name: str) -> str:
    """A variant or scenario name turned into one path component that cannot escape its folder.

    Characters outside ``[A-Za-z0-9_.=+-]`` become ``_``; leading dots are replaced so that
    ``..`` and hidden names are impossible; an empty result becomes ``_``.
    """
    cleaned = _UNSAFE.sub("_", name)
    cleaned = re.sub(r"^\.+", lambda m: "_" * len(m.group(0)), cleaned)
    return cleaned[:120] or "_"


def clashes_with_run_files(name: str) -> bool:
    """True when a variant named ``name`` would get a folder named like a run folder's own file."""
    return safe_name(name).lower() in RUN_FOLDER_ENTRIES

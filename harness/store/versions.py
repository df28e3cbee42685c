"""The one migration hook: a stored file's ``schema_version`` → today's shape, on read.

Every JSON file a reader loads through the store (manifest.json, status.json, summary.json) goes
through :func:`upgrade` first, like asv's ``load_json(path, api_version)``: a file of an older
version is brought up to :data:`CURRENT` by the steps of :data:`STEPS`, one version at a time, so
a reader only ever sees today's shape; a file of a newer version than this harness knows is a
:class:`~harness.store.results.ResultsError` (exit 2) saying so, never a guess.

The versions:

- manifest.json 1, status.json 1: as written since the first run folders.
- summary.json 2: every phase statistic has every key of `harness.store.stats.STAT_KEYS` (null
  where nothing was measured) and every workload has ``derived_by_repeat`` and
  ``history_stats_by_repeat``. A version 1 summary (written before p95 and the per-repeat figures
  existed) gets ``p95: null`` where it has none and null per-repeat figures, which readers
  recompute from the variant's requests.jsonl (`harness.analysis.figures`).

A new version: raise its number here, add the step from the one before to :data:`STEPS`, and
a test in tests/unit/store/test_versions.py with a file of the old shape.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness.store.stats import STAT_KEYS

MANIFEST, STATUS, SUMMARY = "manifest", "status", "summary"

CURRENT: dict[str, int] = {MANIFEST: 1, STATUS: 1, SUMMARY: 2}
# A status or summary without the field is of the first version (hand-made and test files); a
# manifest must say its version.
WHEN_ABSENT: dict[str, int] = {STATUS: 1, SUMMARY: 1}


def _summary_1_to_2(data: dict[str, Any]) -> dict[str, Any]:
    """Shapes it does not know are left as they are, for the reader's check to name."""
    workloads = data.get("workloads")
    for w in workloads.values() if isinstance(workloads, dict) else ():
        if not isinstance(w, dict):
            continue
        w.setdefault("derived_by_repeat", None)
        w.setdefault("history_stats_by_repeat", None)
        phases = w.get("phases")
        for p in phases.values() if isinstance(phases, dict) else ():
            metrics = p.get("metrics") if isinstance(p, dict) else None
            for stats in metrics.values() if isinstance(metrics, dict) else ():
                if isinstance(stats, dict):
                    missing = [k for k in STAT_KEYS if k not in stats]
                    stats.update(dict.fromkeys(missing))
                    ordered = {k: stats[k] for k in STAT_KEYS} | stats
                    stats.clear()
                    stats.update(ordered)
    return data


# {file kind: {version: the step from it to the next}}
STEPS: dict[str, dict[int, Callable[[dict[str, Any]], dict[str, Any]]]] = {
    MANIFEST: {},
    STATUS: {},
    SUMMARY: {1: _summary_1_to_2},
}


def upgrade(path: Path, data: dict[str, Any], kind: str) -> dict[str, Any]:
    """``data`` (the object read from ``path``, a ``kind`` file) in today's shape: each step from
    its ``schema_version`` up applied in turn (the object is changed in place and returned).
    ResultsError naming the file for a version that is not a positive integer, newer than this
    harness reads, or older than any step reaches."""
    from harness.store.results import ResultsError

    current = CURRENT[kind]
    version = data.get("schema_version", WHEN_ABSENT.get(kind))
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise ResultsError(f"{path}: schema_version {version!r} is not a version (this harness reads 1 to {current})")
    if version > current:
        raise ResultsError(
            f"{path}: schema_version {version} was written by a newer harness; this one reads {kind} files "
            f"up to version {current} (upgrade the harness to read it)"
        )
    while version < current:
        step = STEPS[kind].get(version)
        if step is None:
            raise ResultsError(f"{path}: schema_version {version} is too old to read (no upgrade to {version + 1})")
        data = step(data)
        version += 1
        data["schema_version"] = version
    return data

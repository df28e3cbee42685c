"""One run folder loaded for its readers: `load_run(path)` → `LoadedRun` (the typed `Manifest`,
each variant's `VariantStatus` and `Summary`), the one entry every reader of a run goes through
(analysis, verdict, compare, history, report, api, merge, resume, ``harness show``).

Each file is brought up to today's version on read (`harness.store.versions`) and checked for
its shape (`harness.store.manifest`, `harness.store.summary`, `harness.store.variant_status`): a
damaged or hand-edited file is a ResultsError naming it, never a crash further on. The JSONL rows
(requests, samples, quality) are not read here; `LoadedVariant.paths` says where they are.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from harness.store import results
from harness.store.manifest import Manifest, ManifestVariant, read_manifest
from harness.store.summary import Summary, read_summary
from harness.store.variant_status import NOT_RUN, VariantStatus, read_status


@dataclass(frozen=True)
class LoadedVariant:
    name: str
    paths: results.VariantPaths
    entry: ManifestVariant  # its manifest entry
    status: VariantStatus  # state "not_run" without a status.json
    summary: Summary | None

    @property
    def ok(self) -> bool:
        return self.status.state == "ok"


@dataclass(frozen=True)
class LoadedRun:
    paths: results.RunPaths
    manifest: Manifest
    variants: tuple[LoadedVariant, ...]

    @property
    def complete(self) -> bool:
        return self.paths.complete.exists()

    @property
    def scenario_name(self) -> str:
        return self.manifest.scenario.name

    @property
    def run_id(self) -> str:
        return self.paths.root.name

    @property
    def names(self) -> list[str]:
        return [v.name for v in self.variants]

    def variant(self, name: str) -> LoadedVariant:
        for v in self.variants:
            if v.name == name:
                return v
        raise KeyError(name)

    def requests(self, variant: str) -> list[dict]:
        return list(results.read_jsonl(self.variant(variant).paths.requests))


def load_variant(paths: results.RunPaths, entry: ManifestVariant) -> LoadedVariant:
    vpaths = paths.variant(entry.name)
    status = read_status(vpaths.status) if vpaths.status.exists() else VariantStatus(variant=entry.name, state=NOT_RUN)
    summary = read_summary(vpaths.summary) if vpaths.summary.exists() else None
    return LoadedVariant(entry.name, vpaths, entry, status, summary)


def load_run(path: Path) -> LoadedRun:
    """A run folder's manifest, statuses and summaries, typed (not the JSONL rows)."""
    root = Path(path)
    if not root.is_dir():
        raise results.ResultsError(f"{root}: no such run folder")
    paths = results.RunPaths(root)
    manifest = read_manifest(root)
    return LoadedRun(paths, manifest, tuple(load_variant(paths, e) for e in manifest.variants))

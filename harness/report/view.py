"""A run folder → `RunView`: what the report needs of one run, read from its stored files.

One job: loading. manifest.json (its scenario text parsed for the workloads, their kinds, the
description and the quality baseline), each variant's status.json and summary.json
(`results.load_run`), the request and sample frames (`harness.frames`), each variant's parity.json
and quality.jsonl (on demand), the probe result (the manifest's, else ``probe.json``) and
``comparison.json``. Stored figures only: nothing here measures or probes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import pandas as pd

from harness import results
from harness.frames import requests_frame, samples_frame
from harness.workloads import kind_of, workload_kinds
from harness.workloads.kind import WorkloadKind


@dataclass
class RunView:
    """What the report needs of one run, loaded once."""

    root: Path
    manifest: dict
    variants: list[results.LoadedVariant]
    complete: bool
    interrupted: bool
    scenario: dict  # the manifest's scenario text as parsed YAML; {} when it cannot be parsed
    probe: dict | None
    comparison: dict | None
    requests: dict[str, pd.DataFrame] = field(default_factory=dict)
    samples: dict[str, pd.DataFrame] = field(default_factory=dict)

    @property
    def names(self) -> list[str]:
        return [v.name for v in self.variants]

    @property
    def description(self) -> str:
        return str(self.scenario.get("description") or "")

    @cached_property
    def workload_kinds(self) -> dict[str, str]:
        """{workload name: kind} in scenario order ({} when the scenario cannot be parsed)."""
        return workload_kinds(self.scenario.get("workloads"))

    def workload_names(self) -> list[str]:
        """The run's workloads in scenario order; for a run whose scenario cannot be parsed, the
        workloads its summaries hold, in order of first appearance."""
        named = list(self.workload_kinds)
        if named:
            return named
        seen: dict[str, None] = {}
        for v in self.variants:
            for wl in (v.summary or {}).get("workloads") or {}:
                seen.setdefault(wl)
        return list(seen)

    def kind(self, workload: str) -> WorkloadKind | None:
        """The declaration of a workload's kind (by the scenario; else the name is the kind)."""
        return kind_of(workload, self.workload_kinds)

    def status(self, name: str) -> dict:
        return next(v.status for v in self.variants if v.name == name)

    def summary(self, name: str) -> dict:
        return next(v.summary for v in self.variants if v.name == name) or {}

    def ok(self, name: str) -> bool:
        return self.status(name).get("state") == "ok"

    def hicache(self, name: str) -> Any:
        for e in self.manifest.get("variants", []):
            if e["name"] == name:
                return e.get("hicache")
        return None

    def parity(self, name: str) -> dict | None:
        """The variant's parity.json (its ON-vs-OFF comparisons); None when absent or unreadable."""
        path = self.root / results.safe_name(name) / "parity.json"
        if not path.exists():
            return None
        try:
            return results.read_json(path)
        except results.ResultsError:
            return None

    def quality_rows(self, name: str) -> list[dict]:
        """The variant's quality.jsonl rows (none when it has no file)."""
        return list(results.read_jsonl(self.root / results.safe_name(name) / results.QUALITY))


def scenario_yaml(manifest: dict) -> dict:
    """The manifest's scenario text as parsed YAML; {} when there is none or it cannot be parsed."""
    text = (manifest.get("scenario") or {}).get("text")
    if not text:
        return {}
    from harness.yaml_lines import load_yaml_text

    try:
        return load_yaml_text(text, "scenario").data
    except Exception:  # noqa: BLE001 - report what we can without it
        return {}


def baseline_variant(view: RunView) -> str | None:
    """The HiCache-off arm deltas and quality samples are set against: the quality baseline when
    it ran ok, else the first ok variant without HiCache."""
    q = (view.scenario.get("quality") or {}).get("baseline_variant")
    if q in view.names and view.ok(q) and not view.hicache(q):
        return q
    for n in view.names:
        if not view.hicache(n) and view.ok(n):
            return n
    return None


def load_view(run_dir: Path) -> RunView:
    """Read a run folder (raises `results.ResultsError` naming a missing or unreadable file)."""
    run = results.load_run(Path(run_dir))
    probe = run.manifest.get("probe")
    probe_file = run.paths.root / "probe.json"
    if not probe and probe_file.exists():
        try:
            probe = results.read_json(probe_file)
        except results.ResultsError:
            probe = None
    comp_file = run.paths.root / "comparison.json"
    comparison = results.read_json(comp_file) if comp_file.exists() else None
    view = RunView(run.paths.root, run.manifest, run.variants, run.complete, run.paths.interrupted.exists(),
                   scenario_yaml(run.manifest), probe, comparison)
    for v in run.variants:
        view.requests[v.name] = requests_frame(v.paths.requests, v.name)
        view.samples[v.name] = samples_frame(v.paths.samples, v.name)
    return view

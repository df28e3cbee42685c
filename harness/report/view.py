"""A run folder → `RunView`: what the report needs of one run, read from its stored files.

One job: loading. manifest.json (its scenario text parsed for the workloads, their kinds, the
description and the quality baseline), each variant's status.json and summary.json
(`run_folder.load_run`: upgraded and checked; each summary with what it lacks recomputed from the
records, `harness.analysis.figures`), the request and sample frames (`harness.analysis.frames`), each variant's parity.json
and quality.jsonl (on demand), the probe result (the manifest's, else ``probe.json``),
``comparison.json``, ``expectations.json`` and ``verdict.json``. Stored figures only: nothing here
measures or probes.

A file of the wrong shape (a manifest that is not an object, a status.json of ``[]``, a
summary.json of ``"hello"``) raises `results.ResultsError` naming the file, so ``harness report``
says which file is damaged instead of drawing a page from it. A variant the manifest lists without
a status.json is shown as ``missing`` (or ``not_run`` when an interrupted run never reached it),
never as a variant that ran.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import pandas as pd

from harness.analysis.figures import variant_figures
from harness.analysis.frames import requests_frame, samples_frame
from harness.analysis.run_products import EXPECTATIONS_FILE
from harness.store import results, run_folder
from harness.store.manifest import HicacheSettings, Manifest
from harness.store.probe_result import ProbeResult
from harness.store.products import StoredComparison, StoredVerdict, read_comparison, read_verdict
from harness.store.status_view import StatusView
from harness.store.summary import Summary
from harness.workloads import kind_of, workload_kinds
from harness.workloads.kind import WorkloadKind


@dataclass
class RunView:
    """What the report needs of one run, loaded once."""

    root: Path
    manifest: Manifest  # manifest.json, upgraded and checked (`harness.store.manifest`)
    variants: list[run_folder.LoadedVariant]
    complete: bool
    interrupted: bool
    scenario: dict  # the manifest's scenario text as parsed YAML; {} when it cannot be parsed
    probe: ProbeResult | None  # the manifest's probe, else the run folder's probe.json
    comparison: StoredComparison | None  # comparison.json (`harness.store.products`); None without one
    requests: dict[str, pd.DataFrame] = field(default_factory=dict)
    samples: dict[str, pd.DataFrame] = field(default_factory=dict)
    stored_expectations: list[dict] | None = None  # expectations.json's checks; None without the file
    stored_verdict: StoredVerdict | None = None  # verdict.json as the run wrote it; None without the file
    # {variant: its status.json, typed} (a variant without one: ``missing`` or ``not_run``)
    statuses: dict[str, StatusView] = field(default_factory=dict)
    # {variant: its figures} (`harness.analysis.figures`: the summary, with what it lacks recomputed
    # from its records), the one source of a report row's value and of its tested delta
    figures: dict[str, Summary | None] = field(default_factory=dict)

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
            for wl in (v.summary.workloads if v.summary is not None else None) or {}:
                seen.setdefault(wl)
        return list(seen)

    def kind(self, workload: str) -> WorkloadKind | None:
        """The declaration of a workload's kind (by the scenario; else the name is the kind)."""
        return kind_of(workload, self.workload_kinds)

    def status(self, name: str) -> StatusView:
        return self.statuses[name]

    def summary(self, name: str) -> Summary | None:
        """The variant's figures, typed (`harness.store.summary`); None without a summary."""
        return self.figures.get(name)

    def ok(self, name: str) -> bool:
        return self.status(name).ok

    def hicache(self, name: str) -> HicacheSettings | None:
        return next((v.entry.hicache for v in self.variants if v.name == name), None)

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


def baseline_variant(view: RunView) -> str | None:
    """The HiCache-off arm deltas and quality samples are set against: the quality baseline when
    it ran ok, else the first ok variant without HiCache."""
    q = view.manifest.scenario.block("quality").get("baseline_variant")
    if q in view.names and view.ok(q) and not view.hicache(q):
        return q
    for n in view.names:
        if not view.hicache(n) and view.ok(n):
            return n
    return None


_NUMBER = (int, float)


def _expect(path: Path, ok: bool, what: str) -> None:
    if not ok:
        raise results.ResultsError(f"{path}: {what}")


def _object(path: Path, data: Any, what: str = "not a JSON object") -> dict:
    _expect(path, isinstance(data, dict), f"{what} (got {type(data).__name__})")
    return data


def _optional_json(path: Path) -> Any:
    return results.read_json(path) if path.exists() else None


def load_view(run_dir: Path) -> RunView:
    """Read a run folder (raises `results.ResultsError` naming a missing, unreadable or damaged
    file)."""
    root = Path(run_dir)
    run = run_folder.load_run(root)
    interrupted = run.paths.interrupted.exists()
    statuses: dict[str, StatusView] = {}
    for v in run.variants:
        if not v.paths.status.exists():
            statuses[v.name] = (
                StatusView.absent(v.name, "not_run", "not reached: the run was interrupted")
                if interrupted
                else StatusView.absent(
                    v.name, "missing", "no variant folder" if not v.paths.root.is_dir() else "no status.json"
                )
            )
        else:
            statuses[v.name] = StatusView.of(v.status)
    kinds = workload_kinds(run.manifest.scenario.data.get("workloads"))
    figures = {v.name: variant_figures(v, kinds) for v in run.variants}
    probe = run.manifest.platform
    probe_file = run.paths.root / "probe.json"
    if probe is None and probe_file.exists():
        try:
            probe = ProbeResult.from_json(results.read_json(probe_file))
        except results.ResultsError:
            probe = None
    comparison = read_comparison(run.paths.root)
    exp_file = run.paths.root / EXPECTATIONS_FILE
    expectations = _optional_json(exp_file)
    if expectations is not None:
        checks = _object(exp_file, expectations).get("checks", [])
        _expect(
            exp_file,
            isinstance(checks, list) and all(isinstance(c, dict) for c in checks),
            "checks is not a list of objects",
        )
        expectations = checks
    stored_verdict = read_verdict(run.paths.root)
    view = RunView(
        run.paths.root,
        run.manifest,
        list(run.variants),
        run.complete,
        interrupted,
        dict(run.manifest.scenario.data),
        probe,
        comparison,
        stored_expectations=expectations,
        stored_verdict=stored_verdict,
        statuses=statuses,
        figures=figures,
    )
    for v in run.variants:
        view.requests[v.name] = requests_frame(v.paths.requests, v.name)
        view.samples[v.name] = samples_frame(v.paths.samples, v.name)
    return view

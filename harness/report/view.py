"""A run folder → `RunView`: what the report needs of one run, read from its stored files.

One job: loading. manifest.json (its scenario text parsed for the workloads, their kinds, the
description and the quality baseline), each variant's status.json and summary.json
(`results.load_run`), the request and sample frames (`harness.analysis.frames`), each variant's parity.json
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

from harness.analysis.frames import requests_frame, samples_frame
from harness.analysis.run_products import EXPECTATIONS_FILE, VERDICT_FILE
from harness.store import results
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
    stored_expectations: list[dict] | None = None  # expectations.json's checks; None without the file
    stored_verdict: dict | None = None  # verdict.json as the run wrote it; None without the file

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
    from harness.core.yaml_lines import load_yaml_text

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


_NUMBER = (int, float)


def _expect(path: Path, ok: bool, what: str) -> None:
    if not ok:
        raise results.ResultsError(f"{path}: {what}")


def _object(path: Path, data: Any, what: str = "not a JSON object") -> dict:
    _expect(path, isinstance(data, dict), f"{what} (got {type(data).__name__})")
    return data


def check_manifest(path: Path, m: Any) -> dict:
    """The manifest, checked for the fields every part of the report reads; raises
    `results.ResultsError` naming the file and the field."""
    m = _object(path, m)
    scenario = m.get("scenario")
    _expect(
        path,
        isinstance(scenario, dict) and isinstance(scenario.get("name"), str),
        "scenario.name missing or not a string",
    )
    variants = m.get("variants", [])
    _expect(
        path,
        isinstance(variants, list) and all(isinstance(v, dict) and isinstance(v.get("name"), str) for v in variants),
        "variants is not a list of objects with a name",
    )
    return m


def check_status(path: Path, st: Any) -> dict:
    st = _object(path, st)
    _expect(path, st.get("state") is None or isinstance(st.get("state"), str), "state is not a string")
    return st


def check_summary(path: Path, s: Any) -> dict | None:
    if s is None:
        return None
    s = _object(path, s)
    for key in ("workloads", "quality", "sampling", "errors"):
        _expect(path, s.get(key) is None or isinstance(s.get(key), dict), f"{key} is not an object")
    for key in ("n_requests", "n_errors"):
        _expect(path, s.get(key) is None or isinstance(s.get(key), _NUMBER), f"{key} is not a number")
    parity = (s.get("quality") or {}).get("parity")
    _expect(path, parity is None or isinstance(parity, dict), "quality.parity is not an object")
    for wl, w in (s.get("workloads") or {}).items():
        _expect(
            path,
            isinstance(w, dict) and isinstance(w.get("phases") or {}, dict),
            f"workloads.{wl} is not an object with phases",
        )
    return s


def _optional_json(path: Path) -> Any:
    return results.read_json(path) if path.exists() else None


def load_view(run_dir: Path) -> RunView:
    """Read a run folder (raises `results.ResultsError` naming a missing, unreadable or damaged
    file)."""
    root = Path(run_dir)
    if root.is_dir():
        manifest_path = results.RunPaths(root).manifest
        check_manifest(manifest_path, results.read_json(manifest_path))
    run = results.load_run(root)
    interrupted = run.paths.interrupted.exists()
    for v in run.variants:
        if not v.paths.status.exists():
            v.status = (
                {"state": "not_run", "cause": "not reached: the run was interrupted"}
                if interrupted
                else {
                    "state": "missing",
                    "cause": "no variant folder" if not v.paths.root.is_dir() else "no status.json",
                }
            )
        else:
            v.status = check_status(v.paths.status, v.status)
        v.summary = check_summary(v.paths.summary, v.summary)
    probe = run.manifest.get("probe")
    probe_file = run.paths.root / "probe.json"
    if not probe and probe_file.exists():
        try:
            probe = results.read_json(probe_file)
        except results.ResultsError:
            probe = None
    comp_file = run.paths.root / "comparison.json"
    comparison = _optional_json(comp_file)
    if comparison is not None:
        _object(comp_file, comparison)
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
    verdict_file = run.paths.root / VERDICT_FILE
    stored_verdict = _optional_json(verdict_file)
    if stored_verdict is not None:
        _object(verdict_file, stored_verdict)
    view = RunView(
        run.paths.root,
        run.manifest,
        run.variants,
        run.complete,
        interrupted,
        scenario_yaml(run.manifest),
        probe,
        comparison,
        stored_expectations=expectations,
        stored_verdict=stored_verdict,
    )
    for v in run.variants:
        view.requests[v.name] = requests_frame(v.paths.requests, v.name)
        view.samples[v.name] = samples_frame(v.paths.samples, v.name)
    return view

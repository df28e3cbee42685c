"""The run folders a comparison reads and writes: the candidate's baseline (a folder, or the
newest good earlier run of the scenario), what a run says about itself (identity, workload kinds,
thresholds), each variant's requests frame, and comparison.json in the candidate's folder."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import pandas as pd

from harness import results
from harness.expectations import scenario_expectations
from harness.frames import requests_frame
from harness.workloads import workload_kinds
from harness.yaml_lines import YamlLoadError, load_yaml_text

COMPARISON_FILE = "comparison.json"


def run_info(run: results.LoadedRun) -> dict:
    """What comparison.json says about one of its two runs."""
    m = run.manifest
    return {"path": str(run.paths.root), "run_id": run.run_id, "scenario": run.scenario_name,
            "scenario_hash": (m.get("scenario") or {}).get("hash"), "created_at": m.get("created_at"),
            "backend": m.get("backend"), "simulated": m.get("simulated"),
            "sglang": (m.get("sglang") or {}).get("version"), "complete": run.complete}


def run_is_good(run: results.LoadedRun) -> bool:
    """A good baseline: COMPLETE and no variant failed unexpectedly."""
    if not run.complete:
        return False
    return all(v.status.get("expect_met", v.status.get("state") == "ok") is not False
               and v.status.get("state") not in ("not_run", "interrupted") for v in run.variants)


def find_latest_good(results_dir: Path, scenario: str, exclude: Path) -> Path | None:
    """The newest good run of ``scenario`` under ``results_dir``, older than ``exclude`` when
    ``exclude`` is one of them (run ids sort by time), never ``exclude`` itself."""
    exclude = Path(exclude).resolve()
    for p in reversed(results.list_runs(results_dir, scenario)):
        if p.resolve() == exclude or p.name >= exclude.name:
            continue
        try:
            run = results.load_run(p)
        except results.ResultsError:
            continue
        if run_is_good(run):
            return p
    return None


def load_baseline(baseline: str, results_dir: Path, candidate: results.LoadedRun) -> results.LoadedRun | None:
    """The run ``--baseline`` names: a run folder, or ``latest`` — the newest good earlier run of
    the candidate's scenario under ``results_dir`` (None when there is none). Raises
    `results.ResultsError` for a folder that is not a readable run."""
    if baseline == "latest":
        found = find_latest_good(Path(results_dir), candidate.scenario_name, candidate.paths.root)
        return None if found is None else results.load_run(found)
    return results.load_run(Path(baseline))


def run_workload_kinds(manifest: Mapping) -> dict[str, str]:
    """{workload name: kind} of the scenario stored in a run's manifest; {} when there is no
    parseable scenario text (then each workload is taken to be named after its kind)."""
    text = (manifest.get("scenario") or {}).get("text")
    if not text:
        return {}
    try:
        data = load_yaml_text(text, "scenario").data
    except YamlLoadError:
        return {}
    return workload_kinds(data.get("workloads"))


def run_thresholds(manifest: dict) -> tuple[dict[str, float], list[str]]:
    """(the scenario's thresholds as fractions, notes on how the scenario was re-read)."""
    exp = scenario_expectations(manifest)
    notes = [] if exp.problem is None else [f"scenario re-read from its expectations block only ({exp.problem})"]
    return {k: t.fraction for k, t in exp.thresholds.items()}, notes


def variant_requests(variant: results.LoadedVariant) -> pd.DataFrame:
    """The requests frame (`harness.frames`) of one variant of a run."""
    return requests_frame(variant.paths.requests, variant.name)


def write_comparison(candidate: results.LoadedRun, comparison: dict) -> Path:
    """Write comparison.json (a `Comparison.to_dict()`) into the candidate's run folder."""
    path = candidate.paths.root / COMPARISON_FILE
    results.write_json_atomic(path, comparison)
    return path

"""The run folders a comparison reads and writes: the two runs, checked file by file (a damaged
file is a `results.ResultsError` naming it, never a traceback); the baseline (a folder, or
``latest``: the newest earlier run of the same scenario and config whose verdict is PASS);
what a run says about itself (identity, workload kinds and definitions, thresholds, gate,
verdict policy); each variant's requests frame and request records; comparison.json in the
candidate's folder; and accepted.json, the team's explicit acceptance of a run as a baseline
(``harness accept``)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from harness.analysis.expectations import (
    ScenarioExpectations,
    evaluate_run_expectations,
    scenario_expectations,
)
from harness.analysis.frames import requests_frame
from harness.analysis.run_products import (
    EXPECTATIONS_FILE,
    VERDICT_FILE,
    judge_run,
)
from harness.analysis.verdict import Outcome, VerdictPolicy
from harness.core.errors import BadInput
from harness.store import results, run_folder
from harness.store.manifest import BuildInfo, Manifest
from harness.store.products import COMPARISON_FILE
from harness.store.sequence import run_order
from harness.workloads import workload_kinds

ACCEPTED_FILE = "accepted.json"
NO_BASELINE = "no baseline"  # `compared_outcome`'s "against" for a comparison that found none (a first night)


class BaselineMismatch(BadInput):
    """The baseline measured another scenario: nothing in it can be compared (exit 2)."""


# ------------------------------------------------------------------------------ reading a run


def read_run(path: Path) -> run_folder.LoadedRun:
    """`run_folder.load_run`: the manifest, statuses and summaries upgraded and checked for their
    shape. Raises `results.ResultsError` naming the file."""
    return run_folder.load_run(Path(path))


def run_info(run: run_folder.LoadedRun) -> dict:
    """What comparison.json says about one of its two runs."""
    m = run.manifest
    return {
        "path": str(run.paths.root),
        "run_id": run.run_id,
        "scenario": run.scenario_name,
        "scenario_hash": m.scenario.hash,
        "created_at": m.created_at,
        "backend": m.backend,
        "simulated": m.simulated,
        "sglang": m.sglang.get("version"),
        "complete": run.complete,
    }


def variant_builds(run: run_folder.LoadedRun) -> dict[str, BuildInfo]:
    """{variant: its build as the manifest records it (harness/run/builds.py)}; runs recorded before
    builds were have none."""
    return {e.name: e.build for e in run.manifest.variants if e.build is not None}


def build_change(base: BuildInfo | None, cand: BuildInfo | None) -> str | None:
    """How a variant's sglang build differs between two runs (version, checkout commit or dirty
    state, imported path), or None (the same, or not recorded in both)."""
    if base is None or cand is None:
        return None

    def ident(b: BuildInfo) -> tuple:
        return (b.version, b.commit, b.dirty, b.imported_file)

    if ident(base) == ident(cand):
        return None

    def show(b: BuildInfo) -> str:
        commit = f"@{str(b.commit)[:10]}{'+dirty' if b.dirty else ''}" if b.commit else ""
        return f"{b.build} {b.version}{commit}"

    return f"build changed: {show(base)} → {show(cand)}"


def config_hashes(run: run_folder.LoadedRun) -> dict[str, str | None]:
    """{variant: config hash} as the run's manifest records them."""
    return {e.name: e.config_hash for e in run.manifest.variants}


def run_workload_kinds(manifest: Manifest) -> dict[str, str]:
    """{workload name: kind} of the scenario stored in a run's manifest; {} when there is no
    parseable scenario text (then each workload is taken to be named after its kind)."""
    return workload_kinds(manifest.scenario.data.get("workloads"))


def run_workload_specs(manifest: Manifest) -> dict[str, object]:
    """{workload name: its entry in the stored scenario text, as written} ({} without one)."""
    out: dict[str, object] = {}
    for w in manifest.scenario.data.get("workloads") or []:
        if isinstance(w, Mapping) and isinstance(w.get("kind"), str):
            out[str(w.get("name") or w["kind"])] = dict(w)
    return out


def run_expectations(manifest: Manifest) -> ScenarioExpectations:
    """The stored scenario's thresholds, gate and checks (`harness.analysis.expectations`)."""
    return scenario_expectations(manifest)


def run_policy(manifest: Manifest) -> VerdictPolicy:
    """The stored scenario's ``verdict:`` rules (defaults when there are none)."""
    try:
        return VerdictPolicy.from_block(manifest.scenario.block("verdict") or None)
    except (TypeError, ValueError):
        return VerdictPolicy()


def variant_requests(variant: run_folder.LoadedVariant) -> pd.DataFrame:
    """The requests frame (`harness.analysis.frames`) of one variant of a run."""
    return _request_rows(variant, lambda path: requests_frame(path, variant.name))


def _request_rows(variant: run_folder.LoadedVariant, read: Callable[[Path], Any]) -> Any:
    """``read(requests.jsonl)``, rows that are not request records as a `results.ResultsError`."""
    try:
        return read(variant.paths.requests)
    except results.ResultsError:
        raise
    except (TypeError, ValueError, AttributeError, KeyError) as exc:
        raise results.ResultsError(
            f"{variant.paths.requests}: rows that are not request records ({type(exc).__name__}: {exc})"
        ) from None


def write_comparison(candidate: run_folder.LoadedRun, comparison: dict) -> Path:
    """Write comparison.json (a `Comparison.to_dict()`) into the candidate's run folder."""
    path = candidate.paths.root / COMPARISON_FILE
    results.write_json_atomic(path, comparison)
    return path


# ------------------------------------------------------------------------------ the baseline


@dataclass
class BaselineChoice:
    """The baseline run (None: none found) and why it was chosen; ``passed_over``: the newer
    runs that were not, each with its reason."""

    run: run_folder.LoadedRun | None
    how: str
    passed_over: list[str] = field(default_factory=list)
    pool: list[run_folder.LoadedRun] = field(default_factory=list)  # older baselines pooled with ``run``

    def lines(self) -> list[str]:
        out = [self.how]
        if self.passed_over:
            shown = self.passed_over[:5]
            more = f" (+{len(self.passed_over) - 5} more)" if len(self.passed_over) > 5 else ""
            out.append("passed over: " + "; ".join(shown) + more)
        return out


def stored_outcome(run: run_folder.LoadedRun) -> tuple[str | None, str]:
    """(the run's verdict outcome, where it came from): its verdict.json, else (a run older than
    verdict.json) judged from its stored files with the same rules (`harness.analysis.run_products.judge_run`);
    (None, why) when neither can be read."""
    path = run.paths.root / VERDICT_FILE
    if path.exists():
        try:
            data = results.read_json(path)
        except results.ResultsError as exc:
            return None, str(exc)
        outcome = data.get("outcome") if isinstance(data, dict) else None
        return (outcome, "verdict.json") if isinstance(outcome, str) else (None, f"{path}: no outcome")
    try:
        exp_path = run.paths.root / EXPECTATIONS_FILE
        rows = None if exp_path.exists() else evaluate_run_expectations(run.paths.root)
        return judge_run(run.paths.root, rows).outcome.value, "judged from its files (no verdict.json)"
    except (results.ResultsError, TypeError, ValueError, AttributeError, KeyError) as exc:
        return None, f"cannot be judged ({type(exc).__name__}: {exc})"


def same_config(base: run_folder.LoadedRun, cand: run_folder.LoadedRun) -> str | None:
    """Why ``base`` did not measure what ``cand`` measures (scenario text or a variant's config
    hash differs, or a variant is missing); None when it did."""
    b_hash, c_hash = base.manifest.scenario.hash, cand.manifest.scenario.hash
    if b_hash != c_hash:
        return "scenario text changed"
    bh, ch = config_hashes(base), config_hashes(cand)
    missing = [n for n in ch if n not in bh]
    if missing:
        return "lacks variant " + ", ".join(missing)
    changed = [n for n in ch if bh[n] != ch[n]]
    if changed:
        return "config changed for " + ", ".join(changed)
    return None


def accept_run(run: run_folder.LoadedRun, note: str, by: str, at: str) -> Path:
    """Mark ``run`` accepted as a baseline (accepted.json in its folder, written atomically):
    ``--baseline latest`` may then take it even though its own comparison failed, and a pool of
    baselines never reaches past it (the team said: this is the new normal)."""
    comparison, _ = compared_outcome(run)
    path = run.paths.root / ACCEPTED_FILE
    results.write_json_atomic(path, {"accepted_at": at, "by": by, "note": note, "comparison_verdict": comparison})
    return path


def accepted(run: run_folder.LoadedRun) -> dict | None:
    """The run's accepted.json (None: not accepted, or the file is not an object)."""
    path = run.paths.root / ACCEPTED_FILE
    if not path.exists():
        return None
    try:
        data = results.read_json(path)
    except results.ResultsError:
        return None
    return data if isinstance(data, dict) else None


def compared_outcome(run: run_folder.LoadedRun) -> tuple[str | None, str]:
    """(the verdict of the run's own comparison.json, against what) — (None, "") when it was
    never compared, or the file cannot be read."""
    path = run.paths.root / COMPARISON_FILE
    if not path.exists():
        return None, ""
    try:
        data = results.read_json(path)
    except results.ResultsError:
        return None, ""
    if not isinstance(data, dict) or not isinstance(data.get("verdict"), str):
        return None, ""
    base = data.get("baseline") if isinstance(data.get("baseline"), dict) else {}
    return data["verdict"], str(base.get("run_id") or NO_BASELINE)


def choose_latest(results_dir: Path, cand: run_folder.LoadedRun, pool: int = 1) -> BaselineChoice:
    """``--baseline latest``: the newest run of the candidate's scenario under ``results_dir``
    that is older than the candidate, COMPLETE, not a shard, has the same scenario text and
    variant config hashes, whose verdict is PASS, and whose own comparison neither FAILed nor
    was INCONCLUSIVE against a baseline (a regressed night is never a baseline, nor one whose
    regression was too small or too noisy to prove, so a regressed build stays red night after
    night; a first night, compared with no baseline, is one) — unless the run was accepted
    (`accept_run`: eligible whatever its verdicts). A FAIL,
    INCONCLUSIVE or unreadable run is never picked; each newer run passed over is listed with its
    reason. ``pool`` > 1: up to that many such runs, newest first (`BaselineChoice.pool` holds
    the older ones), never reaching past an accepted run."""
    passed: list[str] = []
    picked: list[tuple[run_folder.LoadedRun, str]] = []
    exclude = cand.paths.root.resolve()
    # Earlier: numbered before it in its own folder (run ids are stamps of a clock that may have
    # been set back); a candidate from another folder is placed by its id among these runs.
    beside = exclude.parent == (Path(results_dir) / results.safe_name(cand.scenario_name)).resolve()
    order = run_order if beside else (lambda p: Path(p).name)
    cand_order = order(cand.paths.root)
    for p in reversed(results.list_runs(Path(results_dir), cand.scenario_name)):
        if p.resolve() == exclude or order(p) >= cand_order:
            continue
        try:
            run = read_run(p)
        except results.ResultsError as exc:
            passed.append(f"{p.name} (unreadable: {exc})")
            continue
        if not run.complete:
            passed.append(f"{p.name} (not COMPLETE)")
            continue
        if run.manifest.shard:
            passed.append(f"{p.name} (a shard)")
            continue
        differs = same_config(run, cand)
        if differs:
            passed.append(f"{p.name} ({differs})")
            continue
        accept = accepted(run)
        outcome, source = stored_outcome(run)
        if accept is None and outcome != Outcome.PASS.value:
            passed.append(f"{p.name} (verdict {outcome or 'unknown'}: {source})")
            continue
        compared, against = compared_outcome(run)
        if accept is None and compared == Outcome.FAIL.value:
            passed.append(
                f"{p.name} (its own comparison with {against} FAILed: a regressed night is no baseline; "
                f"`harness accept {p}` makes it one)"
            )
            continue
        if accept is None and compared == Outcome.INCONCLUSIVE.value and against != NO_BASELINE:
            passed.append(
                f"{p.name} (its own comparison with {against} was INCONCLUSIVE: a night not shown to be as good "
                f"as its baseline is no baseline, or a regression too small to prove would pass from the next "
                f"night on; `harness accept {p}` makes it one)"
            )
            continue
        why = f"accepted ({accept.get('accepted_at')}: {accept.get('note') or 'no note'})" if accept else source
        picked.append((run, why))
        if len(picked) >= pool or accept is not None:
            break
    if not picked:
        return BaselineChoice(
            None,
            f"no baseline: no earlier run of {cand.scenario_name} under {results_dir} "
            "with the same scenario and config has the verdict PASS and a comparison (if any) that PASSed or had no baseline",
            passed,
        )
    (run, why), older = picked[0], picked[1:]
    how = (
        f"baseline {run.run_id}: the newest earlier run of {cand.scenario_name} "
        f"with the same scenario and config whose verdict is PASS and whose comparison (if any) PASSed or had no baseline ({why})"
    )
    if older:
        how += f"; pooled with the {len(older)} before it: " + ", ".join(r.run_id for r, _ in older)
    return BaselineChoice(run, how, passed, [r for r, _ in older])


MAX_POOL = 1000  # nights pooled as one baseline side: more is a typo (each is read whole)


def pool_problem(pool: int) -> str | None:
    """What is wrong with ``--pool K`` (nights pooled as the baseline side), or None."""
    if not 1 <= pool <= MAX_POOL:
        return f"--pool {pool}: expected 1..{MAX_POOL} nights"
    return None


def load_baseline(baseline: str, results_dir: Path, candidate: run_folder.LoadedRun, pool: int = 1) -> BaselineChoice:
    """The run ``--baseline`` names: a run folder, or ``latest`` (`choose_latest`, with up to
    ``pool`` runs pooled). Raises `results.ResultsError` for a folder that is not a readable run
    and `BaselineMismatch` for a run of another scenario."""
    if baseline == "latest":
        return choose_latest(Path(results_dir), candidate, pool)
    run = read_run(Path(baseline))
    check_same_scenario(run, candidate)
    return BaselineChoice(run, f"baseline {run.run_id}: given (--baseline {baseline})")


def check_same_scenario(base: run_folder.LoadedRun, cand: run_folder.LoadedRun) -> None:
    """Raise `BaselineMismatch` when the two runs are of different scenarios."""
    if base.scenario_name != cand.scenario_name:
        raise BaselineMismatch(
            f"the baseline {base.paths.root} is a run of scenario {base.scenario_name!r}, the candidate "
            f"{cand.paths.root} of {cand.scenario_name!r}: runs of different scenarios cannot be compared"
        )


def find_latest_good(results_dir: Path, scenario: str, exclude: Path) -> Path | None:
    """The path `choose_latest` would pick for the run at ``exclude`` (None when there is none)."""
    cand = read_run(Path(exclude))
    if cand.scenario_name != scenario:
        return None
    found = choose_latest(Path(results_dir), cand).run
    return None if found is None else found.paths.root

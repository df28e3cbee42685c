"""Combine runs of one scenario (usually ``--shard I/N`` runs from several hosts) into one run folder.

``harness merge RUN_DIR... [--results-dir DIR]`` writes ``DIR/<scenario>/<new run_id>/`` in the
ordinary layout (docs/architecture.md), so ``report``, ``compare`` and ``history`` read it like
any other run. Rules (docs/sharding.md):

* Every input must be a run folder whose manifest, status.json and summary.json files have the
  shape a run's have, else exit 2 naming the damaged file.
* Every input must hold the same scenario text (same ``scenario.hash``), else exit 2 naming each
  run and its hash. A merged run is not accepted as input (merge the shard runs themselves).
* A variant present in several inputs must have one config hash everywhere (``${VAR}`` may expand
  differently on different hosts), else exit 2 naming the variant and the hashes. One copy is
  kept, chosen by: the copy from the shard the variant is *assigned* to before a *support* copy
  (the parity baseline a shard ran for itself), then a complete copy (final state + summary)
  before an incomplete one, then a copy from a COMPLETE run, then the later run. The others are
  listed under ``merge.dropped``.
* Parity is not recomputed: each ON arm keeps the verdict its own shard computed against the
  baseline run *on the same host*. ``summary.csv`` is rebuilt from the kept summaries.
* The manifest keeps every input's host fingerprint under ``shards: [{run_id, host, variants,
  ...}]``; ``host`` is the first shard's. Variant folders are hard-linked (copied across file
  systems), so the shard runs must be treated as read-only afterwards (resume moves folders aside,
  it never writes into old files).
* ``COMPLETE`` is written only when every input was complete, every shard 1..N of the count is
  present and every variant of the scenario has a complete copy; before it, as a finished run
  has them, ``expectations.json`` (the scenario's within-run checks over the merged arms) and
  ``verdict.json``. An incomplete merge has neither (no verdict yet: its report says INCOMPLETE).
  Exit 0 then (1 when a variant missed its expectation); 1 with the folder written but
  incomplete; 2 on a refusal.
"""

from __future__ import annotations

import errno
import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from harness.analysis import run_products
from harness.analysis.expectations import evaluate_run_expectations
from harness.analysis.run_products import write_summary_csv
from harness.analysis.verdict import RunVerdict
from harness.core.errors import BadInput
from harness.store import results, run_folder
from harness.store.manifest import Manifest, read_manifest
from harness.store.secrets import Redactor
from harness.store.variant_status import FINAL_STATES, variant_state

PARITY_SCOPE = "per-shard: each arm's parity verdict was computed against the baseline run on its own host"


class MergeRefused(BadInput):
    """The inputs cannot be merged (the message says why)."""


@dataclass
class Source:
    root: Path
    manifest: Manifest

    @property
    def run(self) -> results.RunPaths:
        return results.RunPaths(self.root)

    @property
    def run_id(self) -> str:
        return self.root.name

    @property
    def shard(self) -> Mapping | None:
        return self.manifest.shard or None

    @property
    def complete(self) -> bool:
        return self.run.complete.exists()

    def role(self, name: str) -> str:
        """``assigned`` (the shard owns it, or the run is not a shard) or ``support``."""
        sh = self.shard
        if sh and name in (sh.get("support") or []) and name not in (sh.get("assigned") or []):
            return "support"
        return "assigned"

    def sort_key(self) -> tuple:
        sh = self.shard or {}
        return (sh.get("index") or 0, self.manifest.created_at or "", self.run_id)


@dataclass
class Candidate:
    source: Source
    entry: dict
    state: str

    @property
    def name(self) -> str:
        return self.entry["name"]

    def rank(self) -> tuple:
        return (
            self.source.role(self.name) == "assigned",
            self.state in FINAL_STATES,
            self.source.complete,
            self.source.manifest.created_at or "",
            self.source.run_id,
        )


@dataclass
class MergePlan:
    sources: list[Source]
    order: list[str]
    chosen: dict[str, Candidate]
    dropped: list[dict] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # why the merge is not COMPLETE

    @property
    def complete(self) -> bool:
        return not self.problems


def load_sources(run_dirs: list[Path]) -> list[Source]:
    seen: dict[Path, Source] = {}
    for d in run_dirs:
        root = Path(d)
        if not (root / results.MANIFEST).exists():
            raise MergeRefused(f"{root}: not a run folder (no {results.MANIFEST})")
        try:
            manifest = read_manifest(root)
            for entry in manifest.variants:  # a damaged file is refused, never copied
                results.check_variant_files(results.RunPaths(root), entry.name)
        except results.ResultsError as exc:
            raise MergeRefused(str(exc)) from None
        if manifest.kind != "run":
            raise MergeRefused(f"{root}: manifest kind {manifest.raw.get('kind')!r}, expected 'run'")
        if manifest.raw.get("merged_from"):
            raise MergeRefused(f"{root}: already a merged run; merge the shard runs it was made from")
        seen.setdefault(root.resolve(), Source(root, manifest))
    if not seen:
        raise MergeRefused("no run folders given")
    return sorted(seen.values(), key=Source.sort_key)


def plan_merge(sources: list[Source]) -> MergePlan:
    """Check the inputs belong together and choose one copy of every variant (pure on the folders)."""
    hashes = {s.manifest.scenario.hash for s in sources}
    if len(hashes) != 1:
        lines = [f"  {s.root}: scenario {s.manifest.scenario.name!r} hash {s.manifest.scenario.hash}" for s in sources]
        raise MergeRefused(
            "runs of different scenarios (or different scenario texts) cannot be merged:\n" + "\n".join(lines)
        )
    candidates: dict[str, list[Candidate]] = {}
    first_seen: list[str] = []
    for s in sources:
        for entry in (dict(e.raw) for e in s.manifest.variants):
            name = entry["name"]
            if name not in candidates:
                candidates[name] = []
                first_seen.append(name)
            candidates[name].append(Candidate(s, entry, variant_state(s.run, name)))
    conflicts = []
    for name, cands in candidates.items():
        found = {c.entry.get("config_hash") for c in cands}
        if len(found) > 1:
            conflicts.append(
                f"  variant {name!r}: " + ", ".join(f"{c.entry.get('config_hash')} in {c.source.root}" for c in cands)
            )
    if conflicts:
        raise MergeRefused(
            "a variant has different server configurations in different runs "
            "(a ${VAR} expanded differently?):\n" + "\n".join(conflicts)
        )

    order: list[str] = []
    for s in sorted(sources, key=lambda s: -len((s.shard or {}).get("all_variants") or [])):
        for name in (s.shard or {}).get("all_variants") or []:
            if name not in order:
                order.append(name)
    expected = list(order)
    order += [n for n in first_seen if n not in order]
    if not expected:
        expected = list(first_seen)

    chosen: dict[str, Candidate] = {}
    dropped: list[dict] = []
    for name in order:
        cands = candidates.get(name)
        if not cands:
            continue
        ranked = sorted(cands, key=Candidate.rank, reverse=True)
        chosen[name] = ranked[0]
        for c in ranked[1:]:
            dropped.append(
                {
                    "variant": name,
                    "run_id": c.source.run_id,
                    "role": c.source.role(name),
                    "state": c.state,
                    "kept_from": ranked[0].source.run_id,
                }
            )
    order = [n for n in order if n in chosen]

    problems: list[str] = []
    for s in sources:
        if not s.complete:
            marker = "INTERRUPTED" if s.run.interrupted.exists() else "no COMPLETE marker"
            problems.append(f"run {s.run_id} is not complete ({marker}); resume it and merge again")
    counts = {(s.shard or {}).get("count") for s in sources if s.shard}
    if len(counts) == 1:
        n = counts.pop()
        have = {s.shard["index"] for s in sources if s.shard}
        missing = [i for i in range(1, n + 1) if i not in have]
        if missing:
            problems.append(f"shard(s) {', '.join(f'{i}/{n}' for i in missing)} missing")
    elif len(counts) > 1:
        problems.append(f"shards of different counts ({', '.join(map(str, sorted(counts)))}) were merged")
    for name in expected:
        if name not in chosen:
            problems.append(f"variant {name} is in no input run")
        elif chosen[name].state not in FINAL_STATES:
            problems.append(
                f"variant {name} is not complete ({chosen[name].state}) in run {chosen[name].source.run_id}"
            )
    return MergePlan(sources, order, chosen, dropped, problems)


def _link_or_copy(src: str, dst: str) -> None:
    try:
        os.link(src, dst)
    except OSError as exc:
        if exc.errno not in (errno.EXDEV, errno.EPERM, errno.EMLINK, errno.ENOTSUP, errno.EACCES):
            raise
        shutil.copy2(src, dst)


def _shard_entry(s: Source, plan: MergePlan) -> dict:
    sh = s.shard or {}
    return {
        "run_id": s.run_id,
        "path": str(s.root),
        "index": sh.get("index"),
        "count": sh.get("count"),
        "complete": s.complete,
        "host": s.manifest.raw.get("host"),
        "sglang": s.manifest.raw.get("sglang"),
        "probe": s.manifest.raw.get("probe"),
        "created_at": s.manifest.created_at,
        "assigned": sh.get("assigned"),
        "support": sh.get("support") or [],
        "variants": [n for n in plan.order if plan.chosen[n].source is s],
        "resumes": len(s.manifest.raw.get("resumes") or []),
    }


def write_merged(plan: MergePlan, results_dir: Path, argv: list[str] = ()) -> tuple[Path, RunVerdict | None]:
    first = plan.sources[0]
    scenario_name = first.manifest.scenario.name
    run = results.create_run_dir(results_dir, scenario_name)
    for name in plan.order:
        c = plan.chosen[name]
        src = c.source.run.variant(name).root
        if src.exists():
            shutil.copytree(src, run.variant(name).root, copy_function=_link_or_copy)
    manifest = {k: v for k, v in first.manifest.raw.items() if k not in ("shard", "resumes")}
    manifest.update(
        created_at=results.utc_now_iso(),
        harness_argv=Redactor().learn(list(argv)).argv(argv),
        variants=[{**plan.chosen[n].entry, "from_run": plan.chosen[n].source.run_id} for n in plan.order],
        merged_from=[s.run_id for s in plan.sources],
        shards=[_shard_entry(s, plan) for s in plan.sources],
        merge={"complete": plan.complete, "problems": plan.problems, "dropped": plan.dropped, "parity": PARITY_SCOPE},
    )
    results.write_json_atomic(run.manifest, manifest)
    write_summary_csv(run, plan.order)  # parity stays as each shard judged it on its own host
    if plan.complete:  # what a finished run writes (runner.finish_run), then its COMPLETE marker
        rows = evaluate_run_expectations(run.root)
        results.write_json_atomic(
            run.root / run_products.EXPECTATIONS_FILE, {"schema_version": results.SCHEMA_VERSION, "checks": rows}
        )
        verdict = run_products.judge_run(run.root, rows)
        run_products.write_verdict(run, verdict)
        results.write_json_atomic(run.complete, {"at": results.utc_now_iso(), "merged": True})
        return run.root, verdict
    return run.root, None


@dataclass
class MergeResult:
    root: Path  # the merged run folder
    plan: MergePlan
    unmet: list[str] = field(default_factory=list)  # variants that missed their expectation (complete merges)
    verdict: RunVerdict | None = None  # the merged run's verdict.json (complete merges): the exit code


def merge_runs(run_dirs: list[Path], results_dir: Path, argv: list[str] = ()) -> MergeResult:
    """Merge ``run_dirs`` into a new run folder under ``results_dir``; MergeRefused if they do not
    belong together. Whether the result is complete is ``result.plan.complete`` (and its manifest's
    ``merge.complete``). ``argv``: the harness command line, kept in the manifest."""
    plan = plan_merge(load_sources([Path(d) for d in run_dirs]))
    root, verdict = write_merged(plan, Path(results_dir), argv)
    unmet = []
    if plan.complete:
        unmet = [v.name for v in run_folder.load_run(root).variants if v.status.expect_met is False]
    return MergeResult(root, plan, unmet, verdict)

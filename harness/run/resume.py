"""Resume an interrupted run into its own folder: skip complete variants, rerun the rest (P8).

A variant is *complete* when its ``status.json`` holds a final state (``variant_status.FINAL_STATES``:
ok, startup_failed, refused, failed) and its ``summary.json`` exists. The runner marks the variant
it was in ``interrupted`` on Ctrl-C/SIGTERM and a SIGKILL leaves it ``running``, so neither can look
complete. ``partial``, ``interrupted``, ``running``, a missing or unreadable status → rerun.

A variant that is rerun has its old folder moved aside to ``<run>/.attempts/<dir>.<k>/`` (never
read by ``load_run``, kept as evidence, its server logs scrubbed of the run's secrets), so the
fresh attempt starts with empty JSONL files and no request row can appear twice.

Resume refuses (``ResumeRefused``, a ``ValueError``: exit 2) when the scenario file's hash
differs from the manifest's, when a variant's server configuration hash differs (the message
names the variant and both hashes), when the run is a merge, when ``--only``/``--shard``
would select other variants than the run holds, or when a result file has the wrong shape
(the message names the file). The run id and folder stay the same; the manifest gains a
``resumes`` entry per resume (time, argv, host, skipped, rerun).

``harness run --resume`` is :func:`check_resume`, then :func:`reopen_run`, then
``runner.execute_run`` on the variants it returns (the command line chains them).
:func:`reopen_run` takes the run's lock (``results.RunLocked`` when another process holds it)
and keeps it in the :class:`ReopenedRun` until the run has ended, so two resumes of one run
never interleave: the second is refused before it touches anything.
"""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from harness.core.errors import BadInput
from harness.host import fingerprint
from harness.run.manifest import run_redactor
from harness.run.shard import select_run_variants
from harness.scenario import variant_config_hash
from harness.server.process import clear_orphans
from harness.store import results
from harness.store.manifest import read_manifest
from harness.store.variant_status import FINAL_STATES, VariantOutcome, read_status, variant_state

if TYPE_CHECKING:
    from harness.scenario.models import Scenario


class ResumeRefused(BadInput, ValueError):
    """The run cannot be resumed with this scenario (the message says why)."""


@dataclass
class ResumePlan:
    run_dir: Path
    manifest: dict
    skip: list[str] = field(default_factory=list)  # complete: not rerun
    rerun: list[str] = field(default_factory=list)  # manifest order
    why: dict[str, str] = field(default_factory=dict)  # rerun name -> state seen
    refusals: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.refusals

    def describe(self) -> str:
        lines = [f"resume {self.run_dir}: {len(self.skip)} complete, {len(self.rerun)} to rerun"]
        lines += [f"  skip  {n}" for n in self.skip]
        lines += [f"  rerun {n} ({self.why.get(n, '?')})" for n in self.rerun]
        return "\n".join(lines)


def holds_only_its_lock(run_dir: Path) -> bool:
    """A folder whose harness was killed between taking the run's lock and writing its manifest:
    nothing in it but ``.lock``, so nothing measured to keep (the run starts again in it)."""
    try:
        return [p.name for p in Path(run_dir).iterdir()] == [results.LOCK_FILE]
    except OSError:
        return False


def check_fresh_start(scenario: Scenario, run_dir: Path) -> None:
    """A lock-only folder is started in only where this scenario's runs live (``<results>/<its
    name>/<run id>``); ResumeRefused otherwise."""
    want = results.safe_name(scenario.name)
    if Path(run_dir).resolve().parent.name != want:
        raise ResumeRefused(
            f"cannot resume {run_dir}: it holds only a .lock and is not under a folder named {want} "
            f"(where runs of scenario {scenario.name} go); start a new run instead"
        )


def plan_resume(run_dir: Path, scenario: Scenario, variants: list | None = None) -> ResumePlan:
    """Compare the run's manifest with the scenario now and sort its variants into skip/rerun.

    ``variants``: the scenario's expanded variants (default: all of them). Refusals are collected,
    not raised, so that every changed hash is reported at once.
    """
    run_dir = Path(run_dir)
    run = results.RunPaths(run_dir)
    try:
        manifest = read_manifest(run_dir)
    except results.ResultsError as exc:
        return ResumePlan(run_dir, {}, refusals=[f"{exc} (not a run folder this harness can resume)"])
    plan = ResumePlan(run_dir, copy.deepcopy(dict(manifest.raw)))
    if manifest.kind != "run" or manifest.raw.get("merged_from"):
        plan.refusals.append(
            f"{run.manifest}: a merged run cannot be resumed; resume the shard run(s) it was made from and merge again"
        )
        return plan
    old_hash = manifest.scenario.hash
    if old_hash != scenario.hash:
        plan.refusals.append(
            f"scenario changed since the run: {scenario.path or scenario.name} hashes {scenario.hash} now, "
            f"the run was made from {old_hash} ({run.manifest}); start a new run instead"
        )
        return plan
    by_name = {v.name: v for v in (variants if variants is not None else scenario.expand_variants())}
    for entry in manifest.variants:
        name = entry.name
        v = by_name.get(name)
        if v is None:
            plan.refusals.append(f"variant {name!r} of the run is not in the scenario now")
            continue
        now = variant_config_hash(scenario, v)
        if entry.config_hash != now:
            plan.refusals.append(
                f"variant {name!r}: server configuration changed (config hash {entry.config_hash} "
                f"in the run, {now} now); a resumed run must not mix configurations — start a new run"
            )
            continue
        try:  # a status that is not JSON at all is rerun; any other damage is the user's to look at
            results.check_variant_files(run, name, torn_status_ok=True)
        except results.ResultsError as exc:
            plan.refusals.append(f"{exc}; repair or remove it")
            continue
        state = variant_state(run, name)
        if state in FINAL_STATES:
            plan.skip.append(name)
        else:
            plan.rerun.append(name)
            plan.why[name] = state
    return plan


def _selection_matches(
    scenario: Scenario, only: list[str] | None, shard: tuple[int, int] | None, manifest: dict
) -> str | None:
    """With --only or --shard given, the selection must be the run's; else a refusal message."""
    if not only and shard is None:
        return None
    variants, _ = select_run_variants(scenario, only, shard)
    want = sorted(v.name for v in variants)
    have = sorted(e["name"] for e in manifest.get("variants", []))
    if want != have:
        return (
            f"--only/--shard select {', '.join(want) or 'nothing'} but the run holds "
            f"{', '.join(have) or 'nothing'}; resume without them (the run keeps its own selection)"
        )
    return None


def check_resume(
    scenario: Scenario, run_dir: Path, only: list[str] | None = None, shard: tuple[int, int] | None = None
) -> ResumePlan:
    """The plan to resume ``run_dir`` with this scenario (and the --only/--shard given, which must
    select what the run holds); :class:`ResumeRefused` listing every reason it cannot be resumed."""
    plan = plan_resume(run_dir, scenario)
    if plan.ok:
        mismatch = _selection_matches(scenario, only, shard, plan.manifest)
        if mismatch:
            plan.refusals.append(mismatch)
    if not plan.ok:
        raise ResumeRefused(f"cannot resume {run_dir}:\n  " + "\n  ".join(plan.refusals))
    return plan


@dataclass
class ReopenedRun:
    """A run folder ready for ``runner.execute_run``: what to rerun and what is already done. It
    holds the run's lock until :meth:`close` (or until it is dropped, or the process ends)."""

    run: results.RunPaths
    variants: list  # the scenario's variants to rerun, in manifest order
    prior: list[VariantOutcome]  # the complete variants, counted in the run's exit code
    lock: results.RunLock | None = None
    orphans_stopped: list[dict] = field(default_factory=list)
    plan: ResumePlan | None = None  # the plan made under the lock (what is actually rerun)

    def close(self) -> None:
        if self.lock is not None:
            self.lock.close()


def reopen_run(plan: ResumePlan, scenario: Scenario, harness_argv: list[str]) -> ReopenedRun:
    """Take the run's lock (``results.RunLocked`` while another process holds it) and keep it;
    plan again under it (another resume may have finished meanwhile: ``ResumeRefused`` if the
    run cannot be resumed now); stop the servers of this results folder whose harness is gone;
    move the variants to rerun aside; drop the end markers and summary.csv; record the resume in
    the manifest."""
    run = results.RunPaths(Path(plan.run_dir))
    lock = results.hold_run_lock(run.root)  # refuse before touching anything while a live process writes it
    try:
        plan = plan_resume(run.root, scenario)
        if not plan.ok:
            raise ResumeRefused(f"cannot resume {run.root}:\n  " + "\n  ".join(plan.refusals))
        redactor = run_redactor(scenario, harness_argv)
        orphans = clear_orphans(run.root.resolve().parent.parent)  # the run's results folder (GpuBusy: exit 2)
        prior = [dataclasses.replace(read_status(run.variant(name).status).outcome(), name=name) for name in plan.skip]
        moved = {
            name: str(p.relative_to(run.root))
            for name in plan.rerun
            if (p := _move_aside(run, name, redactor)) is not None
        }
        for marker in (run.interrupted, run.complete, run.summary_csv):
            marker.unlink(missing_ok=True)
        manifest = plan.manifest
        entry = {
            "at": results.utc_now_iso(),
            "argv": redactor.argv(harness_argv),
            "host": fingerprint.host_fingerprint(),
            "skipped": plan.skip,
            "rerun": [{"variant": n, "was": plan.why[n], "moved_to": moved.get(n)} for n in plan.rerun],
        }
        if orphans:
            entry["orphans_stopped"] = orphans
        manifest.setdefault("resumes", []).append(entry)
        results.write_json_atomic(run.manifest, manifest)
    except BaseException:
        lock.close()
        raise
    by_name = {v.name: v for v in scenario.expand_variants()}
    return ReopenedRun(run, [by_name[n] for n in plan.rerun], prior, lock, orphans, plan)


def _move_aside(run: results.RunPaths, name: str, redactor) -> Path | None:
    vpaths = run.variant(name)
    src = vpaths.root
    if not src.exists():
        return None
    for log_path in vpaths.server_logs():  # a SIGKILLed harness never scrubbed them; their server is stopped
        results.rewrite_lines_atomic(log_path, redactor.text)
    aside = run.attempts
    aside.mkdir(exist_ok=True)
    k = 1
    while (aside / f"{src.name}.{k}").exists():
        k += 1
    dst = aside / f"{src.name}.{k}"
    src.rename(dst)
    return dst

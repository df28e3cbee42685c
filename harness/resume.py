"""Resume an interrupted run into its own folder: skip complete variants, rerun the rest (P8).

A variant is *complete* when its ``status.json`` holds a final state (ok, startup_failed,
refused, skipped, failed) and its ``summary.json`` exists. The runner marks the variant it was in
``interrupted`` on Ctrl-C/SIGTERM and a SIGKILL leaves it ``running``, so neither can look
complete. ``partial``, ``interrupted``, ``running``, a missing or unreadable status → rerun.

A variant that is rerun has its old folder moved aside to ``<run>/.attempts/<dir>.<k>/`` (never
read by ``load_run``, kept as evidence), so the fresh attempt starts with empty JSONL files and no
request row can appear twice.

Resume refuses (``ResumeRefused``, a ``ValueError``: exit 2) when the scenario file's hash
differs from the manifest's, when a variant's server configuration hash differs (the message
names the variant and both hashes), when the run is a merge, or when ``--only``/``--shard``
would select other variants than the run holds. The run id and folder stay the same; the
manifest gains a ``resumes`` entry per resume (time, argv, host, skipped, rerun).
"""

from __future__ import annotations

import fcntl
import os
import socket
import sys
from dataclasses import dataclass, field
from pathlib import Path

from harness import results

FINAL_STATES = frozenset({"ok", "startup_failed", "refused", "skipped", "failed"})
ATTEMPTS_DIR = ".attempts"
LOCK_FILE = ".lock"


class ResumeRefused(ValueError):
    """The run cannot be resumed with this scenario (the message says why)."""


@dataclass
class ResumePlan:
    run_dir: Path
    manifest: dict
    skip: list[str] = field(default_factory=list)     # complete: not rerun
    rerun: list[str] = field(default_factory=list)    # manifest order
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


class RunLock:
    """An exclusive ``flock`` on ``<run>/.lock`` held while a harness process writes the run."""

    def __init__(self, fd: int):
        self._fd = fd

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)  # releases the flock
            self._fd = -1


def hold_run_lock(root: Path) -> RunLock:
    """Lock the run folder or raise :class:`ResumeRefused` when another process holds it."""
    path = Path(root) / LOCK_FILE
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        holder = ""
        try:
            holder = os.pread(fd, 200, 0).decode(errors="replace").strip()
        except OSError:
            pass
        os.close(fd)
        raise ResumeRefused(f"{root}: another harness process is writing this run ({holder or 'lock held'}); "
                            f"wait for it or stop it first") from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()}\n".encode(), 0)
    return RunLock(fd)


def variant_state(run: results.RunPaths, name: str) -> str:
    """The state that decides resume: status.json's state, ``missing`` or ``unreadable``; a final
    state without its summary.json counts as ``no_summary`` (killed between the two writes)."""
    vpaths = run.variant(name)
    if not vpaths.status.exists():
        return "missing"
    try:
        status = results.read_json(vpaths.status)
    except results.ResultsError:
        return "unreadable"
    state = status.get("state") if isinstance(status, dict) else None
    if state in FINAL_STATES and not vpaths.summary.exists():
        return "no_summary"
    return str(state)


def plan_resume(run_dir: Path, scenario, variants: list | None = None) -> ResumePlan:
    """Compare the run's manifest with the scenario now and sort its variants into skip/rerun.

    ``variants``: the scenario's expanded variants (default: all of them). Refusals are collected,
    not raised, so that every changed hash is reported at once.
    """
    from harness.scenario import variant_config_hash

    run_dir = Path(run_dir)
    run = results.RunPaths(run_dir)
    try:
        manifest = results.read_json(run.manifest)
        if not isinstance(manifest, dict):
            raise results.ResultsError(f"{run.manifest}: not a JSON object")
        results.check_schema(run.manifest, manifest)
    except results.ResultsError as exc:
        return ResumePlan(run_dir, {}, refusals=[f"{exc} (not a run folder this harness can resume)"])
    plan = ResumePlan(run_dir, manifest)
    if manifest.get("kind") != "run" or manifest.get("merged_from"):
        plan.refusals.append(f"{run.manifest}: a merged run cannot be resumed; resume the shard run(s) "
                             f"it was made from and merge again")
        return plan
    old_hash = (manifest.get("scenario") or {}).get("hash")
    if old_hash != scenario.hash:
        plan.refusals.append(
            f"scenario changed since the run: {scenario.path or scenario.name} hashes {scenario.hash} now, "
            f"the run was made from {old_hash} ({run.manifest}); start a new run instead")
        return plan
    by_name = {v.name: v for v in (variants if variants is not None else scenario.expand_variants())}
    for entry in manifest.get("variants", []):
        name = entry.get("name")
        v = by_name.get(name)
        if v is None:
            plan.refusals.append(f"variant {name!r} of the run is not in the scenario now")
            continue
        now = variant_config_hash(scenario, v)
        if entry.get("config_hash") != now:
            plan.refusals.append(
                f"variant {name!r}: server configuration changed (config hash {entry.get('config_hash')} "
                f"in the run, {now} now); a resumed run must not mix configurations — start a new run")
            continue
        state = variant_state(run, name)
        if state in FINAL_STATES:
            plan.skip.append(name)
        else:
            plan.rerun.append(name)
            plan.why[name] = state
    return plan


def _selection_matches(scenario, options, manifest: dict) -> str | None:
    """With --only or --shard given, the selection must be the run's; else a refusal message."""
    if not options.only and options.shard is None:
        return None
    from harness.runner import apply_shard, select_variants

    variants = select_variants(scenario.expand_variants(), options.only)
    if options.shard is not None:
        variants, _ = apply_shard(scenario, variants, options.shard)
    want = sorted(v.name for v in variants)
    have = sorted(e["name"] for e in manifest.get("variants", []))
    if want != have:
        return (f"--only/--shard select {', '.join(want) or 'nothing'} but the run holds "
                f"{', '.join(have) or 'nothing'}; resume without them (the run keeps its own selection)")
    return None


def _move_aside(run: results.RunPaths, name: str) -> Path | None:
    src = run.variant(name).root
    if not src.exists():
        return None
    _stop_orphaned_server(run.variant(name).status)
    aside = run.root / ATTEMPTS_DIR
    aside.mkdir(exist_ok=True)
    k = 1
    while (aside / f"{src.name}.{k}").exists():
        k += 1
    dst = aside / f"{src.name}.{k}"
    src.rename(dst)
    return dst


def _stop_orphaned_server(status_path: Path) -> None:
    """A harness killed with SIGKILL leaves its server running (holding GPU and pinned memory):
    status.json recorded the server's identity, so stop it before rerunning the variant."""
    from harness.server import stop_stale_server

    try:
        status = results.read_json(status_path)
    except results.ResultsError:
        return
    if isinstance(status, dict):
        stop_stale_server(status.get("server"))


def resume_run(scenario, options, harness_argv: list[str] | None = None):
    """``harness run SCENARIO --resume RUN_DIR``: rerun what is not complete, then finish the run."""
    from harness import fingerprint
    from harness.runner import RunOutcome, VariantOutcome, execute_run

    plan = plan_resume(options.resume, scenario)
    if plan.ok:
        mismatch = _selection_matches(scenario, options, plan.manifest)
        if mismatch:
            plan.refusals.append(mismatch)
    if not plan.ok:
        raise ResumeRefused(f"cannot resume {options.resume}:\n  " + "\n  ".join(plan.refusals))
    by_name = {v.name: v for v in scenario.expand_variants()}
    if options.dry_run:
        print(plan.describe())
        return RunOutcome(None)

    run = results.RunPaths(Path(options.resume))
    hold_run_lock(run.root).close()  # refuse before touching anything while a live process writes it
    prior = []
    for name in plan.skip:
        status = results.read_json(run.variant(name).status)
        prior.append(VariantOutcome(name, status.get("state"), status.get("cause"),
                                    bool(status.get("expect_met", True))))
    moved = {name: str(p.relative_to(run.root)) for name in plan.rerun
             if (p := _move_aside(run, name)) is not None}
    for marker in (run.interrupted, run.complete, run.summary_csv):
        marker.unlink(missing_ok=True)
    manifest = plan.manifest
    manifest.setdefault("resumes", []).append({
        "at": results.utc_now_iso(),
        "argv": fingerprint.redact_argv(list(harness_argv or sys.argv)),
        "host": fingerprint.host_fingerprint(),
        "skipped": plan.skip,
        "rerun": [{"variant": n, "was": plan.why[n], "moved_to": moved.get(n)} for n in plan.rerun],
    })
    results.write_json_atomic(run.manifest, manifest)
    print(plan.describe(), file=sys.stderr)
    simulated = scenario.server.backend == "sim"
    return execute_run(scenario, options, run, [by_name[n] for n in plan.rerun], simulated, prior=prior)

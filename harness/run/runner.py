"""Run a scenario: for each variant, preflight → start → sample → workloads → quality → liveness
→ stop → cooldown, writing everything into one run folder.

A server failure is a result, never a crash of the harness: a variant that does not come up is
recorded ``startup_failed`` with the cause read from its log and the run goes on to the next
variant; one that dies mid-workload is ``partial`` with its rows kept (P5); one that dies after
its last answer is caught by the final liveness check (P6); one that lives but no longer serves is
``partial`` with cause ``server_hung`` (harness/run/serving_window.py). Ctrl-C or SIGTERM stops the
server tree, flushes files, marks the run interrupted and exits 130 (P15).

Before a fresh run writes anything it stops the servers earlier runs of its results folder left
behind, or refuses while another run's server holds one of its GPUs (``server.clear_orphans``).
Every file it writes goes through the run's one secret redactor (``harness.run.manifest.run_redactor``):
the manifest, each status.json and server_info.json, and the server logs once their server has
stopped (docs/security.md).

:func:`run_scenario` starts a fresh run; :func:`execute_run` runs variants into an existing run
folder (a fresh one, or one that ``harness.run.resume`` reopened).
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from harness.analysis import run_products
from harness.analysis.expectations import evaluate_run_expectations
from harness.analysis.verdict import Outcome, RunVerdict, VerdictPolicy
from harness.core.errors import BadInput
from harness.core.exit_codes import ExitCode
from harness.probe.run import run_probes
from harness.run import builds, external, lanes
from harness.run.estimate import design_warning_lines, design_warnings, request_counts
from harness.run.launched import check_hosts, run_variant
from harness.run.manifest import build_manifest, learn_server_secrets, run_redactor
from harness.run.progress import Progress, plural
from harness.run.shard import select_run_variants
from harness.run.signals import Signals
from harness.run.variant_io import RunState
from harness.server.process import clear_orphans
from harness.store import gpu_time, results
from harness.store.secrets import Redactor
from harness.store.variant_status import VariantOutcome, server_origin

if TYPE_CHECKING:
    from harness.scenario.models import Scenario

log = logging.getLogger(__name__)


@dataclass
class RunOutcome:
    run_dir: Path
    variants: list[VariantOutcome] = field(default_factory=list)
    interrupted: bool = False
    verdict: RunVerdict | None = None
    report_path: Path | None = None
    report_interrupted: bool = False  # the run was COMPLETE; its report was not drawn

    @property
    def exit_code(self) -> ExitCode:
        if self.report_interrupted:
            return ExitCode.INTERRUPTED
        return self.verdict.exit_code if self.verdict is not None else ExitCode.BROKEN


@dataclass
class RunOptions:
    results_dir: Path = Path("results")
    only: list[str] | None = None
    preflight_mode: str | None = None  # overrides scenario.preflight.mode
    # draws a COMPLETE run's HTML report into reports_dir (the CLI passes the report's writer:
    # the report is a later stage, so the runner is handed it rather than importing it); None: no report
    draw_report: Callable[[Path, Path], Path] | None = None
    reports_dir: Path = Path("reports")
    shard: tuple[int, int] | None = None
    live_progress: bool | None = None
    probe: bool = False  # run the platform probes (quick) first and keep them in the manifest
    gpus: list[str] | None = None  # --gpus: run variants side by side, each on its own of these (harness.run.lanes)
    # printed on stderr once the run's inputs are accepted (servers identified, builds, hosts),
    # before its folder is made: the CLI's plan for a verdict; a refused run prints its one line alone
    start_lines: list[str] = field(default_factory=list)
    # --resume of a folder that holds only its .lock (killed before its manifest): the run starts in it
    into: Path | None = None


def run_scenario(scenario: Scenario, options: RunOptions, harness_argv: list[str] = ()) -> RunOutcome:
    """A fresh run of the variants ``options`` select (``--only``, ``--shard``) into a new run
    folder. ValueError (exit 2) names an unknown ``--only`` variant or a bad shard. ``harness_argv``:
    the harness command line, kept (redacted) in the manifest."""
    variants, shard_plan = select_run_variants(scenario, options.only, options.shard)
    simulated = scenario.server.backend == "sim"
    redactor = run_redactor(scenario, harness_argv)
    attached = None
    if scenario.server.backend == "external":  # before any request and any file: EndpointRefused (exit 2)
        attached = external.attach(scenario, variants)
        variants = attached.variants
        learn_server_secrets(redactor, attached, scenario)
        # a simulated server says so (harness/sim): its figures are labelled simulated like sim's
        simulated = any(e.info is not None and e.info.simulated for e in attached.endpoints.values())
    checks = builds.verify_builds(scenario, variants)  # BuildError (exit 2): nothing written, nothing started
    if attached is None:
        check_hosts(variants)  # BadInput (exit 2): a host that does not resolve or is not this machine's
    if options.gpus:  # BadInput (exit 2) before anything is written
        if attached is not None:
            raise BadInput("--gpus: backend external starts no server (its servers' GPUs are their own)")
        lanes.check_fits(variants, options.gpus)
    for line in options.start_lines:
        print(f"harness: {line}", file=sys.stderr)
    with Signals() as signals:
        # GpuBusy (exit 2) before anything is written; an external run starts no server: none to clear
        orphans = clear_orphans(options.results_dir) if attached is None else []
        if options.into is not None:
            run = results.RunPaths(Path(options.into))
        else:
            run = results.create_run_dir(options.results_dir, scenario.name)
        with results.hold_run_lock(run.root):  # from the first file on: a live run is never an orphan
            try:
                manifest = build_manifest(scenario, variants, harness_argv, simulated, redactor, attached, checks)
                if shard_plan is not None:
                    manifest["shard"] = shard_plan.to_json()
                if options.gpus:  # each variant's own set: its status.json gpu_ids
                    manifest["gpus"] = {"ids": list(options.gpus), "side_by_side": True}
                if orphans:
                    manifest["orphans_stopped"] = orphans
                # what the workloads will not exercise as designed (harness.run.estimate.design_warnings)
                manifest["design_warnings"] = {k: list(v) for k, v in design_warnings(scenario, variants).items()}
                if options.probe:
                    # the disk probe measures the storage tier's disk where a variant has one
                    storage_dir = next((d for v in variants if (d := v.storage_dir())), None)
                    manifest["probe"] = run_probes({"quick": True, "storage_dir": storage_dir})
                results.write_json_atomic(run.manifest, manifest)
            except KeyboardInterrupt:  # before any variant: an empty, interrupted run folder
                signals.hold()
                results.write_json_atomic(run.interrupted, {"at": results.utc_now_iso(), "signal": signals.name})
                return RunOutcome(run.root, interrupted=True, verdict=RunVerdict(Outcome.INTERRUPTED))
            return execute_run(scenario, options, run, variants, redactor=redactor, attached=attached, checks=checks)


def execute_run(
    scenario: Scenario,
    options: RunOptions,
    run: results.RunPaths,
    variants: list,
    prior: list[VariantOutcome] | None = None,
    redactor: Redactor | None = None,
    attached: external.AttachedRun | None = None,
    checks: dict[str, builds.BuildCheck] | None = None,
) -> RunOutcome:
    """Run ``variants`` into an existing run folder (fresh or resumed), then finish it.

    ``prior``: outcomes of variants already complete in the folder (resume), counted in the exit code.
    ``redactor``: the run's secrets (default: learnt from the scenario and this process's argv/env).
    ``checks``: the variants' verified builds (default: verified here; ``builds.BuildError``, exit 2,
    before any server starts). Each server's reported version is confirmed against its build's.
    While it runs it holds ``<run>/.lock`` (docs/sharding.md): a second harness on the run is refused.
    """
    if options.preflight_mode is not None:
        scenario.preflight.mode = options.preflight_mode
    redactor = redactor or run_redactor(scenario, sys.argv)
    if scenario.server.backend == "external" and attached is None:  # a resumed run: ask the servers again
        attached = external.attach(scenario, variants)
        variants = attached.variants
        learn_server_secrets(redactor, attached, scenario)
    if checks is None:
        checks = builds.verify_builds(scenario, variants)
    with results.hold_run_lock(run.root):
        return _execute_locked(scenario, options, run, variants, prior, redactor, attached, checks)


def _execute_locked(
    scenario: Scenario,
    options,
    run,
    variants,
    prior,
    redactor: Redactor,
    attached: external.AttachedRun | None = None,
    checks: dict | None = None,
) -> RunOutcome:
    outcome = RunOutcome(run.root, list(prior or []))
    simulated = scenario.server.backend == "sim"
    progress = Progress(len(variants), live=options.live_progress)
    where = ", SIMULATED server" if simulated else (", external servers" if attached is not None else "")
    progress.note(f"run {run.root} ({plural(len(variants), 'variant')}{where})")
    for line in attached.notes() if attached is not None else ():
        progress.note(line)
    for line in design_warning_lines(results.read_json(run.manifest).get("design_warnings") or {}):
        progress.note(line)  # before the first variant: a design that cannot hit is news now, not after
    counts = request_counts(scenario, variants)
    for v in variants if attached is not None else ():  # a running server's pool is known: exact counts
        info = attached.endpoints[v.name].info
        if info is not None and info.max_total_num_tokens:
            counts.update(request_counts(scenario, [v], gpu_pool_tokens=info.max_total_num_tokens))
    state = RunState(redactor, checks)
    state.attached = attached
    side_by_side = None
    if options.gpus:
        side_by_side = _side_by_side(scenario, run, variants, options.gpus, progress, counts, redactor, checks)
        state = side_by_side  # an interrupt or a harness error stops every running variant
    with Signals() as signals:
        try:
            env_not_clean = False
            if side_by_side is not None:
                finished = side_by_side.run(variants)
                outcome.variants.extend(lane.outcome for lane in sorted(finished, key=lambda lane: lane.index))
            for i, variant in enumerate(variants if side_by_side is None else (), 1):
                progress.variant(
                    i,
                    variant.name,
                    requests=counts.get(variant.name),
                    start_phase=server_origin(variant.backend).start_phase,
                )
                vo, env_not_clean = run_variant(scenario, variant, run, progress, state, env_not_clean)
                state.vpaths = state.status = None  # finished: an interrupt now must not relabel it
                outcome.variants.append(vo)
                progress.end_variant(
                    f"variant {variant.name}: {vo.state}{f' ({vo.cause})' if vo.cause else ''}"
                    f"{'' if vo.expect_met else '  [UNEXPECTED]'}"
                )
            progress.phase("finishing the run")
            outcome.verdict = finish_run(scenario, run)
            results.write_json_atomic(run.complete, {"at": results.utc_now_iso()})
            for line in gpu_time.table_lines(gpu_time.run_folder_gpu_time(run)):
                progress.note(line)
        except KeyboardInterrupt:
            signals.hold()
            outcome.interrupted = True
            what = "leaving the running servers as they are" if attached is not None else "stopping the server"
            progress.note(f"interrupted ({signals.name}): {what} and marking the run")
            state.interrupt()
            results.write_json_atomic(run.interrupted, {"at": results.utc_now_iso(), "signal": signals.name})
            outcome.verdict = finish_run(scenario, run, interrupted=True)
            return outcome
        except BaseException:
            signals.hold()
            state.stop_processes()  # a harness bug must not leave the server holding GPU and host memory
            state.scrub_logs()
            raise
        finally:
            progress.close()
        if options.draw_report is not None:
            try:
                outcome.report_path = _write_report(options.draw_report, run.root, options.reports_dir)
            except KeyboardInterrupt:  # the run is COMPLETE; only its report is missing
                signals.hold()
                outcome.report_interrupted = True
    return outcome


def _side_by_side(
    scenario: Scenario, run, variants, gpu_ids, progress: Progress, counts, redactor, checks
) -> lanes.Lanes:
    """The run's variants side by side on ``gpu_ids`` (`harness.run.lanes`), each as
    :func:`run_variant` runs it, with its GPU set."""
    lanes.check_fits(variants, gpu_ids)
    needs = [lanes.gpus_needed(v) for v in variants]
    shared = len(variants) > 1 and len(gpu_ids) >= 2 * min(needs, default=1)  # two can run at once

    def run_one(lane: lanes.Lane):
        return run_variant(
            scenario,
            lane.variant,
            run,
            lanes.LaneProgress(progress, lane),
            lane.state,
            lane.env_not_clean,
            gpu_ids=lane.gpu_ids,
            shared=shared,
        )

    def on_start(lane: lanes.Lane) -> None:
        req = counts.get(lane.variant.name)
        progress.note(
            f"variant {lane.index}/{len(variants)} {lane.variant.name}: starts on GPU {','.join(lane.gpu_ids)}"
            + (f" ({plural(req, 'request')})" if req else "")
        )

    def on_end(lane: lanes.Lane) -> None:
        vo = lane.outcome
        progress.end_variant(
            f"variant {vo.name}: {vo.state}{f' ({vo.cause})' if vo.cause else ''}"
            f"{'' if vo.expect_met else '  [UNEXPECTED]'} [GPU {','.join(lane.gpu_ids)}]"
        )

    progress.note(
        f"side by side on GPUs {','.join(gpu_ids)}: each variant on {'/'.join(map(str, sorted(set(needs))))} of them"
    )
    return lanes.Lanes(gpu_ids, run_one, lambda: RunState(redactor, checks), on_start, on_end)


def finish_run(scenario: Scenario, run: results.RunPaths, interrupted: bool = False) -> RunVerdict:
    """Run-level products once every variant ran (quality parity across arms, summary.csv, the
    scenario's within-run expectations in expectations.json), then the run's verdict
    (verdict.json). An interrupted run gets its verdict only: its arms are not all there."""
    rows: list[dict] = []
    if not interrupted:
        run_products.write_run_products(run, scenario.quality, scenario.cost)
        rows = evaluate_run_expectations(run.root)
        results.write_json_atomic(
            run.root / run_products.EXPECTATIONS_FILE, {"schema_version": results.SCHEMA_VERSION, "checks": rows}
        )
    verdict = run_products.judge_run(run.root, rows, VerdictPolicy.from_block(scenario.verdict.model_dump()))
    run_products.write_verdict(run, verdict)
    return verdict


def _write_report(draw: Callable[[Path, Path], Path], run_root: Path, reports_dir: Path) -> Path | None:
    """The HTML report; a report that cannot be drawn never loses the run (it is already COMPLETE)."""
    try:
        return draw(run_root, reports_dir)
    except BadInput as exc:  # e.g. its target is a FIFO or a link (harness.store.targets): one line
        log.warning("no report: %s; `harness report %s --reports-dir DIR` draws it elsewhere", exc, run_root)
        return None
    except Exception:  # noqa: BLE001 - logged; `harness report RUN` can redo it
        log.exception("could not write the report of %s; run `harness report %s` to retry", run_root, run_root)
        return None

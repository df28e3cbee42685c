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
Every file it writes goes through the run's one secret redactor (``fingerprint.run_redactor``):
the manifest, each status.json and server_info.json, and the server logs once their server has
stopped (docs/security.md).

:func:`run_scenario` starts a fresh run; :func:`execute_run` runs variants into an existing run
folder (a fresh one, or one that ``harness.run.resume`` reopened).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
import shlex
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path

from harness import __version__
from harness.analysis import run_products
from harness.analysis.expectations import evaluate_run_expectations
from harness.analysis.verdict import Outcome, RunVerdict, VerdictPolicy
from harness.core.errors import BadInput
from harness.core.exit_codes import ExitCode
from harness.host import fingerprint, nvml
from harness.measures import roofline, tier_model
from harness.probe.run import run_probes
from harness.run import builds, cooldown, external, hostpool, lanes, serving_window
from harness.run.estimate import design_warning_lines, design_warnings, request_counts
from harness.run.progress import Progress, plural
from harness.run.sampler import Sampler
from harness.run.shard import select_run_variants
from harness.scenario import scenario_hash, variant_config_hash
from harness.server import logscan, startup_phases
from harness.server.client import client_stack
from harness.server.info import BAD_SERVER_ANSWER, SERVER_CHANGED, ServerAnswerError, fetch_server_info
from harness.server.process import ExternalServer, ServerProcess, build_launch_spec, clear_orphans, free_port
from harness.sim.cli import unmodelled_flags
from harness.store import gpu_time, results
from harness.store.secrets import Redactor
from harness.store.variant_status import (
    ATTACHED,
    FAILED,
    LAUNCHED,
    OK,
    REFUSED,
    STARTUP_FAILED,
    VariantOutcome,
    VariantStatus,
    server_origin,
)

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


def describe_launch(scenario, variant, port: int = 30000, redactor: Redactor | None = None) -> dict:
    """A variant's launch argv and env additions, secrets redacted (``redactor``: the run's; by
    default one that learns the scenario's). An external variant starts nothing: no argv."""
    redactor = redactor or fingerprint.run_redactor(scenario)
    if variant.backend == "external":
        return {"name": variant.name, "argv": [], "env": {}, "simulated": False, "url": variant.url}
    spec = build_launch_spec(scenario, variant, port)
    return {
        "name": variant.name,
        "argv": redactor.argv(spec.argv),
        "env": redactor.scenario_env(dict(spec.env_overrides)),
        "simulated": spec.simulated,
    }


def dry_run_text(scenario, variants: list) -> str:
    """Each variant's exact argv and env additions, shell-quoted, secrets redacted
    (``harness run --dry-run``)."""
    redactor = fingerprint.run_redactor(scenario)
    out = []
    for v in variants:
        d = describe_launch(scenario, v, redactor=redactor)
        if v.backend == "external":
            out.append(
                f"# variant {v.name} (external): {v.url}\n# nothing is started: the running server is measured\n\n"
            )
            continue
        out.append(f"# variant {v.name}{' (simulated)' if d['simulated'] else ''}\n")
        out.extend(f"{k}={val}\n" for k, val in d["env"].items())
        out.append(" ".join(shlex.quote(a) for a in d["argv"]) + "\n\n")
    return "".join(out)


# --------------------------------------------------------------------------------------------
# The run


class Signals:
    """While a run is on: SIGTERM and SIGHUP act like SIGINT — a ``KeyboardInterrupt`` at whatever
    the main thread is doing (starting a server, inside a stream, quality, cooldown, the report),
    never a value some ``except Exception`` could record as a request error. ``hold()`` turns
    later signals into notes while the run is being stopped, so a second Ctrl-C or a repeated
    ``docker stop`` cannot leave a server behind; whoever catches the interrupt calls it.

    Python runs a handler between any two bytecodes, finalizers included, and an exception raised
    inside a weakref callback or ``__del__`` is printed and dropped ("Exception ignored in ...").
    So until ``hold()`` acknowledges it, the interrupt is raised again every ``REMIND_S`` (a
    SIGALRM interval timer) whenever no KeyboardInterrupt is on its way up or being handled: a
    signal is never lost, the run never goes on after one, and a slow unwinding is never cut.
    Nested uses share the outer one."""

    HANDLED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    REMIND_S = 1.0
    _active: Signals | None = None

    def __init__(self) -> None:
        self.received: int | None = None
        self._old: dict[int, object] = {}
        self._holding = False  # hold() was called: the run is being stopped
        self._noted = False  # a signal arrived while deferred
        self._taken: tuple[int, ...] = ()  # the signals handled (not those set to be ignored)

    def __enter__(self) -> Signals:
        if Signals._active is not None:
            return Signals._active
        Signals._active = self
        # A signal set to be ignored stays ignored (nohup's SIGHUP, the SIGINT of a script's `cmd &`)
        self._taken = tuple(sig for sig in self.HANDLED if signal.getsignal(sig) is not signal.SIG_IGN)
        for sig in self._taken:
            self._old[sig] = signal.getsignal(sig)
            signal.signal(sig, self._interrupt)
        self._old[signal.SIGALRM] = signal.getsignal(signal.SIGALRM)
        signal.signal(signal.SIGALRM, self._remind)
        return self

    def __exit__(self, *exc) -> bool:
        if Signals._active is self:
            signal.setitimer(signal.ITIMER_REAL, 0)
            for sig, old in self._old.items():
                signal.signal(sig, old)
            Signals._active = None
        return False

    @property
    def name(self) -> str:
        return signal.Signals(self.received).name if self.received else "KeyboardInterrupt"

    def _interrupt(self, signum, _frame) -> None:
        self.received = signum
        signal.setitimer(signal.ITIMER_REAL, self.REMIND_S, self.REMIND_S)  # until hold() answers
        raise KeyboardInterrupt(signal.Signals(signum).name)

    def _remind(self, signum, _frame) -> None:
        if self._holding or self.received is None:
            signal.setitimer(signal.ITIMER_REAL, 0)
            return
        if isinstance(sys.exc_info()[1], KeyboardInterrupt):
            return  # still on its way up (or being handled before hold()): not dropped
        raise KeyboardInterrupt(self.name)  # the first one was dropped (raised inside a finalizer)

    def _note(self, signum, _frame) -> None:
        self.received = signum
        self._noted = True

    def hold(self) -> None:
        """The interrupt was caught: later signals are only noted, and it is not raised again."""
        self._holding = True
        signal.setitimer(signal.ITIMER_REAL, 0)
        for sig in self._taken:
            signal.signal(sig, self._note)

    @contextmanager
    def deferred(self) -> Iterator[None]:
        """A signal arriving inside is noted and raised (``KeyboardInterrupt``) on leaving: spawning
        a server and recording who it is happen whole or not at all. (Python runs signal handlers
        in the main thread between bytecodes, so this holds whichever thread the kernel picked;
        blocking the signals with ``pthread_sigmask`` would not, and the server would inherit the
        blocked mask.)"""
        if self._holding or Signals._active is not self:
            yield
            return
        self._noted = False
        for sig in self._taken:
            signal.signal(sig, self._note)
        try:
            yield
        finally:
            if not self._holding:
                for sig in self._taken:
                    signal.signal(sig, self._interrupt)
        if self._noted:
            raise KeyboardInterrupt(self.name)

    @classmethod
    def defer(cls):
        """The active run's :meth:`deferred`, or nothing outside a run; in a side-by-side
        variant's thread its lane's spawn guard (`harness.run.lanes.Lane.spawning`: signals are the
        main thread's, and its interrupt waits for the spawn to be recorded)."""
        guard = lanes.current_spawn_guard()
        if guard is not None:
            return guard
        return cls._active.deferred() if cls._active is not None else nullcontext()


def build_manifest(
    scenario,
    variants: list,
    argv: list[str],
    simulated: bool,
    redactor: Redactor | None = None,
    attached: external.AttachedRun | None = None,
    checks: dict[str, builds.BuildCheck] | None = None,
) -> dict:
    """The run's manifest, every secret the run knows redacted (``redactor``: the run's).
    ``attached``: an external run's probed servers (each variant's ``server``: URL, version,
    the server's own arguments, HiCache as it reports it, /metrics, whose host is sampled).
    ``checks``: each variant's verified build (``builds.verify_builds``), kept per variant."""
    redactor = redactor or fingerprint.run_redactor(scenario, argv)
    checks = checks or {}
    entries = []
    for v in variants:
        d = describe_launch(scenario, v, redactor=redactor)
        extra = {}
        if attached is not None and v.name in attached.endpoints:
            scrub = functools.partial(fingerprint.scrub_json, redactor)  # numbers stay figures
            extra = {"url": v.url, "server": attached.endpoints[v.name].manifest_entry(scrub)}
        check = checks.get(v.name)
        if check is not None or attached is None:
            extra["build"] = fingerprint.scrub_json(redactor, check.to_json()) if check else {"build": v.build}
        entries.append(
            {
                "name": v.name,
                "dir": results.safe_name(v.name),
                "config_hash": variant_config_hash(scenario, v),
                "argv": d["argv"],
                "env": d["env"],  # already redacted by describe_launch
                "hicache": v.hicache.model_dump(mode="json") if v.hicache is not None else None,
                "expect": v.expect,
                "expect_cause": v.expect_cause,
                **extra,
            }
        )
    server = scenario.server
    manifest = {
        "schema_version": results.SCHEMA_VERSION,
        "kind": "run",
        "scenario": {
            "name": scenario.name,
            "path": str(scenario.path) if scenario.path else None,
            "text": redactor.text(scenario.text),
            "hash": scenario_hash(scenario.text),
            "overrides": scenario.overrides,  # --set KEY=VALUE as given (also in the text's header)
            "unrun_checks": scenario.unrun_checks,  # a --url run's checks naming variants it has not
        },
        "harness_version": __version__,
        "backend": server.backend,
        "simulated": simulated,
        "created_at": results.utc_now_iso(),
        "harness_argv": redactor.argv(argv),
        "seed": scenario.seed,
        "repeats": scenario.repeats,
        "host": fingerprint.host_fingerprint(),
        "client": client_stack(),  # event loop and JSON codec of the streaming client
        "env": fingerprint.allowlisted_env(dict(os.environ), redactor=redactor),
        "sglang": None,
        "probe": None,
        "variants": entries,
    }
    if attached is not None and attached.parity_skipped:
        manifest["parity_skipped"] = attached.parity_skipped
    if attached is not None:
        versions = sorted({e.info.version for e in attached.endpoints.values() if e.info and e.info.version})
        manifest["sglang"] = {"version": ", ".join(versions) or None, "location": "external"}
        if scenario.quality.enabled:
            manifest["quality_baseline"] = scenario.quality.baseline_variant  # read from the servers
    elif not simulated and variants:
        v0 = variants[0]  # the run's headline sglang; every variant's own is under variants[].build
        if v0.sglang_source:
            manifest["sglang_source"] = fingerprint.git_state(Path(v0.sglang_source))
        check = checks.get(v0.name)
        if check is not None:
            sglang = {"version": check.version, "location": check.location}
            if check.error:
                sglang["error"] = check.error
            elif check.location:
                sglang["git"] = fingerprint.git_state(Path(check.location))
        else:
            spec = build_launch_spec(scenario, v0, 0)
            sglang = fingerprint.sglang_version(v0.python, env=spec.full_env())
        manifest["sglang"] = fingerprint.scrub_json(redactor, sglang)
    else:
        manifest["sglang"] = {"version": "simulated", "location": "harness.sim"}
        # flags the simulator accepted without modelling them (harness.sim.cli.UNMODELLED_FLAGS)
        manifest["sim_unmodelled_flags"] = {e["name"]: found for e in entries if (found := unmodelled_flags(e["argv"]))}
    return manifest


def run_scenario(scenario, options: RunOptions, harness_argv: list[str] = ()) -> RunOutcome:
    """A fresh run of the variants ``options`` select (``--only``, ``--shard``) into a new run
    folder. ValueError (exit 2) names an unknown ``--only`` variant or a bad shard. ``harness_argv``:
    the harness command line, kept (redacted) in the manifest."""
    variants, shard_plan = select_run_variants(scenario, options.only, options.shard)
    simulated = scenario.server.backend == "sim"
    redactor = fingerprint.run_redactor(scenario, harness_argv)
    attached = None
    if scenario.server.backend == "external":  # before any request and any file: EndpointRefused (exit 2)
        attached = external.attach(scenario, variants)
        variants = attached.variants
        _learn_server_secrets(redactor, attached, scenario)
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


def _learn_server_secrets(redactor: Redactor, attached: external.AttachedRun, scenario) -> None:
    """The string values under secret names in the servers' own arguments (``api_key``), and the
    key ``server.api_key_env`` names, scrubbed from every file of the run like the scenario's
    (numbers are figures, never secrets)."""
    key = external.api_key(scenario)
    if key is not None:
        redactor.learn({"api_key": key})
    for e in attached.endpoints.values():
        if e.info is not None:
            redactor.learn({k: v for k, v in e.info.raw.items() if isinstance(v, str)})


def execute_run(
    scenario,
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
    redactor = redactor or fingerprint.run_redactor(scenario, sys.argv)
    if scenario.server.backend == "external" and attached is None:  # a resumed run: ask the servers again
        attached = external.attach(scenario, variants)
        variants = attached.variants
        _learn_server_secrets(redactor, attached, scenario)
    if checks is None:
        checks = builds.verify_builds(scenario, variants)
    with results.hold_run_lock(run.root):
        return _execute_locked(scenario, options, run, variants, prior, redactor, attached, checks)


def _execute_locked(
    scenario,
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
    state = _RunState(redactor, checks)
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


def _side_by_side(scenario, run, variants, gpu_ids, progress: Progress, counts, redactor, checks) -> lanes.Lanes:
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
    return lanes.Lanes(gpu_ids, run_one, lambda: _RunState(redactor, checks), on_start, on_end)


class _RunState:
    """What must be cleaned up if the run is interrupted."""

    def __init__(self, redactor: Redactor, checks: dict | None = None):
        self.redactor = redactor
        self.checks: dict[str, builds.BuildCheck] = checks or {}  # each variant's verified build
        self.server: ServerProcess | None = None
        self.sampler = None
        self.vpaths: results.VariantPaths | None = None
        self.status: VariantStatus | None = None
        self.attached: external.AttachedRun | None = None

    def stop_processes(self) -> None:
        if self.sampler is not None:
            try:
                _stop_sampler(self.sampler)
            except Exception:  # noqa: BLE001
                pass
            self.sampler = None
        if self.server is not None:
            self.server.stop(term_timeout_s=15.0, kill_timeout_s=5.0)
            self.server = None

    def interrupt(self) -> None:
        self.stop_processes()
        if self.vpaths is not None and self.status is not None:
            self.status.mark_interrupted()
            self.status.write(self.vpaths.status)
        self.scrub_logs()

    def scrub_logs(self) -> None:
        """The current variant's server logs with the run's secrets replaced (its server stopped)."""
        if self.vpaths is not None:
            scrub_server_logs(self.vpaths, self.redactor)


def scrub_server_logs(vpaths: results.VariantPaths, redactor: Redactor) -> None:
    """Rewrite the variant's server logs (every attempt's) with the run's secret values replaced,
    atomically; only once their server has stopped writing them."""
    if not redactor.values:
        return
    for log_path in vpaths.server_logs():
        results.rewrite_lines_atomic(log_path, redactor.text)


def run_variant(
    scenario,
    variant,
    run: results.RunPaths,
    progress: Progress,
    state: _RunState,
    env_not_clean: bool,
    gpu_ids: list[str] | None = None,
    shared: bool = False,
) -> tuple[VariantOutcome, bool]:
    """One variant, start to stop. Returns its outcome and whether the environment was left unclean
    (GPU memory or MemAvailable not back after cooldown): the next variant is then marked.
    ``gpu_ids``: its GPU set (``--gpus``; its server's ``CUDA_VISIBLE_DEVICES``, its cooldown's
    GPUs); ``shared``: other variants run on this host meanwhile (`harness.run.lanes`)."""
    if variant.backend == "external":
        return run_external_variant(scenario, variant, run, progress, state), env_not_clean
    vpaths = run.variant(variant.name)
    vpaths.root.mkdir(parents=True, exist_ok=True)
    status = VariantStatus(
        variant=variant.name,
        started_at=results.utc_now_iso(),
        expect=variant.expect,
        expect_cause=variant.expect_cause,
        env_not_clean=env_not_clean,
        simulated=scenario.server.backend == "sim",
        redact=lambda data: fingerprint.scrub_json(state.redactor, data),
        clock=gpu_time.PhaseClock(gpu_time.variant_gpus(variant, gpu_ids), gpu_ids),
        gpu_ids=list(gpu_ids) if gpu_ids else None,
    )
    clock = status.clock
    gpu_env = {"CUDA_VISIBLE_DEVICES": ",".join(gpu_ids)} if gpu_ids else {}
    state.vpaths, state.status = vpaths, status
    status.write(vpaths.status)

    progress.phase("preflight")
    prediction = hostpool.preflight_variant(scenario, variant)
    status.preflight = prediction
    line = hostpool.preflight_line(variant.name, prediction)
    if line:  # said before launch, in warn mode too: a pool that will not fit, a predicted GPU pool
        progress.note(line)
    unmodelled = unmodelled_flags(build_launch_spec(scenario, variant, 0).argv) if status.simulated else {}
    if unmodelled:
        progress.note(
            f"simulator: {variant.name}: accepted, not modelled: "
            + ", ".join(f"{k} {v}" for k, v in unmodelled.items())
        )
    if prediction and prediction.get("fits") is False and scenario.preflight.mode == "strict":
        return _finish(vpaths, status, REFUSED, "preflight", state.redactor, detail=prediction), env_not_clean
    baseline = cooldown.take_baseline(read_gpu=lambda: nvml.read_gpu_mem_used_mib(gpu_env or None))

    ready = None
    server = None
    clock.enter(gpu_time.STARTUP)
    max_attempts = 1 + max(0, variant.startup_retries)
    for attempt in range(1, max_attempts + 1):
        status.attempts = attempt
        port = _free_port(variant.host if variant.host != "0.0.0.0" else "127.0.0.1")
        spec = build_launch_spec(scenario, variant, port)
        if gpu_env:  # its GPU set, over whatever the scenario's env said
            spec = dataclasses.replace(spec, env_overrides={**spec.env_overrides, **gpu_env})
        server = ServerProcess(spec, vpaths.server_log(attempt), run_dir=run.root, variant=variant.name)
        progress.phase(f"starting (attempt {attempt})")
        state.server = server  # before start(): a Ctrl-C right after it must still stop it (P15)
        with Signals.defer():  # a signal meanwhile is raised once the server is known and recorded
            server.start()
            status.server = server.identity()
            status.write(vpaths.status)
        sampler = _start_sampler(scenario, server, vpaths, shared=shared)
        state.sampler = sampler
        ready = server.wait_ready(variant.startup_timeout_s)
        ready_at = time.time()
        status.startup = startup_phases.split_startup(
            server.read_log(), (status.server or {}).get("create_time"), ready_at if ready.ready else None
        )
        if ready.ready:
            break
        progress.phase("stopping failed server")
        stop = server.stop()
        _stop_sampler(sampler)
        state.server = state.sampler = None
        log_text = server.read_log()
        status.exit_code, status.cause, status.cause_detail = ready.exit_code, ready.cause, ready.detail
        status.log_excerpt = {**logscan.excerpt(log_text, ready.line_number), "file": server.log_path.name}
        status.survivors = stop.survivors
        status.pools = hostpool.pools_from_log(log_text, scenario, variant)
        if ready.cause not in logscan.TRANSIENT_CAUSES or attempt == max_attempts:
            break
        status.set_aside_failed_attempt(attempt)  # a retry follows
    if not ready.ready:
        clock.enter(gpu_time.COOLDOWN, "stop")
        unclean = _cooldown(scenario, baseline, progress, status, check_host=not shared)
        return _finish(vpaths, status, STARTUP_FAILED, ready.cause, state.redactor), unclean

    status.ready_s = round(ready.seconds, 3)
    clock.enter(gpu_time.IDLE)
    status.write(vpaths.status)
    progress.note(f"{variant.name}: ready in {ready.seconds:.1f} s ({startup_phases.summary_line(status.startup)})")

    def fail_ready_server(cause: str, detail: dict) -> tuple[VariantOutcome, bool]:
        clock.enter(gpu_time.COOLDOWN, "stop")
        progress.phase("stopping")
        status.stop = dataclasses.asdict(server.stop())
        state.server = None
        unclean = _cooldown(scenario, baseline, progress, status, sampler, check_host=not shared)
        _stop_sampler(sampler)
        state.sampler = None
        return _finish(vpaths, status, FAILED, cause, state.redactor, detail=detail), unclean

    try:
        info = fetch_server_info(spec.base_url)
    except ServerAnswerError as exc:  # a server whose answers cannot be trusted measures nothing
        return fail_ready_server(BAD_SERVER_ANSWER, {"endpoint": "/get_server_info", "reason": exc.reason})
    if info is not None:
        results.write_json_atomic(vpaths.server_info, fingerprint.scrub_json(state.redactor, info.raw))
    check = state.checks.get(variant.name)
    mismatch = builds.confirm_server(check, info.version if info is not None else None)
    if mismatch:  # another sglang than the build's answered: nothing it measures is the build's
        progress.note(f"variant {variant.name}: {mismatch}")
        return fail_ready_server(
            builds.BUILD_MISMATCH, {"expected": check.version, "reported": info.version, "reason": mismatch}
        )
    pools = hostpool.pools_from_log(server.read_log(), scenario, variant)
    if pools["max_total_num_tokens"] is None and info is not None:
        pools["max_total_num_tokens"] = info.max_total_num_tokens
    status.pools = pools
    if prediction is not None:
        status.preflight = hostpool.preflight_variant(
            scenario,
            variant,
            device_pool_tokens=pools["max_total_num_tokens"],
            server_info=info.raw if info is not None else None,
            before=prediction,
        )

    window = serving_window.run_window(
        serving_window.WindowInputs(scenario, variant, spec, server, sampler, vpaths, progress, pools),
        info,
        clock=clock,
    )
    clock.enter(gpu_time.COOLDOWN, "stop")
    progress.phase("stopping")
    stop = server.stop()
    status.stop = dataclasses.asdict(stop)
    state.server = None
    unclean = _cooldown(scenario, baseline, progress, status, sampler, check_host=not shared)
    _stop_sampler(sampler)
    state.sampler = None
    sampling = None
    if sampler is not None:
        sampling = run_products.sampling_summary(vpaths.samples, sampler.cpu_fraction, sampler.samples_written)
        if shared:
            sampling["system_shared"] = (
                "other variants ran on this host meanwhile (--gpus): MemAvailable, page cache and swap are the host's"
            )
    platform = roofline.platform_for(
        results.read_json(run.manifest).get("probe"), status.preflight, info.raw if info is not None else None
    )
    tier_pools = _tier_pools(variant, status, info)
    declined = len(logscan.declined_load_backs(server.read_log()))
    window = _death_with_its_cause(window, server)
    summary = _window_summary(scenario, variant, window, sampling, platform, tier_pools, declined)
    if window.state != OK:
        status.cause_detail = window.detail
        status.log_excerpt = _log_excerpt_for_death(server)
    return _finish(vpaths, status, window.state, window.cause, state.redactor, summary=summary), unclean


def _death_with_its_cause(window, server: ServerProcess):
    """A server that died mid-window with a known cause in its log (a CUDA fault, out of memory,
    an assertion: `logscan.classify_failure`) is recorded as that cause, the death beside it in
    the detail (``died``, ``exit_code``, the log line); a death with no cause in its log stays
    ``server_died``."""
    if window.cause != logscan.SERVER_DIED:
        return window
    found = logscan.classify_failure(server.read_log())
    if found is None:
        return window
    detail = {
        **window.detail,
        **found.detail,
        "died": logscan.SERVER_DIED,
        "exit_code": server.exit_code(),
        "log_line_number": found.line_number,
        "log_line": found.line,
    }
    return dataclasses.replace(window, cause=found.cause, detail=detail)


def run_external_variant(
    scenario, variant, run: results.RunPaths, progress: Progress, state: _RunState
) -> VariantOutcome:
    """One variant on a server somebody else runs: no preflight, start, stop or cooldown. Its
    /get_server_info is read again (the server may have been restarted since the run began), the
    sampler samples this machine (and the server's /metrics where they answer), then the serving
    window as for a launched server."""
    endpoint = state.attached.endpoints[variant.name]
    vpaths = run.variant(variant.name)
    vpaths.root.mkdir(parents=True, exist_ok=True)
    server = ExternalServer(str(variant.url))
    status = VariantStatus(
        variant=variant.name,
        started_at=results.utc_now_iso(),
        expect=variant.expect,
        expect_cause=variant.expect_cause,
        simulated=bool(endpoint.info is not None and endpoint.info.simulated),
        redact=lambda data: fingerprint.scrub_json(state.redactor, data),
        clock=gpu_time.PhaseClock(gpu_time.variant_gpus(variant)),
    )
    status.server = server.identity()
    state.vpaths, state.status = vpaths, status
    status.write(vpaths.status)
    progress.phase("asking the server")
    try:
        info = fetch_server_info(server.base_url)
        if info is None and endpoint.info is not None:
            raise ServerAnswerError("/get_server_info no longer answers (it did when the run began)")
    except ServerAnswerError as exc:
        detail = {"endpoint": "/get_server_info", "reason": exc.reason, "url": server.base_url}
        return _finish(vpaths, status, FAILED, BAD_SERVER_ANSWER, state.redactor, detail=detail)
    if info is not None:
        results.write_json_atomic(vpaths.server_info, fingerprint.scrub_json(state.redactor, info.raw))
    changed = endpoint.info.changes(info) if endpoint.info is not None else []
    if changed:  # another server than the one attached (restarted with other args, another version)
        progress.note(f"variant {variant.name}: the attached server changed since the run began: {changed[0]}")
        detail = {"when": "before the variant", "url": server.base_url, "changes": changed[:20]}
        return _finish(vpaths, status, FAILED, SERVER_CHANGED, state.redactor, detail=detail)
    pools = logscan.parse_pools("").to_json()  # no log to read: the server's own figures
    if info is not None:
        pools["max_total_num_tokens"] = info.max_total_num_tokens
        pools["host_pool_tokens"] = info.host_pool_tokens
    status.pools = pools
    status.write(vpaths.status)
    sampler = _start_sampler(scenario, server, vpaths, endpoint)
    state.sampler = sampler
    window = serving_window.run_window(
        serving_window.WindowInputs(scenario, variant, server, server, sampler, vpaths, progress, pools),
        info,
        clock=status.clock,
    )
    _stop_sampler(sampler)
    state.sampler = None
    after_changes: list[str] = []
    if info is not None:  # and still the same server at the end (a restart mid-variant measures two)
        try:
            after_changes = info.changes(fetch_server_info(server.base_url))
        except ServerAnswerError as exc:
            after_changes = [f"/get_server_info: {exc.reason}"]
    sampling = None
    if sampler is not None:
        sampling = run_products.sampling_summary(vpaths.samples, sampler.cpu_fraction, sampler.samples_written)
        sampling["host"] = endpoint.host_sampling
        sampling["server_host_sampled"] = endpoint.local
        sampling["server_metrics"] = (
            "sampled" if sampler.server_metrics else f"not sampled: {endpoint.metrics_problem or 'sampling off'}"
        )
    platform = roofline.platform_for(
        results.read_json(run.manifest).get("probe"), None, info.raw if info is not None else None
    )
    summary = _window_summary(scenario, variant, window, sampling, platform, _tier_pools(variant, status, info))
    if after_changes:
        progress.note(f"variant {variant.name}: the attached server changed during the variant: {after_changes[0]}")
        detail = {"when": "during the variant", "url": server.base_url, "changes": after_changes[:20]}
        return _finish(vpaths, status, FAILED, SERVER_CHANGED, state.redactor, summary=summary, detail=detail)
    if window.state != OK:
        status.cause_detail = window.detail
    return _finish(vpaths, status, window.state, window.cause, state.redactor, summary=summary)


def _log_excerpt_for_death(server: ServerProcess) -> dict:
    text = server.read_log()
    found = logscan.classify_failure(text)
    return {**logscan.excerpt(text, found.line_number if found else None), "file": server.log_path.name}


def _tier_pools(variant, status: VariantStatus, info) -> tier_model.TierPools | None:
    """The pools the variant's tier hits are predicted from: its status's pools and preflight, its
    server's answer, its tiers and write policy."""
    return tier_model.pools_for(
        status.pools,
        status.preflight,
        info.raw if info is not None else None,
        variant.cache_tiers,
        variant.hicache.write_policy if variant.hicache is not None else None,
    )


def _window_summary(
    scenario,
    variant,
    window,
    sampling: dict | None,
    platform: roofline.Platform | None = None,
    pools: tier_model.TierPools | None = None,
    declined_load_backs: int = 0,
) -> dict:
    """summary.json of a variant whose serving window ran (launched or external); ``platform``:
    what its hits' roofline floors are made of (`harness.measures.roofline.platform_for`); ``pools``: what
    its tier hits are predicted from (`harness.measures.tier_model.pools_for`); ``declined_load_backs``:
    the load-backs its server log says sglang declined (`logscan.declined_load_backs`)."""
    return run_products.measured_summary(
        variant.name,
        window.state,
        window.cause,
        window.requests,
        len(window.quality_rows),
        sampling,
        {w.name: w.kind for w in scenario.workloads},
        {w.name: w for w in scenario.workloads},
        variant.cache_tiers,
        platform,
        pools,
        declined_load_backs,
    )


def _finish(
    vpaths: results.VariantPaths,
    status: VariantStatus,
    state: str,
    cause: str | None,
    redactor: Redactor,
    detail=None,
    summary: dict | None = None,
) -> VariantOutcome:
    """The variant ended (its server stopped): its logs scrubbed of the run's secrets, its
    summary.json (the null summary when it never served), then its final status — so a final
    state on disk always has its summary."""
    scrub_server_logs(vpaths, redactor)
    status.finish(state, cause, detail)
    if summary is None:
        summary = run_products.null_summary(status.variant, state, cause)
    run_products.write_variant_summary(vpaths, summary)
    status.write(vpaths.status)
    return status.outcome()


def _start_sampler(scenario, server: ServerProcess | ExternalServer, vpaths, endpoint=None, shared: bool = False):
    """The variant's sampler: its server's process tree, GPUs and /metrics. An external server
    (``endpoint``) has no process here: this machine's memory, its GPUs only when the server
    runs on this machine (all of them: which ones it uses is unknown), /metrics where they answer."""
    cfg = scenario.sampling
    if not cfg.enabled:
        return None
    writer = results.JsonlWriter(vpaths.samples, fsync=False)
    if endpoint is not None:
        sampler = Sampler(
            None,
            server.base_url,
            writer.append,
            interval_s=cfg.interval_s,
            gpu=cfg.gpu if endpoint.local else False,
            server_metrics=cfg.server_metrics and endpoint.metrics_problem is None,
            phase=ATTACHED.first_sample_phase,
            on_stop=writer.close,
        )
    else:
        sampler = Sampler(
            server.pid,
            server.spec.base_url,
            writer.append,
            interval_s=cfg.interval_s,
            gpu=cfg.gpu,
            server_metrics=cfg.server_metrics,
            phase=LAUNCHED.first_sample_phase,
            launch_env=server.spec.full_env(),
            launch_argv=server.spec.argv,
            on_stop=writer.close,  # the samples' file is closed with the sampler
        )  # its GPUs only
    sampler.system_shared = shared  # before its first sample: side by side, every one is labelled
    return sampler.start()


def _stop_sampler(sampler) -> None:
    if sampler is None:
        return
    sampler.stop()


_ports_lock = threading.Lock()
_ports_given: set[tuple[str, int]] = set()


def check_hosts(variants) -> None:
    """Each launched variant's ``server.host`` is an address this machine can listen on: one
    BadInput line (exit 2) naming the host and the variant otherwise (``no-such-host.invalid`` and
    ``256.256.256.256`` were a traceback, exit 3)."""
    seen: set[str] = set()
    for v in variants:
        host = v.host if v.host != "0.0.0.0" else "127.0.0.1"
        if host in seen:
            continue
        seen.add(host)
        try:
            free_port(host)
        except OSError as exc:
            why = exc.strerror or str(exc) or type(exc).__name__
            raise BadInput(f"variant {v.name}: server.host {v.host!r}: cannot listen there ({why})") from None


def _free_port(host: str) -> int:
    """`harness.server.process.free_port`, never the same port twice in one harness (variants side by side
    ask at once; a port handed to one server may not be bound yet when the next asks)."""
    with _ports_lock:
        while True:
            port = free_port(host)
            if (host, port) not in _ports_given:
                _ports_given.add((host, port))
                return port


def _cooldown(
    scenario, baseline, progress: Progress, status: VariantStatus, sampler=None, check_host: bool = True
) -> bool:
    if status.clock is not None:
        status.clock.enter(gpu_time.COOLDOWN, "cooldown_wait")
    if sampler is not None:
        sampler.set_phase("cooldown")
    progress.phase("cooldown")
    result = cooldown.wait(
        baseline,
        timeout_s=scenario.sampling.cooldown_timeout_s,
        mem_tolerance_gib=scenario.sampling.cooldown_mem_tolerance_gib,
        check_host=check_host,
    )
    status.cooldown = result
    return not bool(result.get("clean", True))  # True: the environment did not come back


def finish_run(scenario, run: results.RunPaths, interrupted: bool = False) -> RunVerdict:
    """Run-level products once every variant ran (quality parity across arms, summary.csv, the
    scenario's within-run expectations in expectations.json), then the run's verdict
    (verdict.json). An interrupted run gets its verdict only: its arms are not all there."""
    rows: list[dict] = []
    if not interrupted:
        run_products.write_run_products(scenario, run)
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
    except Exception:  # noqa: BLE001 - logged; `harness report RUN` can redo it
        log.exception("could not write the report of %s; run `harness report %s` to retry", run_root, run_root)
        return None

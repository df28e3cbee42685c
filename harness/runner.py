"""Run a scenario: for each variant, preflight → start → sample → workloads → quality → liveness
→ stop → cooldown, writing everything into one run folder.

A server failure is a result, never a crash of the harness: a variant that does not come up is
recorded ``startup_failed`` with the cause read from its log and the run goes on to the next
variant; one that dies mid-workload is ``partial`` with its rows kept (P5); one that dies after
its last answer is caught by the final liveness check (P6). Ctrl-C or SIGTERM stops the server
tree, flushes files, marks the run interrupted and exits 130 (P15).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import signal
import sys
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from harness import __version__, cooldown, fingerprint, hostpool, logscan, results
from harness.probe.run import run_probes
from harness.progress import Progress
from harness.server import LaunchSpec, ServerProcess, build_launch_spec, free_port

log = logging.getLogger(__name__)

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_BROKEN = 3
EXIT_INTERRUPTED = 130


class Interrupted(Exception):
    """SIGINT or SIGTERM reached the harness."""


@dataclass
class VariantOutcome:
    name: str
    state: str
    cause: str | None = None
    expect_met: bool = True


@dataclass
class RunOutcome:
    run_dir: Path | None
    variants: list[VariantOutcome] = field(default_factory=list)
    interrupted: bool = False
    exit_code: int = EXIT_OK
    report_path: Path | None = None


@dataclass
class RunOptions:
    results_dir: Path = Path("results")
    only: list[str] | None = None
    dry_run: bool = False
    preflight_mode: str | None = None  # overrides scenario.preflight.mode
    write_report: bool = True
    reports_dir: Path = Path("reports")
    resume: Path | None = None
    shard: tuple[int, int] | None = None
    live_progress: bool | None = None
    probe: bool = False  # run the platform probes (quick) first and keep them in the manifest


def select_variants(variants: list, only: list[str] | None) -> list:
    if not only:
        return variants
    names = {v.name for v in variants}
    unknown = [o for o in only if o not in names]
    if unknown:
        raise ValueError(f"--only: no variant named {', '.join(unknown)} (have: {', '.join(sorted(names))})")
    return [v for v in variants if v.name in only]


def describe_launch(scenario, variant, port: int = 30000) -> dict:
    spec = build_launch_spec(scenario, variant, port)
    return {
        "name": variant.name,
        "argv": fingerprint.redact_argv(list(spec.argv)),
        "env": fingerprint.redact_env(dict(spec.env_overrides)),
        "simulated": spec.simulated,
    }


def dry_run(scenario, variants: list, out=sys.stdout) -> None:
    """Print each variant's exact argv and env additions; start nothing."""
    for v in variants:
        d = describe_launch(scenario, v)
        out.write(f"# variant {v.name}{' (simulated)' if d['simulated'] else ''}\n")
        for k, val in d["env"].items():
            out.write(f"{k}={val}\n")
        out.write(" ".join(_shell_quote(a) for a in d["argv"]) + "\n\n")


def _shell_quote(arg: str) -> str:
    import shlex

    return shlex.quote(arg)


# --------------------------------------------------------------------------------------------
# The run


class _SignalGuard:
    """Turn SIGTERM into :class:`Interrupted` in the main thread (SIGINT is KeyboardInterrupt)."""

    def __enter__(self):
        self._old = signal.getsignal(signal.SIGTERM)

        def handler(signum, frame):
            raise Interrupted(f"signal {signum}")

        signal.signal(signal.SIGTERM, handler)
        return self

    def __exit__(self, *exc):
        signal.signal(signal.SIGTERM, self._old)
        return False


def build_manifest(scenario, variants: list, argv: list[str], simulated: bool) -> dict:
    from harness.scenario import scenario_hash, variant_config_hash

    entries = []
    for v in variants:
        d = describe_launch(scenario, v)
        entries.append({
            "name": v.name,
            "dir": results.safe_name(v.name),
            "config_hash": variant_config_hash(scenario, v),
            "argv": d["argv"],
            "env": d["env"],  # already redacted by describe_launch
            "hicache": v.hicache.model_dump(mode="json") if v.hicache is not None else None,
            "expect": v.expect,
            "expect_cause": v.expect_cause,
        })
    server = scenario.server
    manifest = {
        "schema_version": results.SCHEMA_VERSION,
        "kind": "run",
        "scenario": {
            "name": scenario.name,
            "path": str(scenario.path) if scenario.path else None,
            "text": fingerprint.redact_text(scenario.text),
            "hash": scenario_hash(scenario.text),
        },
        "harness_version": __version__,
        "backend": server.backend,
        "simulated": simulated,
        "created_at": results.utc_now_iso(),
        "harness_argv": fingerprint.redact_argv(list(argv)),
        "seed": scenario.seed,
        "repeats": scenario.repeats,
        "host": fingerprint.host_fingerprint(),
        "env": fingerprint.allowlisted_env(dict(__import__("os").environ)),
        "sglang": None,
        "probe": None,
        "variants": entries,
    }
    if not simulated and variants:
        v0 = variants[0]
        spec = build_launch_spec(scenario, v0, 0)
        if v0.sglang_source:
            manifest["sglang_source"] = fingerprint.git_state(Path(v0.sglang_source))
        manifest["sglang"] = fingerprint.sglang_version(v0.python, env=spec.full_env())
    else:
        manifest["sglang"] = {"version": "simulated", "location": "harness.sim"}
    return manifest


def run_scenario(scenario, options: RunOptions, harness_argv: list[str] | None = None) -> RunOutcome:
    if options.preflight_mode is not None:
        scenario.preflight.mode = options.preflight_mode
    if options.resume is not None:
        from harness.resume import resume_run  # refuses (ValueError → exit 2) on changed hashes

        return resume_run(scenario, options, harness_argv or sys.argv)
    variants = select_variants(scenario.expand_variants(), options.only)
    shard_plan = None
    if options.shard is not None:
        variants, shard_plan = apply_shard(scenario, variants, options.shard)
    if options.dry_run:
        dry_run(scenario, variants)
        return RunOutcome(None)
    simulated = scenario.server.backend == "sim"
    run = results.create_run_dir(options.results_dir, scenario.name)
    manifest = build_manifest(scenario, variants, harness_argv or sys.argv, simulated)
    if shard_plan is not None:
        manifest["shard"] = shard_plan.to_json()
    if options.probe:
        manifest["probe"] = run_probes({"quick": True})
    results.write_json_atomic(run.manifest, manifest)
    return execute_run(scenario, options, run, variants, simulated)


def apply_shard(scenario, variants: list, shard: tuple[int, int]):
    """The variants shard I/N runs (its own plus the parity baseline it needs; docs/sharding.md)."""
    from harness.shard import plan_shard, select

    plan = plan_shard(scenario, variants, *shard)
    return select(variants, plan), plan


def execute_run(scenario, options: RunOptions, run: results.RunPaths, variants: list, simulated: bool,
                prior: list[VariantOutcome] | None = None) -> RunOutcome:
    """Run ``variants`` into an existing run folder (fresh or resumed), then finish it.

    ``prior``: outcomes of variants already complete in the folder (resume), counted in the exit code.
    While it runs it holds ``<run>/.lock`` so that a ``--resume`` of a live run is refused.
    """
    from harness.resume import hold_run_lock

    lock = hold_run_lock(run.root)
    try:
        return _execute_locked(scenario, options, run, variants, simulated, prior)
    finally:
        lock.close()


def _execute_locked(scenario, options, run, variants, simulated, prior) -> RunOutcome:
    outcome = RunOutcome(run.root, list(prior or []))
    progress = Progress(len(variants), live=options.live_progress)
    progress.note(f"run {run.root} ({len(variants)} variants{', SIMULATED server' if simulated else ''})")
    state = _RunState()
    try:
        with _SignalGuard():
            env_not_clean = False
            for i, variant in enumerate(variants, 1):
                progress.variant(i, variant.name)
                vo, env_not_clean = run_variant(scenario, variant, run, progress, state, env_not_clean)
                state.status_path = state.status = None  # finished: an interrupt now must not relabel it
                outcome.variants.append(vo)
                progress.note(f"variant {variant.name}: {vo.state}{f' ({vo.cause})' if vo.cause else ''}"
                              f"{'' if vo.expect_met else '  [UNEXPECTED]'}")
    except (KeyboardInterrupt, Interrupted):
        outcome.interrupted = True
        state.interrupt()
        progress.note("interrupted: stopping the server and marking the run")
    except BaseException:
        state.stop_processes()  # a harness bug must not leave the server holding GPU and host memory
        raise
    finally:
        progress.close()
    if outcome.interrupted:
        results.write_json_atomic(run.interrupted, {"at": results.utc_now_iso()})
        outcome.exit_code = EXIT_INTERRUPTED
        return outcome
    expectations_failed = finish_run(scenario, run, outcome)
    results.write_json_atomic(run.complete, {"at": results.utc_now_iso()})
    ok = all(v.expect_met for v in outcome.variants) and not expectations_failed
    outcome.exit_code = EXIT_OK if ok else EXIT_FAILED
    if options.write_report:
        outcome.report_path = _write_report(run.root, options.reports_dir)
    return outcome


class _RunState:
    """What must be cleaned up if the run is interrupted."""

    def __init__(self):
        self.server: ServerProcess | None = None
        self.sampler = None
        self.status_path: Path | None = None
        self.status: dict | None = None

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
        if self.status_path is not None and self.status is not None:
            self.status.update(state="interrupted", ended_at=results.utc_now_iso())
            results.write_json_atomic(self.status_path, self.status)


def _expect_met(variant, state: str, cause: str | None) -> bool:
    if variant.expect == "startup_failed":
        return state == "startup_failed" and (variant.expect_cause is None or variant.expect_cause == cause)
    return state == "ok"


def run_variant(scenario, variant, run: results.RunPaths, progress: Progress, state: _RunState,
                env_not_clean: bool) -> tuple[VariantOutcome, bool]:
    """One variant, start to stop. Returns its outcome and whether the environment was left unclean
    (GPU memory or MemAvailable not back after cooldown): the next variant is then marked."""
    vpaths = run.variant(variant.name)
    vpaths.root.mkdir(parents=True, exist_ok=True)
    status: dict = {
        "schema_version": results.SCHEMA_VERSION,
        "variant": variant.name,
        "state": "running",
        "cause": None,
        "cause_detail": {},
        "log_excerpt": None,
        "attempts": 0,
        "exit_code": None,
        "started_at": results.utc_now_iso(),
        "ready_s": None,
        "ended_at": None,
        "pools": None,
        "expect": variant.expect,
        "expect_cause": variant.expect_cause,
        "expect_met": None,
        "env_not_clean": env_not_clean,
        "preflight": None,
        "simulated": scenario.server.backend == "sim",
    }
    state.status_path, state.status = vpaths.status, status
    results.write_json_atomic(vpaths.status, status)

    progress.phase("preflight")
    prediction = hostpool.preflight_variant(scenario, variant)
    status["preflight"] = prediction
    mode = getattr(scenario.preflight, "mode", "warn")
    if prediction and prediction.get("fits") is False and mode == "strict":
        return _finish_status(variant, vpaths, status, "refused", "preflight", detail=prediction), env_not_clean
    baseline = cooldown.take_baseline()

    ready = None
    server = None
    max_attempts = 1 + max(0, variant.startup_retries)
    for attempt in range(1, max_attempts + 1):
        status["attempts"] = attempt
        port = free_port(variant.host if variant.host != "0.0.0.0" else "127.0.0.1")
        spec = build_launch_spec(scenario, variant, port)
        server = ServerProcess(spec, vpaths.server_log(attempt))
        progress.phase(f"starting (attempt {attempt})")
        state.server = server  # before start(): a Ctrl-C landing inside start() must still stop it (P15)
        server.start()
        status["server"] = server.identity()
        results.write_json_atomic(vpaths.status, status)
        sampler = _start_sampler(scenario, server, vpaths)
        state.sampler = sampler
        ready = server.wait_ready(variant.startup_timeout_s)
        if ready.ready:
            break
        progress.phase("stopping failed server")
        stop = server.stop()
        _stop_sampler(sampler)
        state.server = state.sampler = None
        log_text = server.read_log()
        status.update(
            exit_code=ready.exit_code,
            cause=ready.cause,
            cause_detail=ready.detail,
            log_excerpt={**logscan.excerpt(log_text, ready.line_number), "file": server.log_path.name},
            survivors=stop.survivors,
        )
        status["pools"] = logscan.parse_pools(log_text).to_json()
        if ready.cause not in logscan.TRANSIENT_CAUSES or attempt == max_attempts:
            break
        # a retry follows: keep this attempt's evidence apart, so a later success reads clean
        status.setdefault("failed_attempts", []).append(
            {k: status.pop(k) for k in ("exit_code", "cause", "cause_detail", "log_excerpt", "survivors")}
            | {"attempt": attempt})
        status.update(exit_code=None, cause=None, cause_detail={}, log_excerpt=None)
    if not ready.ready:
        status["ready_s"] = None
        unclean = _cooldown(scenario, baseline, progress, status)
        return _finish_status(variant, vpaths, status, "startup_failed", ready.cause), unclean

    status["ready_s"] = round(ready.seconds, 3)
    results.write_json_atomic(vpaths.status, status)
    server_info = _server_info(spec)
    if server_info is not None:
        results.write_json_atomic(vpaths.server_info, server_info)
    pools = logscan.parse_pools(server.read_log()).to_json()
    if pools["max_total_num_tokens"] is None and server_info:
        pools["max_total_num_tokens"] = server_info.get("max_total_num_tokens")
    status["pools"] = pools
    if prediction is not None:
        status["preflight"] = hostpool.preflight_variant(scenario, variant, device_pool_tokens=pools["max_total_num_tokens"],
                                                         server_info=server_info, before=prediction)

    body_state, body_cause, body_detail = run_variant_body(scenario, variant, spec, server, sampler, vpaths,
                                                           progress, pools, server_info)
    progress.phase("stopping")
    stop = server.stop()
    status["stop"] = dataclasses.asdict(stop)
    state.server = None
    unclean = _cooldown(scenario, baseline, progress, status, sampler)
    _stop_sampler(sampler)
    state.sampler = None
    _add_sampling_summary(vpaths, sampler)
    if body_state != "ok":
        status["cause_detail"] = body_detail
        status["log_excerpt"] = _log_excerpt_for_death(server)
    return _finish_status(variant, vpaths, status, body_state, body_cause), unclean


def _log_excerpt_for_death(server: ServerProcess) -> dict:
    text = server.read_log()
    found = logscan.classify_failure(text)
    return {**logscan.excerpt(text, found.line_number if found else None), "file": server.log_path.name}


def _finish_status(variant, vpaths, status: dict, state: str, cause: str | None, detail: dict | None = None):
    status["state"] = state
    status["cause"] = cause
    if detail is not None:
        status["cause_detail"] = detail
    status["ended_at"] = results.utc_now_iso()
    status["expect_met"] = _expect_met(variant, state, cause)
    results.write_json_atomic(vpaths.status, status)
    if state != "ok" and not vpaths.summary.exists():
        results.write_json_atomic(vpaths.summary, failed_summary(variant.name, state, cause))
    return VariantOutcome(variant.name, state, cause, status["expect_met"])


def failed_summary(name: str, state: str, cause: str | None) -> dict:
    """A variant that failed has null metrics and its cause, never zeros (P10)."""
    return {"schema_version": results.SCHEMA_VERSION, "variant": name, "state": state, "cause": cause,
            "workloads": None, "sampling": None, "quality": None}


def _server_info(spec: LaunchSpec) -> dict | None:
    with httpx.Client(timeout=10.0, trust_env=False) as c:
        for path in ("/get_server_info", "/server_info"):
            try:
                r = c.get(spec.base_url + path)
            except httpx.HTTPError:
                continue
            if r.status_code == 200:
                try:
                    return r.json()
                except json.JSONDecodeError:
                    return None
    return None


def _start_sampler(scenario, server: ServerProcess, vpaths):
    cfg = scenario.sampling
    if not cfg.enabled:
        return None
    from harness.sampling import Sampler

    writer = results.JsonlWriter(vpaths.samples, fsync=False)
    sampler = Sampler(server.pid, server.spec.base_url, writer.append, interval_s=cfg.interval_s,
                      gpu=cfg.gpu, server_metrics=cfg.server_metrics)
    sampler._harness_writer = writer  # closed with the sampler
    return sampler.start()


def _stop_sampler(sampler) -> None:
    if sampler is None:
        return
    sampler.stop()
    writer = getattr(sampler, "_harness_writer", None)
    if writer is not None:
        writer.close()


def _add_sampling_summary(vpaths, sampler) -> None:
    """Per-phase system figures (and the sampler's own CPU use) into the variant summary."""
    if sampler is None or not vpaths.summary.exists():
        return
    from harness.sampling import summarize_samples

    summary = results.read_json(vpaths.summary)
    summary["sampling"] = {
        "phases": summarize_samples(results.read_jsonl(vpaths.samples)),
        "sampler_cpu_fraction": round(sampler.cpu_fraction, 5),
        "samples_written": sampler.samples_written,
    }
    results.write_json_atomic(vpaths.summary, summary)


def _cooldown(scenario, baseline, progress: Progress, status: dict, sampler=None) -> bool:
    if sampler is not None:
        sampler.set_phase("cooldown")
    progress.phase("cooldown")
    result = cooldown.wait(baseline, timeout_s=scenario.sampling.cooldown_timeout_s,
                           mem_tolerance_gib=scenario.sampling.cooldown_mem_tolerance_gib)
    status["cooldown"] = result
    return not bool(result.get("clean", True))  # True: the environment did not come back


def run_variant_body(scenario, variant, spec, server, sampler, vpaths, progress, pools, server_info):
    """Idle window, workloads, quality, final liveness. Returns (state, cause, detail)."""
    from harness.variant_body import run_body

    return run_body(scenario, variant, spec, server, sampler, vpaths, progress, pools, server_info)


def finish_run(scenario, run: results.RunPaths, outcome: RunOutcome) -> bool:
    """Run-level products once every variant ran: quality parity across arms, summary.csv, and the
    scenario's within-run expectations (expectations.json). Returns whether an expectation failed."""
    from harness.expectations import any_failed, evaluate_run_expectations
    from harness.run_summary import write_run_summaries

    write_run_summaries(scenario, run)
    rows = evaluate_run_expectations(run.root)
    results.write_json_atomic(run.root / "expectations.json",
                              {"schema_version": results.SCHEMA_VERSION, "checks": rows})
    return any_failed(rows)


def _write_report(run_root: Path, reports_dir: Path) -> Path | None:
    """The HTML report; a report that cannot be drawn never loses the run (it is already COMPLETE)."""
    from harness.report.html import write_report

    try:
        return write_report(run_root, reports_dir)
    except Exception:  # noqa: BLE001 - logged; `harness report RUN` can redo it
        log.exception("could not write the report of %s; run `harness report %s` to retry", run_root, run_root)
        return None


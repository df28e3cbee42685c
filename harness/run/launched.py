"""One launched variant, start to stop: preflight → start (with its retries) → the serving window
→ stop → cooldown. A server that does not come up is ``startup_failed`` with the cause read from
its log; one that dies in the window is recorded with the cause its log names. Also the checks
on its ``server.host`` and the ports handed to servers.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from typing import TYPE_CHECKING

from harness.analysis import run_products
from harness.core.errors import BadInput
from harness.host import fingerprint, nvml
from harness.measures import roofline
from harness.run import builds, cooldown, hostpool, ratio_boundary, serving_window
from harness.run.external_variant import run_external_variant
from harness.run.launch import launch_spec
from harness.run.progress import Progress
from harness.run.signals import Signals
from harness.run.variant_io import (
    RunState,
    finish_variant,
    start_sampler,
    stop_sampler,
    variant_tier_pools,
    window_summary,
)
from harness.server import logscan, startup_phases
from harness.server.info import BAD_SERVER_ANSWER, ServerAnswerError, fetch_server_info
from harness.server.process import ServerProcess, free_port
from harness.sim.cli import unmodelled_flags
from harness.sim.host import HOST_DIR_ENV as SIM_HOST_DIR_ENV
from harness.sim.host import HOST_DIR_NAME as SIM_HOST_DIR_NAME
from harness.store import gpu_time, results
from harness.store.variant_status import FAILED, OK, REFUSED, STARTUP_FAILED, VariantOutcome, VariantStatus

if TYPE_CHECKING:
    from harness.scenario.models import Scenario


def run_variant(
    scenario: Scenario,
    variant,
    run: results.RunPaths,
    progress: Progress,
    state: RunState,
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
    first = VariantStatus(
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
    clock = first.clock
    gpu_env = {"CUDA_VISIBLE_DEVICES": ",".join(gpu_ids)} if gpu_ids else {}
    state.begin_variant(vpaths, first)

    progress.phase("preflight")
    prediction = hostpool.preflight_variant(scenario, variant)
    if prediction is not None:
        prediction["boundary"] = ratio_boundary.for_record(scenario, variant, prediction)
    state.update_status(preflight=prediction)
    line = hostpool.preflight_line(variant.name, prediction)
    if line:  # said before launch, in warn mode too: a pool that will not fit, a predicted GPU pool
        progress.note(line)
    unmodelled = unmodelled_flags(launch_spec(scenario, variant, 0).argv) if first.simulated else {}
    if unmodelled:
        progress.note(
            f"simulator: {variant.name}: accepted, not modelled: "
            + ", ".join(f"{k} {v}" for k, v in unmodelled.items())
        )
    if prediction and prediction.get("fits") is False and scenario.preflight.mode == "strict":
        return finish_variant(vpaths, state, REFUSED, "preflight", detail=prediction), env_not_clean
    baseline = cooldown.take_baseline(read_gpu=lambda: nvml.read_gpu_mem_used_mib(gpu_env or None))

    ready = None
    server = None
    clock.enter(gpu_time.STARTUP)
    max_attempts = 1 + max(0, variant.startup_retries)
    for attempt in range(1, max_attempts + 1):
        state.update_status(attempts=attempt)
        port = _free_port(variant.host if variant.host != "0.0.0.0" else "127.0.0.1")
        spec = launch_spec(scenario, variant, port)
        if gpu_env:  # its GPU set, over whatever the scenario's env said
            spec = dataclasses.replace(spec, env_overrides={**spec.env_overrides, **gpu_env})
        if spec.simulated and variant.sim is not None and variant.sim.host is not None:
            # the simulated host's /proc files: the sampler reads them in place of the real ones
            spec = dataclasses.replace(
                spec, env_overrides={**spec.env_overrides, SIM_HOST_DIR_ENV: str(vpaths.root / SIM_HOST_DIR_NAME)}
            )
        server = ServerProcess(spec, vpaths.server_log(attempt), run_dir=run.root, variant=variant.name)
        progress.phase(f"starting (attempt {attempt})")
        state.server = server  # before start(): a Ctrl-C right after it must still stop it (P15)
        with Signals.defer():  # a signal meanwhile is raised once the server is known and recorded
            server.start()
            state.update_status(write=True, server=server.identity())
        sampler = start_sampler(scenario, server, vpaths, shared=shared)
        state.sampler = sampler
        ready = server.wait_ready(variant.startup_timeout_s)
        ready_at = time.time()
        startup = startup_phases.split_startup(
            server.read_log(), (state.status.server or {}).get("create_time"), ready_at if ready.ready else None
        )
        state.update_status(startup=startup)
        if ready.ready:
            break
        progress.phase("stopping failed server")
        stop = server.stop()
        stop_sampler(sampler)
        state.server = state.sampler = None
        log_text = server.read_log()
        state.update_status(
            exit_code=ready.exit_code,
            cause=ready.cause,
            cause_detail=ready.detail,
            log_excerpt={**logscan.excerpt(log_text, ready.line_number), "file": server.log_path.name},
            survivors=stop.survivors,
            pools=hostpool.pools_from_log(log_text, scenario, variant),
        )
        if ready.cause not in logscan.TRANSIENT_CAUSES or attempt == max_attempts:
            break
        state.set_aside_failed_attempt(attempt)  # a retry follows
    if not ready.ready:
        clock.enter(gpu_time.COOLDOWN, "stop")
        unclean = _cooldown(scenario, baseline, progress, state, check_host=not shared)
        return finish_variant(vpaths, state, STARTUP_FAILED, ready.cause), unclean

    clock.enter(gpu_time.IDLE)
    ready_status = state.update_status(write=True, ready_s=round(ready.seconds, 3))
    progress.note(
        f"{variant.name}: ready in {ready.seconds:.1f} s ({startup_phases.summary_line(ready_status.startup)})"
    )

    def fail_ready_server(cause: str, detail: dict) -> tuple[VariantOutcome, bool]:
        clock.enter(gpu_time.COOLDOWN, "stop")
        progress.phase("stopping")
        state.update_status(stop=dataclasses.asdict(server.stop()))
        state.server = None
        unclean = _cooldown(scenario, baseline, progress, state, sampler, check_host=not shared)
        stop_sampler(sampler)
        state.sampler = None
        return finish_variant(vpaths, state, FAILED, cause, detail=detail), unclean

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
    state.update_status(pools=pools)
    if prediction is not None:
        preflight = hostpool.preflight_variant(
            scenario,
            variant,
            device_pool_tokens=pools["max_total_num_tokens"],
            server_info=info.raw if info is not None else None,
            before=prediction,
        )
        preflight["boundary"] = ratio_boundary.for_record(scenario, variant, preflight)
        state.update_status(preflight=preflight)

    window = serving_window.run_window(
        serving_window.WindowInputs(
            plan=serving_window.plan_window(scenario, variant),
            variant=variant,
            spec=spec,
            server=server,
            sampler=sampler,
            vpaths=vpaths,
            progress=progress,
            pools=pools,
        ),
        info,
        clock=clock,
    )
    clock.enter(gpu_time.COOLDOWN, "stop")
    progress.phase("stopping")
    stop = server.stop()
    state.update_status(stop=dataclasses.asdict(stop))
    state.server = None
    unclean = _cooldown(scenario, baseline, progress, state, sampler, check_host=not shared)
    stop_sampler(sampler)
    state.sampler = None
    sampling = None
    if sampler is not None:
        sampling = run_products.sampling_summary(vpaths.samples, sampler.cpu_fraction, sampler.samples_written)
        if shared:
            sampling["system_shared"] = (
                "other variants ran on this host meanwhile (--gpus): MemAvailable, page cache and swap are the host's"
            )
    platform = roofline.platform_for(
        results.read_json(run.manifest).get("probe"), state.status.preflight, info.raw if info is not None else None
    )
    tier_pools = variant_tier_pools(variant, state.status, info)
    declined = len(logscan.declined_load_backs(server.read_log()))
    window = _death_with_its_cause(window, server)
    summary = window_summary(scenario, variant, window, sampling, platform, tier_pools, declined, vpaths)
    if window.state != OK:
        state.update_status(cause_detail=window.detail, log_excerpt=_log_excerpt_for_death(server))
    return finish_variant(vpaths, state, window.state, window.cause, summary=summary), unclean


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


def _log_excerpt_for_death(server: ServerProcess) -> dict:
    text = server.read_log()
    found = logscan.classify_failure(text)
    return {**logscan.excerpt(text, found.line_number if found else None), "file": server.log_path.name}


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
    scenario: Scenario, baseline, progress: Progress, state: RunState, sampler=None, check_host: bool = True
) -> bool:
    clock = state.status.clock if state.status is not None else None
    if clock is not None:
        clock.enter(gpu_time.COOLDOWN, "cooldown_wait")
    if sampler is not None:
        sampler.set_phase("cooldown")
    progress.phase("cooldown")
    result = cooldown.wait(
        baseline,
        timeout_s=scenario.sampling.cooldown_timeout_s,
        mem_tolerance_gib=scenario.sampling.cooldown_mem_tolerance_gib,
        check_host=check_host,
    )
    state.update_status(cooldown=result)
    return not bool(result.get("clean", True))  # True: the environment did not come back

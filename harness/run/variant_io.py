"""What every variant shares, launched or external: the run state an interrupt cleans up
(`RunState`), its sampler's start and stop, the summary of its serving window, and its end
(`finish_variant`: logs scrubbed of the run's secrets, summary.json, then its final status).
"""

from __future__ import annotations

import dataclasses
import threading
from typing import TYPE_CHECKING, Any

from harness.analysis import run_products
from harness.measures import roofline, tier_model
from harness.run import builds, external
from harness.run.sampler import Sampler
from harness.server.process import ExternalServer, ServerProcess
from harness.sim.host import HOST_DIR_ENV as SIM_HOST_DIR_ENV
from harness.store import results
from harness.store.secrets import Redactor
from harness.store.variant_status import ATTACHED, LAUNCHED, VariantOutcome, VariantStatus

if TYPE_CHECKING:
    from harness.scenario.models import Scenario


class RunState:
    """What must be cleaned up if the run is interrupted."""

    def __init__(self, redactor: Redactor, checks: dict | None = None):
        self.redactor = redactor
        self.checks: dict[str, builds.BuildCheck] = checks or {}  # each variant's verified build
        self.server: ServerProcess | None = None
        self.sampler = None
        self.vpaths: results.VariantPaths | None = None
        self.status: VariantStatus | None = None  # the current variant's latest status (a frozen value)
        self.attached: external.AttachedRun | None = None
        # a side-by-side run's interrupt comes from another thread (harness.run.lanes): it marks the
        # latest status, never one a step is replacing; reentrant, as an interrupt may land mid-step
        self._status_lock = threading.RLock()

    def begin_variant(self, vpaths: results.VariantPaths, status: VariantStatus) -> VariantStatus:
        """The variant starts: its first status kept and written."""
        with self._status_lock:
            self.vpaths, self.status = vpaths, status
            status.write(vpaths.status)
            return status

    def update_status(self, write: bool = False, **changes: Any) -> VariantStatus:
        """The current variant's status with ``changes`` (a new value, kept as the latest);
        ``write``: status.json written with it at once."""
        with self._status_lock:
            assert self.status is not None and self.vpaths is not None, "no variant is running"
            self.status = dataclasses.replace(self.status, **changes) if changes else self.status
            if write:
                self.status.write(self.vpaths.status)
            return self.status

    def set_aside_failed_attempt(self, attempt: int) -> VariantStatus:
        """A startup retry follows: the attempt's evidence set aside in the latest status."""
        with self._status_lock:
            assert self.status is not None
            self.status = self.status.with_failed_attempt_set_aside(attempt)
            return self.status

    def finish_status(self, state: str, cause: str | None, detail: Any = None) -> VariantStatus:
        """The latest status as the variant ended (an interrupted one stays interrupted)."""
        with self._status_lock:
            assert self.status is not None
            self.status = self.status.finished(state, cause, detail)
            return self.status

    def stop_processes(self) -> None:
        if self.sampler is not None:
            try:
                stop_sampler(self.sampler)
            except Exception:  # noqa: BLE001
                pass
            self.sampler = None
        if self.server is not None:
            self.server.stop(term_timeout_s=15.0, kill_timeout_s=5.0)
            self.server = None

    def interrupt(self) -> None:
        self.stop_processes()
        with self._status_lock:
            if self.vpaths is not None and self.status is not None:
                self.status = self.status.interrupted()
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


def variant_tier_pools(variant, status: VariantStatus, info) -> tier_model.TierPools | None:
    """The pools the variant's tier hits are predicted from: its status's pools and preflight, its
    server's answer, its tiers and write policy."""
    return tier_model.pools_for(
        status.pools,
        status.preflight,
        info.raw if info is not None else None,
        variant.cache_tiers,
        variant.hicache.write_policy if variant.hicache is not None else None,
    )


def window_summary(
    scenario: Scenario,
    variant,
    window,
    sampling: dict | None,
    platform: roofline.Platform | None = None,
    pools: tier_model.TierPools | None = None,
    declined_load_backs: int = 0,
    vpaths: results.VariantPaths | None = None,
) -> dict:
    """summary.json of a variant whose serving window ran (launched or external); ``platform``:
    what its hits' roofline floors are made of (`harness.measures.roofline.platform_for`); ``pools``: what
    its tier hits are predicted from (`harness.measures.tier_model.pools_for`); ``declined_load_backs``:
    the load-backs its server log says sglang declined (`logscan.declined_load_backs`); ``vpaths``:
    where its samples are, for the kinds that judge them (a soak)."""
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
        results.read_jsonl(vpaths.samples) if vpaths is not None else (),  # read only by a kind that judges samples
    )


def finish_variant(
    vpaths: results.VariantPaths,
    run_state: RunState,
    state: str,
    cause: str | None,
    detail=None,
    summary: dict | None = None,
) -> VariantOutcome:
    """The variant ended (its server stopped): its logs scrubbed of the run's secrets, its
    summary.json (the null summary when it never served), then its final status — so a final
    state on disk always has its summary."""
    scrub_server_logs(vpaths, run_state.redactor)
    status = run_state.finish_status(state, cause, detail)
    if summary is None:
        summary = run_products.null_summary(status.variant, state, cause)
    run_products.write_variant_summary(vpaths, summary)
    return run_state.update_status(write=True).outcome()  # the latest: an interrupt meanwhile stays


def start_sampler(
    scenario: Scenario, server: ServerProcess | ExternalServer, vpaths, endpoint=None, shared: bool = False
):
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
        sim_host = server.spec.env_overrides.get(SIM_HOST_DIR_ENV)
        proc = {"meminfo_path": f"{sim_host}/meminfo", "vmstat_path": f"{sim_host}/vmstat"} if sim_host else {}
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
            **proc,
        )  # its GPUs only
    sampler.system_shared = shared  # before its first sample: side by side, every one is labelled
    return sampler.start()


def stop_sampler(sampler) -> None:
    if sampler is None:
        return
    sampler.stop()

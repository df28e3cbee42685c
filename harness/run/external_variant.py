"""One variant on a server somebody else runs (``backend: external``): no preflight, start, stop
or cooldown; its /get_server_info read again before and after, the sampler on this machine, then
the serving window as for a launched server (`harness.run.launched`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from harness.analysis import run_products
from harness.host import fingerprint
from harness.measures import roofline
from harness.run import serving_window
from harness.run.progress import Progress
from harness.run.variant_io import (
    RunState,
    finish_variant,
    start_sampler,
    stop_sampler,
    variant_tier_pools,
    window_summary,
)
from harness.server import logscan
from harness.server.info import BAD_SERVER_ANSWER, SERVER_CHANGED, ServerAnswerError, fetch_server_info
from harness.server.process import ExternalServer
from harness.store import gpu_time, results
from harness.store.variant_status import FAILED, OK, VariantOutcome, VariantStatus

if TYPE_CHECKING:
    from harness.scenario.models import Scenario


def run_external_variant(
    scenario: Scenario, variant, run: results.RunPaths, progress: Progress, state: RunState
) -> VariantOutcome:
    """One variant on a server somebody else runs: no preflight, start, stop or cooldown. Its
    /get_server_info is read again (the server may have been restarted since the run began), the
    sampler samples this machine (and the server's /metrics where they answer), then the serving
    window as for a launched server."""
    endpoint = state.attached.endpoints[variant.name]
    vpaths = run.variant(variant.name)
    vpaths.root.mkdir(parents=True, exist_ok=True)
    server = ExternalServer(str(variant.url))
    first = VariantStatus(
        variant=variant.name,
        started_at=results.utc_now_iso(),
        expect=variant.expect,
        expect_cause=variant.expect_cause,
        simulated=bool(endpoint.info is not None and endpoint.info.simulated),
        redact=lambda data: fingerprint.scrub_json(state.redactor, data),
        clock=gpu_time.PhaseClock(gpu_time.variant_gpus(variant)),
        server=server.identity(),
    )
    state.begin_variant(vpaths, first)
    progress.phase("asking the server")
    try:
        info = fetch_server_info(server.base_url)
        if info is None and endpoint.info is not None:
            raise ServerAnswerError("/get_server_info no longer answers (it did when the run began)")
    except ServerAnswerError as exc:
        detail = {"endpoint": "/get_server_info", "reason": exc.reason, "url": server.base_url}
        return finish_variant(vpaths, state, FAILED, BAD_SERVER_ANSWER, detail=detail)
    if info is not None:
        results.write_json_atomic(vpaths.server_info, fingerprint.scrub_json(state.redactor, info.raw))
    changed = endpoint.info.changes(info) if endpoint.info is not None else []
    if changed:  # another server than the one attached (restarted with other args, another version)
        progress.note(f"variant {variant.name}: the attached server changed since the run began: {changed[0]}")
        detail = {"when": "before the variant", "url": server.base_url, "changes": changed[:20]}
        return finish_variant(vpaths, state, FAILED, SERVER_CHANGED, detail=detail)
    pools = logscan.parse_pools("").to_json()  # no log to read: the server's own figures
    if info is not None:
        pools["max_total_num_tokens"] = info.max_total_num_tokens
        pools["host_pool_tokens"] = info.host_pool_tokens
    state.update_status(write=True, pools=pools)
    sampler = start_sampler(scenario, server, vpaths, endpoint)
    state.sampler = sampler
    window = serving_window.run_window(
        serving_window.WindowInputs(
            plan=serving_window.plan_window(scenario, variant),
            variant=variant,
            spec=server,
            server=server,
            sampler=sampler,
            vpaths=vpaths,
            progress=progress,
            pools=pools,
        ),
        info,
        clock=first.clock,
    )
    stop_sampler(sampler)
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
    pools = variant_tier_pools(variant, state.status, info)
    summary = window_summary(scenario, variant, window, sampling, platform, pools, vpaths=vpaths)
    if after_changes:
        progress.note(f"variant {variant.name}: the attached server changed during the variant: {after_changes[0]}")
        detail = {"when": "during the variant", "url": server.base_url, "changes": after_changes[:20]}
        return finish_variant(vpaths, state, FAILED, SERVER_CHANGED, summary=summary, detail=detail)
    if window.state != OK:
        state.update_status(cause_detail=window.detail)
    return finish_variant(vpaths, state, window.state, window.cause, summary=summary)

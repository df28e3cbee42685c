"""The serving window: what happens on a variant's server between "ready" and "stop".

Idle window (seed 000 saw swap-in while idle) → the workloads, once per repeat → the quality
arm → a final idle liveness check plus ``/health_generate`` (P6: a server that died after its last
answer is a failed variant, not a pass). Rows are appended to the variant's JSONL files as they
come, so a crash keeps everything measured before it; the verdict and the rows are returned for
the variant's summary (written by ``harness.run_products`` once the server has stopped).
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from harness import logscan, results
from harness.client import GenerateRequest, Labels, StreamingClient
from harness.model_config import model_vocab_size
from harness.quality import run as quality_run
from harness.records import RequestRecord
from harness.server_info import ServerInfo, get_status
from harness.variant_status import FAILED, OK, PARTIAL
from harness.workloads.context import WorkloadContext
from harness.workloads.sequence import run_workloads

log = logging.getLogger(__name__)

DEFAULT_POOL_TOKENS = 20480


def _wait_alive(server, seconds: float) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if not server.alive():
            return False
        time.sleep(0.1)
    return server.alive()


def final_liveness(server, base_url: str, idle_s: float) -> tuple[bool, str]:
    """Alive after ``idle_s`` of idleness and able to generate one token."""
    if not _wait_alive(server, idle_s):
        return False, f"server exited (code {server.exit_code()}) during the {idle_s:g}s idle check"
    try:
        with httpx.Client(trust_env=False) as client:
            status = get_status(client, base_url + "/health_generate", timeout_s=30.0)
    except httpx.HTTPError as exc:
        return False, f"/health_generate failed: {type(exc).__name__}"
    if status != 200:
        return False, f"/health_generate answered {status}"
    if not server.alive():
        return False, "server exited right after /health_generate"
    return True, "ok"


@dataclass
class WindowResult:
    """How the serving window ended (``ok``, ``partial`` or ``failed``) and what it measured."""

    state: str
    cause: str | None = None
    detail: dict = field(default_factory=dict)
    requests: list[RequestRecord] = field(default_factory=list)
    quality_rows: list = field(default_factory=list)


class _Recorder:
    """Appends records to JSONL as they finish and keeps them for the summary."""

    def __init__(self, path: Path):
        self.writer = results.JsonlWriter(path)
        self.rows: list = []

    def __call__(self, rec) -> None:
        self.writer.append(rec.to_dict())
        self.rows.append(rec)

    def close(self) -> None:
        self.writer.close()


async def _smoke_request(client: StreamingClient, variant: str, vocab: int, record) -> RequestRecord:
    """Without workloads, one tiny request shows the server answers."""
    req = GenerateRequest(input_ids=[(7 * i + 11) % (vocab - 3) + 3 for i in range(16)], max_new_tokens=4)
    rec = await client.generate(req, Labels(variant=variant, workload="smoke", phase="smoke"))
    record(rec)
    return rec


def run_window(scenario, variant, spec, server, sampler, vpaths, progress, pools,
               info: ServerInfo | None = None) -> WindowResult:
    """Idle window, workloads, quality arm, final liveness on a ready server; never stops it.
    ``info``: the server's validated /get_server_info (the quality arm sizes its churn from it)."""

    def phase(name: str) -> None:
        if sampler is not None:
            sampler.set_phase(name)
        progress.phase(name)

    phase("idle")
    if not _wait_alive(server, scenario.sampling.idle_window_s if scenario.sampling.enabled else 0.0):
        return WindowResult(PARTIAL, logscan.SERVER_DIED, {"when": "idle window"})

    pool_tokens = int(pools.get("max_total_num_tokens") or DEFAULT_POOL_TOKENS)
    vocab = model_vocab_size(variant.model_path)
    requests = _Recorder(vpaths.requests)
    quality_rows = _Recorder(vpaths.quality)

    async def body() -> tuple[str, str | None, dict]:
        async with StreamingClient(spec.base_url, timeout_s=variant.request_timeout_s) as client:
            def make_ctx(repeat: int) -> WorkloadContext:
                ctx = WorkloadContext(
                    base_url=spec.base_url, client=client, variant=variant.name, repeat=repeat,
                    pool_tokens=pool_tokens, vocab_size=vocab, seed=scenario.seed, record=requests,
                    set_phase=phase, alive=server.alive, request_timeout_s=variant.request_timeout_s,
                )
                ctx.record_quality = quality_rows
                ctx.model_path = variant.model_path
                return ctx

            if not scenario.workloads:
                rec = await _smoke_request(client, variant.name, vocab, requests)
                if rec.error is not None:
                    return FAILED, "request_error", {"error": rec.error}
            for repeat in range(scenario.repeats):
                ctx = make_ctx(repeat)
                outcome = await run_workloads(ctx, scenario.workloads)
                detail = {"repeat": repeat, "completed": outcome.completed, "failed": outcome.failed,
                          "timed_out": outcome.timed_out, "skipped": outcome.skipped,
                          "n_requests": outcome.n_requests, "n_errors": outcome.n_errors}
                if outcome.server_died:
                    return PARTIAL, logscan.SERVER_DIED, detail
                if outcome.timed_out:
                    return FAILED, logscan.TIMEOUT, detail
                if outcome.failed:
                    return FAILED, "workload_error", detail
            if scenario.quality.enabled:
                role = "off" if variant.name == scenario.quality.baseline_variant else "on"
                ctx = make_ctx(0)
                try:
                    await quality_run.run_quality(ctx, scenario.quality, role,
                                                  host_pool_tokens=pools.get("host_pool_tokens"),
                                                  server_info=info.raw if info is not None else None)
                except Exception as exc:  # noqa: BLE001 - a harness-side error fails this variant, not the run
                    log.exception("quality arm of %s failed", variant.name)
                    return FAILED, "quality_error", {"error": f"{type(exc).__name__}: {exc}"}
                if ctx.server_dead:
                    return PARTIAL, logscan.SERVER_DIED, {"when": "quality"}
        return OK, None, {}

    try:
        state, cause, detail = asyncio.run(body())
    finally:
        requests.close()
        quality_rows.close()

    if state == OK:
        phase("final_check")
        alive, why = final_liveness(server, spec.base_url, scenario.server.liveness_idle_s)
        if not alive:
            state, cause, detail = FAILED, logscan.SERVER_DIED, {"when": "after last response", "check": why}
    return WindowResult(state, cause, detail, requests.rows, quality_rows.rows)

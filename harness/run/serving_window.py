"""The serving window: what happens on a variant's server between "ready" and "stop".

Idle window (seed 000 saw swap-in while idle) → the workloads, once per repeat → the quality
arm → a final idle liveness check plus ``/health_generate`` (P6: a server that died after its last
answer is a failed variant, not a pass). Rows are appended to the variant's JSONL files as they
come, so a crash keeps everything measured before it; the verdict and the rows are returned for
the variant's summary (written by ``harness.analysis.run_products`` once the server has stopped).

A server can also stop serving without dying (SIGSTOPped, a deadlocked scheduler): every request
would then wait out ``request_timeout_s``. :class:`HangWatch` runs beside the workloads and the
quality arm (``server.watchdog``) and gives the server up as ``server_hung`` when

* no request has finished for ``probe_after_s`` and ``/health_generate`` then fails
  ``failed_probes`` times in a row, no request finishing meanwhile (the probe is sent only
  after such a silence, so a serving server is never disturbed);
* ``consecutive_timeouts`` requests in a row ran into ``request_timeout_s`` (the circuit breaker;
  a request cut short by its workload's own ``timeout_s`` does not count);
* the window has run for ``variant_budget_s`` (when set).

In-flight requests are then recorded with ``error=server_hung``, nothing more is sent, the variant
is ``partial`` with cause ``server_hung`` and its rows kept; the runner stops the server tree and
goes on with the next variant.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from harness.core import stall
from harness.core.model_config import model_vocab_size
from harness.quality import run as quality_run
from harness.quality.config import Quality
from harness.run import lanes
from harness.run.launch import metrics_enabled
from harness.run.restart import Restarter
from harness.server import http1, logscan
from harness.server.client import StreamingClient
from harness.server.info import NoAnswer, ServerInfo, get_status
from harness.server.request import GenerateRequest, Labels
from harness.store import gpu_time, results
from harness.store.records import RequestRecord
from harness.store.variant_status import FAILED, OK, PARTIAL
from harness.workloads.config import WorkloadConfig
from harness.workloads.context import WorkloadContext
from harness.workloads.sequence import run_workloads

if TYPE_CHECKING:
    from harness.run.progress import Progress
    from harness.run.sampler import Sampler
    from harness.scenario.models import Scenario, Variant
    from harness.scenario.server_models import Watchdog
    from harness.server.process import ExternalServer, LaunchSpec, ServerProcess

log = logging.getLogger(__name__)
T = TypeVar("T")

DEFAULT_POOL_TOKENS = 20480


def _wait_alive(server, seconds: float) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if not server.alive():
            return False
        time.sleep(0.1)
    return server.alive()


def final_liveness(server, base_url: str, idle_s: float, timeout_s: float = 30.0) -> tuple[str | None, str]:
    """Alive after ``idle_s`` of idleness and able to generate one token within ``timeout_s``:
    (None, "ok"); else the cause — ``server_died`` when the process exited, ``server_hung`` when
    it lives but does not generate — and what was seen."""
    if not _wait_alive(server, idle_s):
        return logscan.SERVER_DIED, f"server exited (code {server.exit_code()}) during the {idle_s:g}s idle check"
    for _ in range(3):  # again when the harness itself stalled while it waited (harness.core.stall)
        why, stalled = None, stall.stalled_s()
        try:
            status = get_status(base_url + "/health_generate", timeout_s=timeout_s)
        except NoAnswer as exc:
            why = f"/health_generate failed: {exc.reason}"
        else:
            if status != 200:
                why = f"/health_generate answered {status}"
        if why is None or stall.stalled_s() <= stalled:
            break
    if not server.alive():
        return logscan.SERVER_DIED, why or "server exited right after /health_generate"
    if why is not None:
        return logscan.SERVER_HUNG, why
    return None, "ok"


# Request errors that say nothing came back from the server (anything else is an answer).
_SILENT_ERRORS = frozenset({"timeout", "connection", "server_died", logscan.SERVER_HUNG})


class HangWatch:
    """Decides when a live server has stopped serving (see the module docstring).

    ``note(record)`` is called for every finished request (workload and quality rows); ``run()``
    is the task that probes after a silence and watches the budget. ``on_hung(detail)`` is called
    once, with why, and only while ``alive()``: a dead server is the death watchdog's."""

    def __init__(
        self,
        cfg: Watchdog,
        request_timeout_s: float,
        probe: Callable[[float], Awaitable[str | None]],
        alive: Callable[[], bool],
        on_hung: Callable[[dict], None],
        started: float | None = None,
        tick_s: float = 0.25,
        stalled: Callable[[], float] = stall.stalled_s,
    ) -> None:
        self.cfg = cfg  # scenario.server.watchdog
        self.request_timeout_s = request_timeout_s
        self.probe = probe  # (timeout_s) -> None when the server answered 200, else what went wrong
        self.alive = alive
        self.on_hung = on_hung
        self.tick_s = tick_s
        self.started = time.monotonic() if started is None else started
        self.last_progress = self.started
        self.timeouts_in_a_row = 0
        self.failed_probes: list[str] = []
        self.probes_sent = 0
        self.verdict: dict | None = None
        self.stalled = stalled  # the harness's own stalls so far (harness.core.stall): never the server's silence
        self._stalled_seen = stalled()

    # -- what the requests say -------------------------------------------------------------
    def note(self, rec) -> None:
        """A request finished: progress, unless nothing came back; a full request timeout counts
        towards the breaker, any answer resets it."""
        error = getattr(rec, "error", None)
        streamed = bool(getattr(rec, "chunk_ns", None)) or getattr(rec, "first_token_ns", None) is not None
        if error not in _SILENT_ERRORS or streamed:
            self.last_progress = time.monotonic()
            self.failed_probes.clear()
        if error == "timeout":
            ran_s = (time.perf_counter_ns() - int(getattr(rec, "sent_ns", 0) or 0)) / 1e9
            if ran_s >= 0.9 * self.request_timeout_s:  # not cut short by a workload's timeout_s
                self.timeouts_in_a_row += 1
                if self.timeouts_in_a_row >= self.cfg.consecutive_timeouts:
                    self.trip(
                        "consecutive_timeouts",
                        timeouts=self.timeouts_in_a_row,
                        request_timeout_s=self.request_timeout_s,
                    )
        elif error not in _SILENT_ERRORS:
            self.timeouts_in_a_row = 0

    # -- the task ---------------------------------------------------------------------------
    async def run(self) -> None:
        """Until the server is given up (or the task is cancelled at the window's end)."""
        cfg = self.cfg
        while self.verdict is None:
            now = time.monotonic()
            stalled = self.stalled()
            if stalled > self._stalled_seen:  # the harness was not running: not a silence of the server
                self.last_progress = min(now, self.last_progress + stalled - self._stalled_seen)
                self._stalled_seen = stalled
            if cfg.variant_budget_s is not None and now - self.started >= cfg.variant_budget_s:
                self.trip("variant_budget_s", budget_s=cfg.variant_budget_s)
            elif now - self.last_progress >= cfg.probe_after_s and self.alive():
                asked = time.monotonic()
                self.probes_sent += 1
                problem = await self.probe(cfg.probe_timeout_s)
                if problem is not None and self.stalled() > stalled:
                    problem = None  # the harness stalled while it waited: the probe says nothing
                    self.last_progress = max(self.last_progress, time.monotonic())
                if problem is None:
                    self.last_progress = max(self.last_progress, time.monotonic())
                    self.failed_probes.clear()
                elif self.last_progress < asked:  # still nothing finished while it waited
                    self.failed_probes.append(problem)
                    if len(self.failed_probes) >= cfg.failed_probes:
                        self.trip(
                            "health_probe",
                            probes=list(self.failed_probes),
                            silent_s=round(time.monotonic() - self.last_progress, 3),
                        )
            await asyncio.sleep(self.tick_s)

    def hold(self) -> None:
        """A planned restart (harness.run.restart): no silence counts until `resume`."""
        self.last_progress = float("inf")

    def resume(self) -> None:
        self.last_progress = time.monotonic()

    def trip(self, detected_by: str, **detail) -> None:
        if self.verdict is not None or not self.alive():
            return
        self.verdict = {"detected_by": detected_by, **detail, "after_s": round(time.monotonic() - self.started, 3)}
        log.warning("server given up as hung (%s): %s", detected_by, self.verdict)
        self.on_hung(self.verdict)


async def probe_health(base_url: str, timeout_s: float) -> str | None:
    """GET /health_generate (one token through the scheduler): None on 200 within ``timeout_s``,
    else what went wrong. The head and body are bounded by ``timeout_s`` in all (`get_status`, in a
    worker thread: a server dripping its head cannot hold the probe past it)."""
    try:
        status = await asyncio.to_thread(get_status, base_url + "/health_generate", timeout_s=timeout_s)
    except NoAnswer as exc:
        if "in time" in exc.reason:
            return f"/health_generate: no answer in {timeout_s:g}s"
        return f"/health_generate failed: {exc.reason}"
    return None if status == 200 else f"/health_generate answered {status}"


@dataclass
class WindowResult:
    """How the serving window ended (``ok``, ``partial`` or ``failed``) and what it measured."""

    state: str
    cause: str | None = None
    detail: dict = field(default_factory=dict)
    requests: list[RequestRecord] = field(default_factory=list)
    quality_rows: list = field(default_factory=list)


class _Recorder:
    """Appends records to JSONL as they finish, keeps them for the summary and tells each of
    ``on_record`` (the hang watch, the progress line)."""

    def __init__(self, path: Path, *on_record: Callable[[object], None]):
        self.writer = results.JsonlWriter(path, background=True)  # no fsync on the client's event loop
        self.rows: list = []
        self.on_record = on_record  # the hang watch, the progress line

    def __call__(self, rec) -> None:
        self.writer.append(rec.to_dict())
        self.rows.append(rec)
        for notify in self.on_record:
            notify(rec)

    def close(self) -> None:
        self.writer.close()


async def _smoke_request(client: StreamingClient, variant: str, vocab: int, record, abort=None) -> RequestRecord:
    """Without workloads, one tiny request shows the server answers."""
    req = GenerateRequest(input_ids=[(7 * i + 11) % (vocab - 3) + 3 for i in range(16)], max_new_tokens=4)
    rec = await client.generate(req, Labels(variant=variant, workload="smoke", phase="smoke"), abort=abort)
    record(rec)
    return rec


@dataclass(frozen=True)
class WindowPlan:
    """What one variant's serving window does, resolved once from its scenario (`plan_window`).
    The stages the window drives get typed pieces of it — the workloads their configs and a
    `WorkloadContext`, the quality arm its ``quality:`` block, resolved against the server's pool
    into a `harness.quality.run.QualityPlan` — never the scenario."""

    idle_s: float  # the idle window before the workloads (0 without sampling)
    watchdog: Watchdog  # server.watchdog: the hang watch's limits
    liveness_idle_s: float  # the final check's idle wait
    workloads: tuple[WorkloadConfig, ...]  # one repeat's list; none: one smoke request
    repeats: int
    seed: int
    scenario_dir: Path | None  # relative paths (datasets, a restart's model) resolve here
    quality: Quality | None  # None: no quality arm
    quality_role: str  # "off" on the parity baseline, else "on"
    enable_metrics: bool  # a planned restart launches as the first launch did


def plan_window(scenario: Scenario, variant: Variant) -> WindowPlan:
    """``variant``'s serving window, from its scenario."""
    q = scenario.quality
    return WindowPlan(
        idle_s=scenario.sampling.idle_window_s if scenario.sampling.enabled else 0.0,
        watchdog=scenario.server.watchdog,
        liveness_idle_s=scenario.server.liveness_idle_s,
        workloads=tuple(scenario.workloads),
        repeats=scenario.repeats,
        seed=scenario.seed,
        scenario_dir=scenario.base_dir,
        quality=q if q.enabled else None,
        quality_role="off" if variant.name == q.baseline_variant else "on",
        enable_metrics=metrics_enabled(scenario),
    )


@dataclass(frozen=True)
class WindowInputs:
    """What a serving window works on: its plan, one variant's ready server and where its
    figures go."""

    plan: WindowPlan
    variant: Variant
    spec: LaunchSpec | ExternalServer  # the launch spec (a launched server) or the attached server
    server: ServerProcess | ExternalServer
    sampler: Sampler | None
    vpaths: results.VariantPaths
    progress: Progress
    pools: dict  # the server's pools (max_total_num_tokens, ...), from its log or its info


def run_window(
    inputs: WindowInputs,
    info: ServerInfo | None = None,
    clock: gpu_time.PhaseClock | None = None,
) -> WindowResult:
    """Idle window, workloads, quality arm, final liveness on a ready server; never stops it.
    ``info``: the server's validated /get_server_info (the quality arm sizes its churn from it);
    ``clock``: the variant's GPU time, switched to work, quality and idle as the window goes."""
    plan, variant, spec, server = inputs.plan, inputs.variant, inputs.spec, inputs.server
    sampler, vpaths, progress, pools = inputs.sampler, inputs.vpaths, inputs.progress, inputs.pools
    clock = clock or gpu_time.PhaseClock(0)

    def phase(name: str, detail: str | None = None) -> None:
        """``name`` labels the samples; ``detail`` (e.g. a quality question's task) only the console line."""
        if clock.current == gpu_time.QUALITY:  # the churn is a wait of the quality arm's (harness.store.gpu_time)
            clock.enter(gpu_time.QUALITY, "quality_churn" if name == "quality_churn" else None)
        if sampler is not None:
            sampler.set_phase(name)
        progress.phase(name if detail is None else f"{name} {detail}")

    window_started = time.monotonic()
    clock.enter(gpu_time.IDLE, "idle_window")
    phase("idle")
    if not _wait_alive(server, plan.idle_s):
        return WindowResult(PARTIAL, logscan.SERVER_DIED, {"when": "idle window"})

    pool_tokens = int(pools.get("max_total_num_tokens") or DEFAULT_POOL_TOKENS)
    vocab = model_vocab_size(variant.model_path)
    current: list[WorkloadContext] = []  # the context requests go through now (the watch aborts it)

    def give_up(detail: dict) -> None:
        if current:
            current[-1].mark_hung()

    watch = HangWatch(
        plan.watchdog,
        variant.request_timeout_s,
        lambda timeout_s: probe_health(spec.base_url, timeout_s),
        lambda: server.alive(),  # the server object outlives a planned restart (harness.run.restart)
        give_up,
        started=window_started,
    )
    # a launched server can be restarted by a workload (storage_restart); an attached one cannot
    restarter = (
        Restarter(
            variant,
            server,
            sampler,
            phase,
            watch.hold,
            watch.resume,
            scenario_dir=plan.scenario_dir,
            enable_metrics=plan.enable_metrics,
        )
        if variant.backend != "external"
        else None
    )
    requests = _Recorder(vpaths.requests, watch.note, lambda rec: progress.request_done())
    quality_rows = _Recorder(vpaths.quality, watch.note, lambda rec: progress.request_done())

    def hung(**where) -> tuple[str, str, dict]:
        return PARTIAL, logscan.SERVER_HUNG, {**(watch.verdict or {}), **where}

    async def body() -> tuple[str, str | None, dict]:
        async with StreamingClient(spec.base_url, timeout_s=variant.request_timeout_s) as client:

            def make_ctx(repeat: int) -> WorkloadContext:
                ctx = WorkloadContext(
                    base_url=spec.base_url,
                    client=client,
                    variant=variant.name,
                    repeat=repeat,
                    pool_tokens=pool_tokens,
                    vocab_size=vocab,
                    seed=plan.seed,
                    record=requests,
                    set_phase=phase,
                    alive=restarter.alive if restarter is not None else server.alive,
                    request_timeout_s=variant.request_timeout_s,
                    scenario_dir=plan.scenario_dir,
                    model_path=variant.model_path,
                    restart=restarter,
                )
                current.append(ctx)
                if watch.verdict is not None:  # given up between two contexts: send nothing
                    ctx.mark_hung()
                return ctx

            clock.enter(gpu_time.WORK)
            if not plan.workloads:
                rec = await _smoke_request(client, variant.name, vocab, requests, make_ctx(0).abort)
                if watch.verdict is not None:
                    return hung(when="smoke request")
                if rec.error is not None:
                    return FAILED, "request_error", {"error": rec.error}
            for repeat in range(plan.repeats):
                ctx = make_ctx(repeat)
                if ctx.server_hung:
                    return hung(repeat=repeat)
                outcome = await run_workloads(ctx, plan.workloads)
                detail = {
                    "repeat": repeat,
                    "completed": outcome.completed,
                    "failed": outcome.failed,
                    "timed_out": outcome.timed_out,
                    "skipped": outcome.skipped,
                    "n_requests": outcome.n_requests,
                    "n_errors": outcome.n_errors,
                }
                if outcome.server_died:
                    return PARTIAL, logscan.SERVER_DIED, detail
                if outcome.server_hung or watch.verdict is not None:
                    return hung(**detail)
                if outcome.timed_out:
                    return FAILED, logscan.TIMEOUT, detail
                if outcome.failed:
                    return FAILED, "workload_error", detail
            if plan.quality is not None:
                clock.enter(gpu_time.QUALITY)
                ctx = make_ctx(0)
                try:
                    tokenizer = quality_run.arm_tokenizer(plan.quality, variant.model_path)
                    asks = quality_run.plan_quality(plan.quality, pool_tokens, tokenizer is not None)
                    arm = quality_run.QualityArm(
                        client=client,
                        role=plan.quality_role,
                        variant=variant.name,
                        seed=plan.seed,
                        vocab_size=vocab,
                        pool_tokens=pool_tokens,
                        record=quality_rows,
                        set_phase=phase,
                        abort=ctx.abort,
                        confirm_death=ctx.confirm_death,
                        tokenizer=tokenizer,
                        host_pool_tokens=pools.get("host_pool_tokens"),
                        server_info=info.raw if info is not None else None,
                        base_url=spec.base_url,
                    )
                    await quality_run.run_quality(arm, asks)
                except Exception as exc:  # noqa: BLE001 - a harness-side error fails this variant, not the run
                    if ctx.server_hung:
                        return hung(when="quality")
                    log.exception("quality arm of %s failed", variant.name)
                    return FAILED, "quality_error", {"error": f"{type(exc).__name__}: {exc}"}
                if ctx.server_dead:
                    return PARTIAL, logscan.SERVER_DIED, {"when": "quality"}
                if ctx.server_hung or watch.verdict is not None:
                    return hung(when="quality")
        return OK, None, {}

    async def watched_body() -> tuple[str, str | None, dict]:
        watcher = asyncio.create_task(watch.run())
        try:
            return await until_stopped(body(), lanes.current_lane_stopped())
        finally:
            watcher.cancel()

    try:
        state, cause, detail = http1.run(watched_body())  # on uvloop when installed
    except lanes.LaneStopped as exc:  # raised as the interrupt it is, once the loop has closed
        raise KeyboardInterrupt(str(exc)) from None
    finally:
        clock.enter(gpu_time.IDLE, "final_liveness")
        requests.close()
        quality_rows.close()

    if state == OK:
        phase("final_check")
        cause, why = final_liveness(server, spec.base_url, plan.liveness_idle_s, plan.watchdog.probe_timeout_s)
        if cause is not None:  # every answer was fine; the server was not, after them (P6)
            state, detail = FAILED, {"when": "after last response", "check": why}
            if cause == logscan.SERVER_HUNG:
                detail = {"detected_by": "final_check", **detail}
    detail = {**detail, "probes_sent": watch.probes_sent} if watch.probes_sent else detail
    return WindowResult(state, cause, detail, requests.rows, quality_rows.rows)


STOP_POLL_S = 0.1  # how often a side-by-side lane's window looks whether the run's interrupt stopped it


async def until_stopped(body: Awaitable[T], stopped: Callable[[], bool] | None, poll_s: float = STOP_POLL_S) -> T:
    """`body`'s result; `lanes.LaneStopped` (`body` cancelled) once ``stopped()`` is true: a
    side-by-side lane whose run was interrupted, its server stopped by the main thread. Without it
    the lane sent into a dead server for seconds after the interrupt and its thread outlived the
    run's exit. ``stopped`` None (the main thread's run): `body` as it is."""
    if stopped is None:
        return await body
    task = asyncio.ensure_future(body)
    while not task.done():
        if stopped():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            raise lanes.LaneStopped("the run was interrupted: this lane stopped")
        await asyncio.wait({task}, timeout=poll_s)
    return task.result()

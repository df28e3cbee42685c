"""Running one repeat's workload list on a variant's server: `run_workloads`.

Never raises for a server failure (reliability P5): a watchdog polls `ctx.alive()`; once the
server is gone every in-flight request is recorded `server_died`, the remaining workloads are
skipped and the outcome says `server_died=True`. A server given up as hung (`ctx.mark_hung`, by
the serving window's watch) is handled alike: `server_hung` rows, the rest skipped,
`server_hung=True`. A workload's `timeout_s` stops that workload only.
"""

from __future__ import annotations

import asyncio
import traceback
from dataclasses import dataclass, field
from typing import Sequence

from harness.server.request import Abort
from harness.workloads import kinds
from harness.workloads.config import WorkloadConfig
from harness.workloads.context import StopSending, WorkloadContext

WATCHDOG_INTERVAL_S = 0.1


@dataclass
class WorkloadsOutcome:
    """What happened to one repeat's workload list."""

    server_died: bool = False
    server_hung: bool = False
    completed: list[str] = field(default_factory=list)
    timed_out: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)  # workload → error (harness-side)
    skipped: list[str] = field(default_factory=list)  # not started: the server had died or hung
    n_requests: int = 0
    n_errors: int = 0

    @property
    def ok(self) -> bool:
        return not (self.server_died or self.server_hung or self.timed_out or self.failed)


async def _watchdog(ctx: WorkloadContext) -> None:
    while not ctx.server_gone:
        if not ctx.alive():
            ctx.mark_dead()
            return
        await asyncio.sleep(WATCHDOG_INTERVAL_S)


def _gone(ctx: WorkloadContext) -> str:
    return "server_hung" if ctx.server_hung else "server_died"


async def _timer(abort: Abort, timeout_s: float) -> None:
    await asyncio.sleep(timeout_s)
    abort.fire("timeout")


async def run_workloads(ctx: WorkloadContext, workloads: Sequence[WorkloadConfig]) -> WorkloadsOutcome:
    """Run `workloads` in order on ctx's server; never raises for server failures.

    Each workload gets a fresh abort signal (fired by its `timeout_s` or by the server's death);
    `flush_before` POSTs /flush_cache first (a refused flush fails that workload).
    """
    outcome = WorkloadsOutcome()
    declared = kinds()
    watchdog = asyncio.create_task(_watchdog(ctx))
    try:
        for cfg in workloads:
            name = cfg.name or cfg.kind  # type: ignore[attr-defined]
            if ctx.server_gone or not ctx.alive():
                ctx.server_dead = ctx.server_dead or not ctx.server_hung
                outcome.skipped.append(name)
                continue
            ctx.abort = Abort()
            timer = asyncio.create_task(_timer(ctx.abort, cfg.timeout_s)) if cfg.timeout_s else None
            try:
                if cfg.flush_before and not await ctx.client.flush_cache():
                    if not await ctx.confirm_death():
                        outcome.failed[name] = "flush_cache refused"
                    continue
                await declared[cfg.kind].run(ctx, cfg)  # type: ignore[attr-defined]
                if ctx.server_gone:
                    outcome.failed[name] = _gone(ctx)
                elif ctx.abort.reason == "timeout":  # fired while its last requests were in flight
                    outcome.timed_out.append(name)
                else:
                    outcome.completed.append(name)
            except StopSending as stop:
                if ctx.server_gone:
                    pass
                elif str(stop) == "timeout":
                    outcome.timed_out.append(name)
                else:
                    outcome.failed[name] = f"stopped: {stop}"
            except Exception as exc:  # a harness bug in a workload must not end the run
                if ctx.server_gone:
                    pass
                else:
                    tb = traceback.format_exception_only(type(exc), exc)[-1].strip()
                    outcome.failed[name] = tb
            finally:
                if timer is not None:
                    timer.cancel()
                if ctx.server_gone and name not in outcome.completed:  # also after a `continue`
                    outcome.failed.setdefault(name, _gone(ctx))
    finally:
        watchdog.cancel()
    outcome.server_died = ctx.server_dead
    outcome.server_hung = ctx.server_hung
    outcome.n_requests, outcome.n_errors = ctx.n_requests, ctx.n_errors
    return outcome

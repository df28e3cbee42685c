"""What a workload sends through: the variant's `WorkloadContext` and a workload's `WorkloadScope`.

A workload is `async def run(ctx, cfg) -> None` that sends requests through `WorkloadScope.send`
(which labels, records and watches for death) and knows nothing of processes or files.

Containment (reliability P5): a watchdog polls `ctx.alive()`; once the server is gone, or a
request fails to connect and the process turns out to be dead, the shared `Abort` fires: every
in-flight request is recorded with `error="server_died"`, nothing more is sent, the remaining
workloads are skipped and the outcome says `server_died=True`. Rows already recorded stay.
A workload's `timeout_s` fires the same signal with reason "timeout" for that workload only
(`harness.workloads.sequence` runs the list). A server that is alive but no longer serving is
given up by the serving window's hang watch (`mark_hung`): the same signal with reason
"server_hung", in-flight requests recorded with that error, the rest skipped.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Iterable, Mapping

from harness.server.request import Abort, GenerateRequest, Labels
from harness.spec.values import resolve_tokens
from harness.store.records import RequestRecord
from harness.workloads.config import WorkloadConfig
from harness.workloads.prompts import PromptFactory

if TYPE_CHECKING:  # the client (httpx) is loaded by whoever runs workloads, not by their declarations
    from harness.server.client import StreamingClient


class StopSending(Exception):
    """Raised by `send` once the abort signal fired: the workload must stop sending."""


def phase_label(workload: str, phase: str) -> str:
    """The sampler's phase label for a workload phase, e.g. "cold_prefill/cold"."""
    return f"{workload}/{phase}"


@dataclass
class WorkloadContext:
    """Everything a workload needs from its variant's run; built by the runner per repeat."""

    base_url: str
    client: StreamingClient
    variant: str
    repeat: int
    pool_tokens: int
    vocab_size: int
    seed: int
    record: Callable[[RequestRecord], None]
    set_phase: Callable[..., None] = lambda name, detail=None: None  # (label, console-only detail)
    alive: Callable[[], bool] = lambda: True
    request_timeout_s: float = 300.0
    # One factory for a server's whole life keeps "never-seen" prompts never seen across
    # repeats; pass the same one to every repeat's context (default: one per context).
    prompts: PromptFactory | None = None
    death_grace_s: float = 2.0  # after a connection error, how long to wait for the pid to go
    scenario_dir: Path | None = None  # relative file paths of a workload (datasets) resolve here
    model_path: str | None = None  # the variant's model folder (a dataset's tokenizer when it names none)
    # stop the server, keep its storage directory, start it again (optionally changed: model_path,
    # args) and wait until ready; None: the harness does not own the server (backend: external)
    restart: Callable[[Mapping[str, Any] | None], Awaitable[None]] | None = None
    # run state (set by run_workloads)
    server_dead: bool = False
    server_hung: bool = False  # alive but no longer serving (set by the serving window's watch)
    abort: Abort = field(default_factory=Abort)
    n_requests: int = 0
    n_errors: int = 0

    def __post_init__(self) -> None:
        if self.prompts is None:
            self.prompts = PromptFactory(self.seed, self.vocab_size)

    def tokens(self, size: Any) -> int:
        return resolve_tokens(size, self.pool_tokens)

    async def confirm_death(self) -> bool:
        """Poll `alive()` for up to `death_grace_s`; True (and abort) once the server is gone."""
        if self.server_dead:
            return True
        loop = asyncio.get_running_loop()
        end = loop.time() + self.death_grace_s
        while True:
            if not self.alive():
                self.mark_dead()
                return True
            if loop.time() >= end:
                return False
            await asyncio.sleep(0.05)

    def mark_dead(self) -> None:
        self.server_dead = True
        self.abort.fire("server_died")

    def mark_hung(self) -> None:
        self.server_hung = True
        self.abort.fire("server_hung")

    @property
    def server_gone(self) -> bool:
        """Nothing more may be sent: the server died or hung."""
        return self.server_dead or self.server_hung


class WorkloadScope:
    """One workload's view of the context: labels every request with the workload's name."""

    def __init__(self, ctx: WorkloadContext, cfg: WorkloadConfig) -> None:
        self.ctx = ctx
        self.cfg = cfg
        self.name: str = cfg.name or cfg.kind  # type: ignore[attr-defined]
        self.api = cfg.api
        self.max_new_tokens = cfg.new_tokens()

    def phase(self, phase: str) -> None:
        self.ctx.set_phase(phase_label(self.name, phase))

    def group(self, phase: str) -> str:
        return f"{self.name}/{phase}/r{self.ctx.repeat}"

    def prompts(self, count: int, n_tokens: int, purpose: str) -> list[list[int]]:
        return self.ctx.prompts.distinct(count, n_tokens, key=(self.ctx.variant, self.name, self.ctx.repeat, purpose))

    async def send(
        self,
        phase: str,
        index: int,
        input_ids: list[int],
        *,
        max_new_tokens: int | None = None,
        ignore_eos: bool = False,
        warmup: bool = False,
        group: str | None = None,
        defer: bool = False,
        at_ns: int | None = None,
    ) -> RequestRecord:
        """Send one request, record it, return it. Raises `StopSending` if the abort signal
        already fired (nothing is sent then). ``defer``: return it unrecorded — the workload
        labels it from timestamps it learns later and then calls `record`. ``at_ns``: send it
        at that `time.perf_counter_ns()` instant (`StreamingClient.generate_at`; the record
        carries it as ``scheduled_ns``)."""
        ctx = self.ctx
        if ctx.abort.fired:
            raise StopSending(ctx.abort.reason)
        req = GenerateRequest(
            input_ids=input_ids,
            max_new_tokens=self.max_new_tokens if max_new_tokens is None else max_new_tokens,
            ignore_eos=ignore_eos,
        )
        labels = Labels(
            variant=ctx.variant,
            workload=self.name,
            phase=phase,
            repeat=ctx.repeat,
            index=index,
            warmup=warmup,
            concurrency_group=group,
        )
        if at_ns is None:
            rec = await ctx.client.generate(req, labels, abort=ctx.abort, timeout_s=ctx.request_timeout_s, api=self.api)
        else:
            rec = await ctx.client.generate_at(
                at_ns, req, labels, abort=ctx.abort, timeout_s=ctx.request_timeout_s, api=self.api
            )
        if rec.error == "connection" and await ctx.confirm_death():
            rec.error = "server_died"
        if not defer:
            self.record(rec)
        return rec

    def record(self, rec: RequestRecord) -> None:
        """Count and record a finished request (`send` does this unless told to defer)."""
        self.ctx.n_requests += 1
        self.ctx.n_errors += rec.error is not None
        self.ctx.record(rec)

    async def gather(self, coros: Iterable[Awaitable[Any]]) -> list[Any]:
        """Run concurrently; every one finishes (and records) before a StopSending is re-raised."""
        results = await asyncio.gather(*coros, return_exceptions=True)
        for r in results:
            if isinstance(r, BaseException) and not isinstance(r, StopSending):
                raise r
        for r in results:
            if isinstance(r, StopSending):
                raise r
        return list(results)

    async def warmup(self, count: int, n_tokens: int) -> None:
        """`count` distinct requests of `n_tokens`, one at a time, phase "warmup"."""
        if count <= 0:
            return
        self.phase("warmup")
        for i, ids in enumerate(self.prompts(count, n_tokens, "warmup")):
            await self.send("warmup", i, ids, warmup=True)

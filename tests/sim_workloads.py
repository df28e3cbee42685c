"""Test helper (not a test module): run workload configs in-process against a simulated server
(real process, real HTTP) and summarize their records with their configs, for the tests of the
workload kinds that send on a clock (open_loop, dataset_replay, multi_turn_clients)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import httpx
from pydantic import TypeAdapter

from harness.analysis.summary import summarize
from harness.core.model_config import model_vocab_size
from harness.quality.config import Quality
from harness.quality.run import QualityArm, arm_tokenizer, plan_quality, run_quality
from harness.scenario import Workload
from harness.server.client import StreamingClient
from harness.sim.testing import MODELS, SimProcess
from harness.store.quality_record import QualityRecord
from harness.store.records import RequestRecord
from harness.workloads import WorkloadContext, WorkloadsOutcome, run_workloads

_WORKLOAD = TypeAdapter(Workload)
DATASETS = Path(__file__).resolve().parent / "fixtures" / "datasets"


def workload(**kw: Any) -> Any:
    """A workload config, validated as the scenario's ``workloads`` entries are."""
    return _WORKLOAD.validate_python(kw)


class Sim(SimProcess):
    """A started simulated server, its /get_server_info and liveness."""

    def __enter__(self) -> Sim:
        super().__enter__()
        self.info = httpx.get(self.url + "/get_server_info", timeout=10).json()
        return self

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


def sim(pool: int = 65536, *extra: str, time_scale: float = 0.1) -> Sim:
    return Sim(["--max-total-tokens", str(pool), "--skip-tokenizer-init", *extra], time_scale=time_scale)


def run_on(
    server: Sim,
    workloads: Sequence[Any],
    *,
    repeat: int = 0,
    scenario_dir: Path | None = DATASETS,
    timeout_s: float = 120.0,
    during: Callable[[], Awaitable[None]] | None = None,
) -> tuple[WorkloadsOutcome, list[RequestRecord]]:
    """Run ``workloads`` on ``server`` (one repeat); ``during``: a coroutine run on the same event
    loop meanwhile (cancelled at the end)."""
    records: list[RequestRecord] = []

    async def go() -> WorkloadsOutcome:
        async with StreamingClient(server.url, timeout_s=timeout_s) as client:
            ctx = WorkloadContext(
                base_url=server.url,
                client=client,
                variant="v",
                repeat=repeat,
                pool_tokens=server.info["max_total_num_tokens"],
                vocab_size=32000,
                seed=0,
                record=records.append,
                alive=server.alive,
                request_timeout_s=timeout_s,
                scenario_dir=scenario_dir,
            )
            side = asyncio.ensure_future(during()) if during is not None else None
            try:
                return await run_workloads(ctx, workloads)
            finally:
                if side is not None:
                    side.cancel()
                    await asyncio.gather(side, return_exceptions=True)

    return asyncio.run(go()), records


def summary_of(records: Sequence[RequestRecord], workloads: Sequence[Any]) -> dict[str, Any]:
    """{workload: its summary}, the configs passed as the runner passes them."""
    return summarize(records, {w.name: w.kind for w in workloads}, {w.name: w for w in workloads})["workloads"]


def max_in_flight(records: Sequence[RequestRecord]) -> int:
    """The most requests between their send and their last byte at one instant."""
    events = sorted(
        [(r.sent_ns, 1) for r in records] + [(r.done_ns, -1) for r in records if r.done_ns], key=lambda e: (e[0], e[1])
    )  # an end before a start at the same ns
    most = now = 0
    for _, step in events:
        now += step
        most = max(most, now)
    return most


async def ask_quality(
    base_url: str,
    client: StreamingClient,
    pool: int,
    cfg: dict,
    role: str,
    *,
    seed: int = 0,
    model_path: str = str(MODELS / "llama-tiny"),
) -> list[QualityRecord]:
    """The quality arm of ``cfg`` (the ``quality:`` block as a dict) on a simulator, built as the
    serving window builds it (`harness.run.serving_window`): the plan resolved once against
    ``pool``, the arm named after its role; the answers are returned."""
    q = Quality(**cfg)
    tokenizer = arm_tokenizer(q, model_path)
    arm = QualityArm(
        client=client,
        role=role,
        variant=role,
        seed=seed,
        vocab_size=model_vocab_size(model_path),
        pool_tokens=pool,
        record=lambda rec: None,
        tokenizer=tokenizer,
        base_url=base_url,
    )
    return await run_quality(arm, plan_quality(q, pool, tokenizer is not None))

"""short_ttft: TTFT of short prompts alone, then while a long prefill runs (interference).

Phases: "alone" (N short prompts, one at a time), "long" (one long prompt), "during_long" (N
short prompts sent one after another while the long one is in flight; the long request and
these share a concurrency group). A short request is "during_long" only if it was sent and
answered inside the long request's window (sent after it, finished no later than it, by the
recorded timestamps); any other is "after_long", so "during_long" never holds rows that did not
overlap the long prefill. With `long_prompt_tokens: null` only "alone" runs.
"""

from __future__ import annotations

import asyncio
from typing import Literal

from harness.records import RequestRecord
from harness.scenario.values import PosInt, TokenSize, TokenSizeT
from harness.workloads.config import PrefillConfig
from harness.workloads.context import WorkloadContext, WorkloadScope
from harness.workloads.kind import Derived, PhaseStat, ReportRow, WorkloadKind, ratio

START_DELAY_S = 0.01  # let the long request reach the server's scheduler first


class ShortTTFT(PrefillConfig):
    """Short prompts alone, then while a long prefill runs (null ``long_prompt_tokens``: alone only)."""

    kind: Literal["short_ttft"]
    n: PosInt = 5
    prompt_tokens: TokenSizeT = TokenSize(tokens=32)
    long_prompt_tokens: TokenSizeT | None = TokenSize(pool_fraction=0.8)


async def run(ctx: WorkloadContext, cfg: ShortTTFT) -> None:
    w = WorkloadScope(ctx, cfg)
    n, short = cfg.n, ctx.tokens(cfg.prompt_tokens)
    w.phase("alone")
    for i, ids in enumerate(w.prompts(n, short, "alone")):
        await w.send("alone", i, ids)
    if cfg.long_prompt_tokens is None:
        return  # alone only
    long_tokens = ctx.tokens(cfg.long_prompt_tokens)

    w.phase("during_long")
    group = w.group("during_long")
    (long_ids,) = w.prompts(1, long_tokens, "long")
    long_task = asyncio.create_task(w.send("long", 0, long_ids, group=group))

    def inside_long(rec: RequestRecord) -> tuple[str, str | None]:
        """Decided when the short request has finished: the long one still in flight, or
        finished no earlier than this one (same clock), means the short one ran inside it."""
        if not long_task.done():
            return "during_long", group
        long_rec = None if long_task.cancelled() or long_task.exception() else long_task.result()
        if (long_rec is not None and long_rec.done_ns is not None and rec.sent_ns >= long_rec.sent_ns
                and rec.done_ns is not None and rec.done_ns <= long_rec.done_ns):
            return "during_long", group
        return "after_long", None

    await asyncio.sleep(START_DELAY_S)
    try:
        for i, ids in enumerate(w.prompts(n, short, "during")):
            await w.send("during_long", i, ids, relabel=inside_long)
    finally:
        await asyncio.gather(long_task, return_exceptions=True)
    long_task.result()  # re-raises StopSending if the long one could not be sent


_ALONE = PhaseStat("alone", "ttft_ms")
_DURING = PhaseStat("during_long", "ttft_ms")

KIND = WorkloadKind(
    config=ShortTTFT,
    run=run,
    derived=(
        Derived("interference", "ratio", False, "short TTFT during a long prefill / alone, medians",
                lambda p: ratio(_DURING.of(p), _ALONE.of(p)), needs=("alone", "during_long"),
                compared=True),
    ),
    report_rows=(
        ReportRow("short TTFT alone", "ms", _ALONE, False, note="{workload}, p50"),
        ReportRow("short TTFT during a long prefill", "ms", _DURING, False, note="{workload}, p50"),
    ),
    history_stats=(_ALONE, _DURING),
)

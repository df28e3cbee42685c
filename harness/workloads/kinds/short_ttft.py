"""short_ttft: TTFT of short prompts alone, then while a long prefill runs (interference).

Phases: "alone" (N short prompts, one at a time), "long" (one long prompt), "during_long" (N
short prompts sent one after another while the long one is in flight; the long request and
these share a concurrency group). A short request is "during_long" only if it was sent inside
the long prefill's window — after the long request was sent and before its first token arrived
— by the recorded timestamps, once the long request has finished; any other is "after_long".
A short request that arrived during the prefill but waited for it to end is "during_long": that
wait is the interference being measured. With `long_prompt_tokens: null` only "alone" runs.
"""

from __future__ import annotations

import asyncio
from typing import Literal

from harness.spec.numbers import count
from harness.spec.values import TokenSize, TokenSizeT
from harness.store.records import RequestRecord
from harness.workloads.config import PrefillConfig
from harness.workloads.context import WorkloadContext, WorkloadScope
from harness.workloads.estimating import EstimateContext, WorkEstimate, add, est, mul
from harness.workloads.kind import Derived, PhaseStat, ReportRow, WorkloadKind, ratio

START_DELAY_S = 0.01  # let the long request reach the server's scheduler first


class ShortTTFT(PrefillConfig):
    """Short prompts alone, then while a long prefill runs (null ``long_prompt_tokens``: alone only)."""

    kind: Literal["short_ttft"]
    n: count("requests") = 5
    prompt_tokens: TokenSizeT = TokenSize(tokens=32)
    long_prompt_tokens: TokenSizeT | None = TokenSize(pool_fraction=0.8)

    def longest_request_tokens(self, pool_tokens: int) -> int:
        longest = self.long_prompt_tokens or self.prompt_tokens
        return max(self.prompt_tokens.resolve(pool_tokens), longest.resolve(pool_tokens)) + self.new_tokens()


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
    await asyncio.sleep(START_DELAY_S)
    shorts: list[RequestRecord] = []
    try:
        for i, ids in enumerate(w.prompts(n, short, "during")):
            shorts.append(await w.send("during_long", i, ids, group=group, defer=True))
    finally:
        await asyncio.gather(long_task, return_exceptions=True)
        long_rec = None if long_task.cancelled() or long_task.exception() else long_task.result()
        for rec in shorts:
            rec.phase, rec.concurrency_group = (
                ("during_long", group) if inside_prefill(rec, long_rec) else ("after_long", None)
            )
            w.record(rec)
    long_task.result()  # re-raises StopSending if the long one could not be sent


def inside_prefill(short: RequestRecord, long: RequestRecord | None) -> bool:
    """Sent after the long request and before its prefill ended (its first token, else its end)."""
    if long is None:
        return False
    end = long.first_token_ns if long.first_token_ns is not None else long.done_ns
    return end is not None and long.sent_ns <= short.sent_ns < end


_ALONE = PhaseStat("alone", "ttft_ms")
_DURING = PhaseStat("during_long", "ttft_ms")


def estimate(w: ShortTTFT, c: EstimateContext) -> WorkEstimate:
    """2n short prompts and one long one (n short alone without a long prompt)."""
    r, new = c.repeats, w.new_tokens()
    S = c.size(w.prompt_tokens)
    has_long = w.long_prompt_tokens is not None
    long_ = c.size(w.long_prompt_tokens) if has_long else 0
    n_short = w.n * (2 if has_long else 1)
    reqs = n_short + (1 if has_long else 0)
    sent = mul(add(mul(n_short, S), long_), r)
    return est(
        w.name,
        w.kind,
        reqs * r,
        sent,
        sent,
        sent,
        reqs * r * new,
        c.decode_s(reqs * r * max(0, new - 1)),
        c.too_long(long_),
    )


KIND = WorkloadKind(
    config=ShortTTFT,
    estimate=estimate,
    run=run,
    derived=(
        Derived(
            "interference",
            "ratio",
            False,
            "short TTFT during a long prefill / alone, medians",
            lambda p: ratio(_DURING.of(p), _ALONE.of(p)),
            needs=("alone", "during_long"),
            compared=True,
        ),
    ),
    report_rows=(
        ReportRow("short TTFT alone", "ms", _ALONE, False, note="{workload}, p50"),
        ReportRow("short TTFT during a long prefill", "ms", _DURING, False, note="{workload}, p50"),
    ),
    history_stats=(_ALONE, _DURING),
)

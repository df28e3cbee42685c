"""run_workloads bookkeeping with a stand-in client (no server process)."""

from __future__ import annotations

import asyncio

from harness.scenario import Workload
from harness.workloads import WorkloadContext, run_workloads
from pydantic import TypeAdapter

_wl = TypeAdapter(Workload)


class _DyingClient:
    """A client whose /flush_cache fails because the server dies meanwhile."""

    def __init__(self, state: dict) -> None:
        self.state = state

    async def flush_cache(self) -> bool:
        self.state["alive"] = False
        return False


def test_server_death_during_flush_before_is_reported():
    """The server dies while a workload's flush_before runs: that workload is listed as failed
    (server_died), not silently dropped from the outcome; the next one is skipped."""
    state = {"alive": True}

    async def go():
        ctx = WorkloadContext(base_url="http://x", client=_DyingClient(state), variant="v", repeat=0,
                              pool_tokens=4096, vocab_size=32000, seed=0, record=lambda r: None,
                              alive=lambda: state["alive"], death_grace_s=0.2)
        return await run_workloads(ctx, [
            _wl.validate_python(dict(kind="cold_prefill", n=1, prompt_tokens=64, flush_before=True)),
            _wl.validate_python(dict(kind="cold_prefill", name="second", n=1, prompt_tokens=64)),
        ])

    out = asyncio.run(go())
    assert out.server_died and not out.ok
    assert out.failed == {"cold_prefill": "server_died"}
    assert out.skipped == ["second"]


class _TimedClient:
    """Answers after a fixed delay per prompt length, stamping real perf_counter_ns times."""

    def __init__(self, delay_s_by_len: dict[int, float]) -> None:
        self.delay_s_by_len = delay_s_by_len

    async def generate(self, req, labels, **_):
        import time

        from tests.factories import make_record

        sent = time.perf_counter_ns()
        await asyncio.sleep(self.delay_s_by_len[len(req.input_ids)])
        ttft_ms = (time.perf_counter_ns() - sent) / 1e6
        return make_record(workload=labels.workload, phase=labels.phase, index=labels.index,
                           concurrency_group=labels.concurrency_group, sent_ns=sent, ttft_ms=ttft_ms)


def test_short_ttft_labels_during_long_from_timestamps():
    """A short request sent while the long one is in flight but answered after it finished is
    "after_long", not "during_long" (labelling at send time got this wrong)."""
    records = []
    client = _TimedClient({1000: 0.25, 32: 0.15})  # long 250 ms; shorts 150 ms, one after another

    async def go():
        ctx = WorkloadContext(base_url="http://x", client=client, variant="v", repeat=0,
                              pool_tokens=10_000, vocab_size=32000, seed=0, record=records.append)
        return await run_workloads(ctx, [_wl.validate_python(
            {"kind": "short_ttft", "n": 3, "prompt_tokens": 32, "long_prompt_tokens": 1000})])

    outcome = asyncio.run(go())
    assert outcome.ok
    (long,) = [r for r in records if r.phase == "long"]
    shorts = sorted((r for r in records if r.phase in ("during_long", "after_long")), key=lambda r: r.sent_ns)
    # short 1 runs 10..160 ms inside the long one (0..250 ms); short 2 is sent at ~160 ms, while
    # the long one is still in flight, but answered at ~310 ms, after it
    assert [r.phase for r in shorts] == ["during_long", "after_long", "after_long"]
    for r in shorts:
        inside = r.sent_ns >= long.sent_ns and r.done_ns <= long.done_ns
        assert (r.phase == "during_long") == inside
        assert (r.concurrency_group == long.concurrency_group) == inside

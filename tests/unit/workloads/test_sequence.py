"""run_workloads bookkeeping with a stand-in client (no server process)."""

from __future__ import annotations

import asyncio

from pydantic import TypeAdapter

from harness.scenario import Workload
from harness.workloads import WorkloadContext, run_workloads

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
        ctx = WorkloadContext(
            base_url="http://x",
            client=_DyingClient(state),
            variant="v",
            repeat=0,
            pool_tokens=4096,
            vocab_size=32000,
            seed=0,
            record=lambda r: None,
            alive=lambda: state["alive"],
            death_grace_s=0.2,
        )
        return await run_workloads(
            ctx,
            [
                _wl.validate_python(dict(kind="cold_prefill", n=1, prompt_tokens=64, flush_before=True)),
                _wl.validate_python(dict(kind="cold_prefill", name="second", n=1, prompt_tokens=64)),
            ],
        )

    out = asyncio.run(go())
    assert out.server_died and not out.ok
    assert out.failed == {"cold_prefill": "server_died"}
    assert out.skipped == ["second"]


class _TimedClient:
    """Answers with a first token after `ttft_s` and the end of the stream after `done_s` (per
    prompt length), stamping real perf_counter_ns times."""

    def __init__(self, timing_by_len: dict[int, tuple[float, float]]) -> None:
        self.timing_by_len = timing_by_len

    async def generate(self, req, labels, **_):
        import time

        from tests.factories import make_record

        ttft_s, done_s = self.timing_by_len[len(req.input_ids)]
        sent = time.perf_counter_ns()
        await asyncio.sleep(done_s)
        return make_record(
            workload=labels.workload,
            phase=labels.phase,
            index=labels.index,
            concurrency_group=labels.concurrency_group,
            sent_ns=sent,
            ttft_ms=ttft_s * 1e3,
            done_gap_ms=(done_s - ttft_s) * 1e3,
        )


def test_short_ttft_labels_during_long_from_timestamps():
    """A short request sent after the long prefill ended (the long one's first token), while the
    client had not yet seen the long request finish, is "after_long", not "during_long"; one
    sent during the prefill is "during_long" even if it was answered after it."""
    records = []
    # long: first token at 250 ms, stream ends at 400 ms; shorts: 150 ms each, one after another
    client = _TimedClient({1000: (0.25, 0.40), 32: (0.15, 0.15)})

    async def go():
        ctx = WorkloadContext(
            base_url="http://x",
            client=client,
            variant="v",
            repeat=0,
            pool_tokens=10_000,
            vocab_size=32000,
            seed=0,
            record=records.append,
        )
        return await run_workloads(
            ctx, [_wl.validate_python({"kind": "short_ttft", "n": 3, "prompt_tokens": 32, "long_prompt_tokens": 1000})]
        )

    outcome = asyncio.run(go())
    assert outcome.ok
    (long,) = [r for r in records if r.phase == "long"]
    shorts = sorted((r for r in records if r.phase in ("during_long", "after_long")), key=lambda r: r.sent_ns)
    # sent at ~10, ~160 and ~310 ms: the third after the prefill ended (250 ms) but before the
    # long request's stream ended (400 ms)
    assert [r.phase for r in shorts] == ["during_long", "during_long", "after_long"]
    for r in shorts:
        inside = long.sent_ns <= r.sent_ns < long.first_token_ns
        assert (r.phase == "during_long") == inside
        assert (r.concurrency_group == long.concurrency_group) == inside


def test_a_kind_config_without_its_longest_request_cannot_be_built():
    """``longest_request_tokens`` is abstract: the context check before a run needs every kind's."""
    from typing import Literal

    import pytest

    from harness.workloads.config import WorkloadConfig

    class NoLength(WorkloadConfig):
        kind: Literal["no_length"]

    with pytest.raises(TypeError, match="longest_request_tokens"):
        NoLength(kind="no_length")

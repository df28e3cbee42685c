"""The simulator's clock: batches end at absolute deadlines on a virtual timeline, so the server's
own work and a late wake-up (CPU contention) do not add to the modelled durations."""

import asyncio
import time

import pytest

from harness.sim.cost import MAX_LAG_S, batch_deadline
from harness.sim.engine import Engine
from harness.sim.request import SamplingParams, SimRequest
from tests.conftest import SIM_STEP_S as STEP_S
from tests.conftest import make_sim_engine as make_engine


def test_after_idling_a_batch_starts_when_its_request_arrived():
    # the time spent receiving and admitting the request is inside the batch
    assert batch_deadline(now=10.0, duration_s=0.1, timeline=None, arrived=9.97) == pytest.approx(10.07)
    assert batch_deadline(now=10.0, duration_s=0.1, timeline=None, arrived=None) == pytest.approx(10.1)


def test_a_busy_scheduler_starts_where_the_last_batch_ended():
    # woke 30 ms late: the next batch is 30 ms shorter, the lateness does not accumulate
    assert batch_deadline(now=10.03, duration_s=0.1, timeline=10.0, arrived=None) == pytest.approx(10.1)
    # a request that arrived after the last batch ended cannot start before it arrived
    assert batch_deadline(now=10.05, duration_s=0.1, timeline=10.0, arrived=10.02) == pytest.approx(10.12)


def test_lateness_beyond_the_cap_is_not_banked():
    d = batch_deadline(now=20.0, duration_s=0.1, timeline=10.0, arrived=None)
    assert d == pytest.approx(20.0 - MAX_LAG_S + 0.1)
    assert batch_deadline(now=20.0, duration_s=0.1, timeline=None, arrived=12.0) == pytest.approx(d)


def test_a_negative_duration_reads_as_zero():
    assert batch_deadline(now=5.0, duration_s=-1.0, timeline=5.0, arrived=None) == 5.0


async def generate(engine: Engine, ids: list[int], max_new_tokens: int) -> SimRequest:
    req = SimRequest(
        rid=f"r{ids[0]}", input_ids=ids, sampling=SamplingParams(max_new_tokens=max_new_tokens, temperature=0.0)
    )
    engine.submit(req)
    while not req.done:
        await req.updates.get()
    return req


def test_a_stalled_event_loop_does_not_lengthen_a_request():
    """40 batches of 10 ms modelled; the event loop is blocked for 0.3 s once (a starved
    process). Sleeping a relative 10 ms per batch made that 0.7 s; on the timeline it stays 0.4 s
    (plus the last wake-up's lateness)."""
    steps = 40
    modelled = steps * STEP_S

    async def main() -> tuple[float, SimRequest, SimRequest]:
        engine = make_engine()
        sched = asyncio.create_task(engine.run())
        try:
            t0 = time.perf_counter()
            task = asyncio.create_task(generate(engine, list(range(100, 200)), steps))
            await asyncio.sleep(0.05)
            time.sleep(0.3)  # blocks the loop: the scheduler wakes 0.3 s late
            req = await task
            elapsed = time.perf_counter() - t0
            again = await generate(engine, list(range(100, 200)), 1)
            return elapsed, req, again
        finally:
            sched.cancel()

    elapsed, req, again = asyncio.run(main())
    assert len(req.output_ids) == steps
    assert modelled <= elapsed < modelled + 0.15, elapsed
    # the finished request's pages were inserted before the next admission
    assert (again.cached_device, again.cached_host) == (99, 0)

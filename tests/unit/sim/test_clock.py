"""The simulator's clock: batches end at absolute deadlines on a virtual timeline, so the server's
own work and a late wake-up (CPU contention) do not add to the modelled durations."""

import asyncio
import time

import pytest

from harness.core.wire import MAX_SENT_AGE_S, SENT_HEADER, sent_age_s
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


def test_a_request_starts_when_the_client_sent_it():
    """submit(req, sent_age_s): the request's modelled time starts when the client wrote it, so the
    server's own work before the scheduler saw it (HTTP, JSON, the last request's insert) is
    inside the modelled time instead of after it."""

    async def main() -> tuple[float, float]:
        engine = make_engine()
        req = SimRequest(rid="r1", input_ids=[1, 2, 3], sampling=SamplingParams(max_new_tokens=1, temperature=0.0))
        now = asyncio.get_running_loop().time()
        engine.submit(req, 0.2)
        plain = SimRequest(rid="r2", input_ids=[4, 5, 6], sampling=SamplingParams(max_new_tokens=1, temperature=0.0))
        engine.submit(plain)
        return req.arrived - now, plain.arrived - now

    aged, plain = asyncio.run(main())
    assert aged == pytest.approx(-0.2, abs=0.01)
    assert plain == pytest.approx(0.0, abs=0.01)


def test_the_sent_stamp_is_read_with_its_bounds():
    now = 10_000_000_000
    assert sent_age_s(str(now - 30_000_000), now) == pytest.approx(0.03)
    assert sent_age_s(b"%d" % (now - 30_000_000), now) == pytest.approx(0.03)
    assert sent_age_s(str(now - 5_000_000_000), now) == MAX_SENT_AGE_S  # older: capped like the timeline's lag
    assert sent_age_s(str(now + 1_000_000), now) == 0.0  # from the future: not believed
    assert sent_age_s(None, now) == 0.0
    assert sent_age_s("soon", now) == 0.0
    assert MAX_SENT_AGE_S <= MAX_LAG_S


def test_the_simulated_server_reads_the_sent_stamp_into_submit():
    """/generate hands the scheduler the age of the client's stamp (`SENT_HEADER`), and 0 without."""
    from starlette.testclient import TestClient

    from harness.sim.app import AppState, build_app
    from harness.sim.tokens import SimTokenizer

    ages: list[float] = []

    class Recorder:
        class cfg:
            storage_backend = None

        def submit(self, req, sent_age_s=0.0):
            ages.append(sent_age_s)
            req.finish_reason = "length"
            req.output_ids.append(7)
            req.updates.put_nowait(None)

    st = AppState(
        engine=Recorder(),  # type: ignore[arg-type]
        server_info={},
        model_info={},
        skip_tokenizer=True,
        enable_metrics=False,
        enable_cache_report=False,
        served_model_name="m",
        tokenizer=SimTokenizer(32000),
        ready=True,
    )
    body = {"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 1}}
    with TestClient(build_app(st)) as client:
        stamp = str(time.perf_counter_ns() - 40_000_000)  # written 40 ms ago
        assert client.post("/generate", json=body, headers={SENT_HEADER.decode(): stamp}).status_code == 200
        assert client.post("/generate", json=body).status_code == 200
    assert ages[0] >= 0.04 and ages[0] <= MAX_SENT_AGE_S
    assert ages[1] == 0.0

"""Open-loop sending (`harness.server.schedule`): arrival offsets, waiting for an instant, the lag report."""

from __future__ import annotations

import asyncio
import gc
import time
import weakref

import pytest

from harness.server.schedule import (
    ScheduleLag,
    offsets_ns,
    schedule_lag,
    send_schedule,
    sleep_until_ns,
    young_collections_only,
)
from harness.store.records import RequestRecord


def rec(sent, sched):
    return RequestRecord(
        variant="v", workload="w", phase="p", repeat=0, index=0, rid="r", sent_ns=sent, scheduled_ns=sched
    )


def test_lag_is_sent_minus_scheduled_and_flags_a_client_bound_run():
    kept = schedule_lag([rec(1_000_000 + i * 10, 1_000_000) for i in range(100)])  # 0..990 ns late
    assert kept.n == 100 and not kept.client_bound and kept.max_ms == pytest.approx(0.00099)
    late = schedule_lag([rec(5_000_000, 1_000_000)] * 5 + [rec(1, 1)] * 95)  # 5 % are 4 ms late
    assert late.client_bound and late.p99_ms == pytest.approx(4.0) and late.p50_ms == 0.0
    assert "CLIENT-BOUND" in late.line()


def test_unscheduled_rows_are_left_out_and_early_sends_count_as_zero():
    rows = [rec(10, None), rec(5, 10), rec(3_000_000, 1_000_000)]
    lag = schedule_lag(rows)
    assert lag.n == 2 and lag.p50_ms == pytest.approx(1.0) and lag.max_ms == pytest.approx(2.0)
    assert schedule_lag([]) == ScheduleLag(0, None, None, None, 1.0, False)
    assert schedule_lag([rec(3_000_000, 1_000_000)], limit_ms=5.0).client_bound is False


def test_old_rows_without_the_field_load():
    d = rec(1, None).to_dict()
    del d["scheduled_ns"]
    assert RequestRecord.from_dict(d).scheduled_ns is None


def test_offsets_constant_and_poisson():
    assert offsets_ns(2000, 4) == [0, 500_000, 1_000_000, 1_500_000]
    p = offsets_ns(2000, 20_000, poisson=True, seed=1)
    assert p == sorted(p) and p == offsets_ns(2000, 20_000, poisson=True, seed=1)
    assert p[-1] / 1e9 == pytest.approx(10.0, rel=0.05)  # mean rate 2000/s
    with pytest.raises(ValueError):
        offsets_ns(0, 3)


def test_sleep_until_never_returns_early_and_send_schedule_keeps_order():
    async def go():
        due = time.perf_counter_ns() + 20_000_000
        await sleep_until_ns(due)
        woke = time.perf_counter_ns()

        async def send(t_ns, label):
            await sleep_until_ns(t_ns)
            return label, t_ns, time.perf_counter_ns()

        out = await send_schedule(send, [(off, (i,), {}) for i, off in enumerate([3_000_000, 0, 1_000_000])])
        return due, woke, out

    due, woke, out = asyncio.run(go())
    assert woke >= due
    assert [label for label, _, _ in out] == [0, 1, 2]
    assert all(sent >= t for _, t, sent in out)
    assert out[0][1] - out[1][1] == 3_000_000


@pytest.mark.parametrize("stall_at", [None, 150])
def test_send_schedule_collects_only_young_garbage_while_it_sends(stall_at):
    """The collector's older generations take milliseconds (they grow with all the process holds):
    while a schedule runs only the youngest is collected; young cyclic garbage is still freed.
    `stall_at`: the process stops 50 ms while starting call 150 (a loaded box descheduling it);
    the calls started after the stall are already due and run before the earlier ones, which
    still wait on their timers, so the last call to send is not call 299 then (measured at call
    299, 73-212 of the cycles had been made and freed: the test failed under load)."""

    class Node:
        pass

    cycles: list[weakref.ref] = []
    freed_by_the_last_send = []
    gens: list[int] = []  # the generations collected between the first send and the last
    sending = False
    sent = 0

    def seen(phase, info):
        if phase == "start" and sending:
            gens.append(info["generation"])

    async def sends(t_ns, i):
        nonlocal sending, sent
        await sleep_until_ns(t_ns)
        sending = True
        a, b = Node(), Node()
        a.other, b.other = b, a  # cyclic garbage: only the collector frees it
        cycles.append(weakref.ref(a))
        del a, b
        kept = [{"chunk": k} for k in range(200)]  # what a record keeps: survives every collection
        sent += 1
        if sent == 300:  # the last to send, whichever call it is
            freed_by_the_last_send.append(sum(c() is None for c in cycles))
            sending = False
        return kept

    def send(t_ns, i):
        if i == stall_at:
            time.sleep(0.05)
        return sends(t_ns, i)

    before = gc.get_threshold()
    gc.collect()
    gc.callbacks.append(seen)
    try:
        asyncio.run(send_schedule(send, [(i * 20_000, (i,), {}) for i in range(300)]))
    finally:
        gc.callbacks.remove(seen)
    assert gens and set(gens) == {0}  # 60,000 kept containers: ~85 young collections, no older one
    assert freed_by_the_last_send[0] > 250  # young cyclic garbage was freed while the schedule ran
    assert gc.get_threshold() == before


def test_young_collections_only_nests_and_restores_the_thresholds():
    before = gc.get_threshold()
    with young_collections_only():
        inner = gc.get_threshold()
        with young_collections_only():
            pass
        assert gc.get_threshold() == inner  # an inner window's end does not end the outer one
        assert inner[0] == before[0] and inner[1] > 1_000_000
    assert gc.get_threshold() == before
    with pytest.raises(RuntimeError), young_collections_only():
        raise RuntimeError
    assert gc.get_threshold() == before


def test_send_schedule_takes_each_result_when_its_call_ends():
    """No pass over every call once the last one is started (a gather over 6,000 tasks took
    5-8 ms of the loop just when the last 20 ms of sends were due): the scheduler does nothing
    for calls that ended before the last one starts."""
    hooks_on_ended = 0

    class CountingTask(asyncio.Task):
        def add_done_callback(self, fn, *, context=None):
            nonlocal hooks_on_ended
            hooks_on_ended += self.done()
            return super().add_done_callback(fn, context=context)

    async def send(t_ns, i):
        await sleep_until_ns(t_ns)
        return i

    async def go():
        asyncio.get_running_loop().set_task_factory(lambda loop, coro, **kw: CountingTask(coro, loop=loop, **kw))
        n = 200
        # the last call starts 20 ms (LEAD_NS) before its instant, 30 ms after the others ended
        items = [(i * 10_000, (i,), {}) for i in range(n - 1)] + [(50_000_000, (n - 1,), {})]
        return await send_schedule(send, items)

    assert asyncio.run(go()) == list(range(200))
    assert hooks_on_ended == 0


def test_a_failing_call_ends_the_schedule():
    started, cancelled = [], []
    waiting = None

    async def send(t_ns, i):
        started.append(i)
        if i == 2:  # fails once call 3 is waiting for its instant
            await waiting.wait()
            raise ValueError("bad request")
        try:
            if i == 3:
                waiting.set()
                await asyncio.sleep(60)  # still waiting when call 2 fails
            await sleep_until_ns(t_ns)
        except asyncio.CancelledError:
            cancelled.append(i)
            raise
        return i

    async def go():
        nonlocal waiting
        waiting = asyncio.Event()
        # calls 0-3 at 0-15 ms; the rest 10 s later: a loaded box delays the loop by many ms
        # (at load 20 calls at 15-25 ms had started before a failure was seen), never by 10 s
        items = [(i * 5_000_000, (i,), {}) for i in range(4)]
        items += [(10_000_000_000 + i * 5_000_000, (i,), {}) for i in range(4, 20)]
        return await send_schedule(send, items)

    with pytest.raises(ValueError, match="bad request"):
        asyncio.run(go())
    assert max(started) == 3  # nothing more was started once a call failed
    assert 3 in cancelled  # the call waiting for its instant was cancelled

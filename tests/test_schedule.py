"""Open-loop sending (`harness.schedule`): arrival offsets, waiting for an instant, the lag report."""

from __future__ import annotations

import asyncio
import time

import pytest

from harness.records import RequestRecord
from harness.schedule import ScheduleLag, offsets_ns, schedule_lag, send_schedule, sleep_until_ns


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
    rows = [rec(10, None).to_dict(), {"sent_ns": 5, "scheduled_ns": 10}, rec(3_000_000, 1_000_000)]
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

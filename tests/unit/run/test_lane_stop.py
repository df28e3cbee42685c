"""A side-by-side lane's serving window ends once the run's interrupt has stopped its lane."""

from __future__ import annotations

import asyncio
import threading

import pytest

from harness.run import lanes
from harness.run.serving_window import until_stopped


def test_a_stopped_lanes_window_ends_as_an_interrupt_and_its_body_is_cancelled():
    flag = {"stopped": False}
    cancelled = []

    async def endless_workload():
        try:
            while True:
                await asyncio.sleep(0.01)
                flag["stopped"] = True  # the main thread's interrupt, meanwhile
        except asyncio.CancelledError:
            cancelled.append(True)
            raise

    with pytest.raises(lanes.LaneStopped, match="lane stopped"):
        asyncio.run(asyncio.wait_for(until_stopped(endless_workload(), lambda: flag["stopped"], 0.01), 60))
    assert cancelled == [True]


def test_a_window_that_is_not_stopped_returns_its_result():
    async def body():
        await asyncio.sleep(0.02)
        return "ok"

    assert asyncio.run(until_stopped(body(), lambda: False, 0.005)) == "ok"
    assert asyncio.run(until_stopped(body(), None)) == "ok"


def test_the_stop_check_follows_the_lane_of_the_thread_it_runs_in():
    assert lanes.current_lane_stopped() is None  # the main thread: the signal itself interrupts
    lane = lanes.Lane(1, variant=None, gpu_ids=["0"], state=None)
    seen = []

    def in_lane():
        lanes._local.lane = lane
        check = lanes.current_lane_stopped()
        seen.append(check())
        lane.stopped = True  # what Lanes.interrupt sets
        seen.append(check())

    t = threading.Thread(target=in_lane)
    t.start()
    t.join()
    assert seen == [False, True]

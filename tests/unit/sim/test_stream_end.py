"""A request that finishes while its streaming consumer is away (writing the previous chunk to a
client slow to read) still gets its last update: the final chunk, with its finish_reason."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from harness.sim.app import _updates


def test_a_request_that_finishes_while_the_consumer_writes_still_gets_its_last_update():
    async def go():
        req = SimpleNamespace(updates=asyncio.Queue(), done=False)
        seen = []
        req.updates.put_nowait(None)  # a first batch of tokens
        async for _ in _updates(req):
            seen.append(req.done)
            if len(seen) == 1:
                # the consumer is away (a send blocked on a full socket); meanwhile the engine
                # finishes the request and signals it
                await asyncio.sleep(0)
                req.done = True
                req.updates.put_nowait(None)
        return seen

    assert asyncio.run(go()) == [False, True]  # the finished state was yielded, then the stream ended


def test_a_finished_request_ends_after_one_update():
    async def go():
        req = SimpleNamespace(updates=asyncio.Queue(), done=True)
        req.updates.put_nowait(None)
        return [req.done async for _ in _updates(req)]

    assert asyncio.run(go()) == [True]

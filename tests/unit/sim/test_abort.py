"""A client that goes away frees the simulated GPU, as it frees sglang's: a streaming response's
background task aborts its request 2 s after the response ended (sglang's
``TokenizerManager.create_abort_task``), a non-streaming one is aborted when a wait without output
finds the client gone; the scheduler drops a waiting request at once and finishes a running one
at its next step with ``finish_reason.type == "abort"``, its KV kept in the cache. Without it the
512 streams guidellm's throughput benchmark leaves in flight when its window ends kept the
simulator busy into the next benchmark (its constant-rate TTFT p95 4.9 s against 50 ms)."""

from __future__ import annotations

import asyncio
import re
import time

import httpx
import pytest

from harness.sim.request import ABORT_REASON, SamplingParams, SimRequest
from harness.sim.testing import SimProcess
from tests.conftest import make_sim_engine as make_engine

LONG = 30_000  # output tokens: minutes of decode at the simulator's 4 ms a step


def _req(rid: str, ids: list[int], max_new: int) -> SimRequest:
    return SimRequest(rid=rid, input_ids=ids, sampling=SamplingParams(max_new_tokens=max_new, temperature=0.0))


def test_an_aborted_request_leaves_the_queue_or_ends_at_its_next_step_with_its_kv_kept():
    async def main():
        engine = make_engine()  # max_running_requests 8, a 4,096-token pool
        sched = asyncio.create_task(engine.run())
        try:
            running = _req("run", list(range(100, 600)), 2000)
            waiting = _req("wait", list(range(700, 1900)), 2000)  # no room beside the first: it waits
            engine.submit(running)
            await running.updates.get()  # its first token is out
            engine.submit(waiting)
            await asyncio.sleep(0.05)
            assert engine.waiting and engine.waiting[0] is waiting
            engine.abort(waiting)
            assert waiting.done and waiting.finish_reason == ABORT_REASON and not engine.waiting
            assert waiting.output_ids == [] and waiting.forward_entry_at is None  # it never ran
            engine.abort(running)
            while not running.done:
                await running.updates.get()
            assert running.finish_reason == ABORT_REASON and len(running.output_ids) < 2000
            await asyncio.sleep(0.05)
            assert not engine.busy
            again = _req("again", list(range(100, 600)), 1)
            engine.submit(again)
            while not again.done:
                await again.updates.get()
            return again
        finally:
            sched.cancel()

    again = asyncio.run(main())
    assert again.cached_device == 499  # the aborted request's prompt stayed in the cache


def _running(sim: SimProcess) -> tuple[float, float]:
    text = httpx.get(sim.url + "/metrics", timeout=10).text
    get = lambda name: float(re.search(rf"^{name}{{[^}}]*}} (\S+)", text, re.M).group(1))  # noqa: E731
    return get("sglang:num_running_reqs"), get("sglang:num_queue_reqs")


def _wait_idle(sim: SimProcess, within_s: float) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if _running(sim) == (0.0, 0.0):
            return True
        time.sleep(0.2)
    return False


def test_a_stream_whose_client_went_away_is_aborted():
    args = ["--enable-metrics", "--max-total-tokens", "65536"]
    with SimProcess(args, time_scale=1.0) as sim:
        body = {"input_ids": list(range(10, 100)), "sampling_params": {"max_new_tokens": LONG}, "stream": True}
        for path, payload in (
            ("/generate", body),
            ("/v1/completions", {"prompt": "hi " * 50, "max_tokens": LONG, "stream": True}),
        ):
            with httpx.stream("POST", sim.url + path, json=payload, timeout=30) as r:
                next(ln for ln in r.iter_lines() if ln.startswith("data: {"))  # decoding now
            assert _running(sim)[0] == 1.0
            # sglang aborts 2 s after the response ended; the decode alone would take 2 minutes
            assert _wait_idle(sim, 30), path


def test_a_non_streaming_request_whose_client_went_away_is_aborted():
    with SimProcess(["--enable-metrics", "--max-total-tokens", "65536"], time_scale=1.0) as sim:
        body = {"input_ids": list(range(10, 100)), "sampling_params": {"max_new_tokens": LONG}}
        try:
            httpx.post(sim.url + "/generate", json=body, timeout=1.0)
        except httpx.TimeoutException:
            pass  # the client gave up after 1 s of the request's 2 minutes
        assert _wait_idle(sim, 30)  # found gone at its next output


@pytest.mark.slow  # ~40 s on the loaded 2-core box: 512 streams through one client process
def test_512_streams_the_openai_client_abandons_leave_the_server_idle():
    """guidellm's throughput benchmark in miniature: 512 streamed chat completions at once through
    the real ``openai`` client; every one answers, and when the client drops them all after their
    first chunk, the server is idle 2 s later (a pool that holds all 512: without the aborts it would
    decode their 2,000 tokens each for ~2 minutes, 55 ms a step at 512 running)."""
    openai = pytest.importorskip("openai")
    args = ["--enable-metrics", "--served-model-name", "tiny-sim", "--max-total-tokens", "1200000"]
    with SimProcess(args, time_scale=1.0) as sim:

        async def go() -> list[str]:
            client = openai.AsyncOpenAI(base_url=sim.url + "/v1", api_key="none", max_retries=0, timeout=120)

            async def one(i: int) -> str:
                stream = await client.chat.completions.create(
                    model="tiny-sim",
                    messages=[{"role": "user", "content": f"request {i}: " + "tell me about caches " * 40}],
                    max_tokens=2000,
                    stream=True,
                )
                async for chunk in stream:
                    if chunk.choices and chunk.choices[0].delta.content:
                        await stream.close()  # the client gives up on it, as a benchmark window ends
                        return chunk.choices[0].delta.role or "content"
                return "ended"

            try:
                return await asyncio.gather(*(one(i) for i in range(512)))
            finally:
                await client.close()

        got = asyncio.run(go())
        assert len(got) == 512 and "ended" not in got
        assert _wait_idle(sim, 60)

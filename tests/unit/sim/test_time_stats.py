"""sglang 0.5.17's per-request time stats, as the simulator emits them and the client keeps them:
with ``--enable-metrics`` every ``/generate`` answer's ``meta_info`` carries ``queue_time``
(seconds from the wait queue to the first prefill batch), ``forward_entry_time`` and
``prefill_finished_time`` (unix seconds) and, at the end, ``request_received_ts`` /
``request_finished_ts`` / ``decode_throughput``; without the flag none of them (sglang's
TokenizerManager merges them only while ``enable_metrics``). The harness's record keeps
``queue_time_s``; the OpenAI endpoints carry none, as sglang's do not."""

from __future__ import annotations

import asyncio
import json
import re
import time

import httpx
import pytest

from harness.server.client import StreamingClient
from harness.server.request import GenerateRequest
from harness.server.stream import StreamAccumulator
from harness.sim.testing import SimProcess

TIME_KEYS = {"queue_time", "forward_entry_time", "prefill_finished_time"}
END_KEYS = {"request_received_ts", "request_finished_ts", "decode_throughput"}
ARGS = ["--chunked-prefill-size", "2048", "--max-total-tokens", "32768"]
SCALE = 8.0


def _two_behind_each_other(url: str) -> list:
    """A 16,000-token prompt on a 2,048-token prefill budget (8 chunks, ~2 s at this time scale:
    a new request joins no batch while a prompt is being chunked), and a short one sent 50 ms
    after it: the second waits in the queue behind the first's chunks."""

    async def go():
        async with StreamingClient(url, timeout_s=60) as client:
            first = asyncio.ensure_future(
                client.generate(GenerateRequest(input_ids=list(range(10, 16010)), max_new_tokens=3))
            )
            await asyncio.sleep(0.05)
            second = await client.generate(GenerateRequest(input_ids=list(range(20000, 20100)), max_new_tokens=3))
            return [await first, second]

    return asyncio.run(go())


def test_with_enable_metrics_each_answer_says_how_long_it_queued():
    with SimProcess(ARGS + ["--enable-metrics"], time_scale=SCALE) as sim:
        a, b = _two_behind_each_other(sim.url)
        assert a.error is None and b.error is None
        assert a.queue_time_s is not None and b.queue_time_s is not None
        # the second waited for the first's chunks (at least one 2,048-token batch); the first barely
        assert b.queue_time_s > a.queue_time_s + 0.1
        for r in (a, b):  # queueing is part of the time to the first token
            assert 0 <= r.queue_time_s < (r.first_token_ns - r.sent_ns) / 1e9
        body = {"input_ids": list(range(10, 300)), "sampling_params": {"max_new_tokens": 4}}
        meta = httpx.post(sim.url + "/generate", json=body, timeout=30).json()["meta_info"]
        assert TIME_KEYS | END_KEYS <= set(meta)
        assert meta["request_received_ts"] <= meta["forward_entry_time"] <= meta["prefill_finished_time"]
        assert meta["prefill_finished_time"] <= meta["request_finished_ts"]
        # streamed: every chunk carries the scheduler's stamps, the last one the end's too
        with httpx.stream("POST", sim.url + "/generate", json={**body, "stream": True}, timeout=30) as r:
            chunks = [ln for ln in r.iter_lines() if ln.startswith("data: {")]
        metas = [json.loads(c[6:])["meta_info"] for c in chunks]
        assert all(TIME_KEYS <= set(m) for m in metas) and END_KEYS <= set(metas[-1])
        assert not END_KEYS & set(metas[0])
        # the OpenAI endpoints keep a few counts of meta_info, as sglang's do: no queue time there
        out = httpx.post(sim.url + "/v1/completions", json={"prompt": "hello there", "max_tokens": 2}, timeout=30)
        assert "queue_time" not in out.text


def test_without_enable_metrics_no_time_stats_and_the_record_says_none():
    with SimProcess(ARGS, time_scale=SCALE) as sim:
        a, b = _two_behind_each_other(sim.url)
        assert a.error is None and b.error is None
        assert a.queue_time_s is None and b.queue_time_s is None
        body = {"input_ids": list(range(10, 300)), "sampling_params": {"max_new_tokens": 4}}
        meta = httpx.post(sim.url + "/generate", json=body, timeout=30).json()["meta_info"]
        assert not (TIME_KEYS | END_KEYS) & set(meta)


def _accumulated(queue_time: object) -> StreamAccumulator:
    acc = StreamAccumulator(max_new_tokens=1)
    meta = {"prompt_tokens": 3, "completion_tokens": 1, "cached_tokens": 0, "queue_time": queue_time}
    acc.feed({"output_ids": [5], "meta_info": meta}, 1)
    acc.finish(2)
    acc.check_answer()
    return acc


@pytest.mark.parametrize("bad", ["soon", float("inf"), float("nan"), 8e5, True])
def test_a_queue_time_that_is_no_duration_is_a_protocol_error(bad):
    acc = _accumulated(bad)
    assert acc.error is not None and "queue_time" in acc.error and acc.queue_time is None


def test_a_negative_queue_time_is_no_figure_and_no_error():
    # sglang's forward entry minus wait-queue entry is below 0 only when its forward stamp is unset
    acc = _accumulated(-1796000000.5)
    assert acc.error is None and acc.queue_time is None
    assert _accumulated(0.25).queue_time == 0.25


LOG_LINE = re.compile(
    r"ReqTimeStats\(rid=(\S+), input_len=(\d+), cached_input_len=(\d+), output_len=(\d+), attempts=1, "
    r"type=unified\): queue_duration=([\d.]+)ms, forward_duration=([\d.]+)ms, entry_time=[\d.]+"
)


def test_enable_request_time_stats_logging_logs_sglang_s_line_per_request():
    # sglang 0.5.17: Req.log_time_stats at a request's end, only with the flag; the same queueing
    # as meta_info.queue_time (milliseconds, 2 decimals)
    with SimProcess(ARGS + ["--enable-metrics", "--enable-request-time-stats-logging"], time_scale=SCALE) as sim:
        a, b = _two_behind_each_other(sim.url)
        deadline = time.monotonic() + 10
        while len(LOG_LINE.findall(sim.output())) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        lines = {m[0]: m for m in LOG_LINE.findall(sim.output())}
        for r in (a, b):
            rid, n_in, cached, n_out, queue_ms, forward_ms = lines[r.rid]
            assert (int(n_in), int(cached), int(n_out)) == (r.prompt_tokens, r.cached_tokens, 3)
            assert float(queue_ms) == pytest.approx(r.queue_time_s * 1e3, abs=0.01)
            assert float(forward_ms) > 0
    with SimProcess(ARGS, time_scale=SCALE) as sim:
        _two_behind_each_other(sim.url)
        assert "ReqTimeStats" not in sim.output()

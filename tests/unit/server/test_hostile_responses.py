"""Hostile or broken server answers never crash the harness nor become silent garbage.

The real client (`harness.server.client`), the server-info reader (`harness.server.info`) and the
sampler's /metrics reader (`harness.server.metrics_page`) against `tests/hostile_server.py` (run as its own
process, so this process's memory is the harness's alone): each bad answer is a per-request error
`protocol: <what was wrong>` with the request's timestamps kept and the bad figures None, or a
`ServerAnswerError(reason)`, or a skipped sample with a reason; an endless line costs bounded memory.
"""

from __future__ import annotations

import asyncio
import json
import math
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import psutil
import pytest

from harness.measures.metrics import METRICS
from harness.run.sampler import Sampler
from harness.run.serving_window import final_liveness, probe_health
from harness.server import client as client_module
from harness.server import info as server_info_module
from harness.server.client import StreamingClient
from harness.server.identify import NotSglangError, identify_sglang
from harness.server.info import NoAnswer, ServerAnswerError, ServerInfo, fetch_server_info, get_status, use_api_key
from harness.server.metrics_page import MetricsPage, MetricsUnavailable, checked_metric_values
from harness.server.request import GenerateRequest, Labels
from harness.server.stream import MAX_LINE_BYTES

HERE = Path(__file__).parents[2]
GOLDEN_INFOS = sorted((HERE / "golden" / "runs").glob("*/*/server_info.json"))


@pytest.fixture(scope="module")
def hostile():
    """Base URL of a hostile server process; `url(case)` is the base URL of one case."""
    proc = subprocess.Popen(
        [sys.executable, str(HERE / "hostile_server.py"), "--port", "0"], stdout=subprocess.PIPE, text=True
    )
    try:
        line = proc.stdout.readline()
        assert line.startswith("PORT "), line
        base = f"http://127.0.0.1:{int(line.split()[1])}"
        yield base
    finally:
        proc.kill()
        proc.wait(10)


def case_url(base: str, case: str) -> str:
    return f"{base}/case/{case}"


def stats(base: str) -> dict:
    return httpx.get(base + "/stats", trust_env=False).json()


def generate(url: str, *, api: str = "generate", max_new_tokens: int = 3, timeout_s: float = 20.0):
    async def go():
        async with StreamingClient(url, timeout_s=timeout_s, api=api) as client:
            return await client.generate(
                GenerateRequest(input_ids=list(range(3, 67)), max_new_tokens=max_new_tokens),
                Labels(workload="w", phase="p"),
            )

    return asyncio.run(go())


class PeakRss:
    """Peak RSS growth of this process while the block runs (sampled every 5 ms)."""

    def __enter__(self):
        self._proc = psutil.Process()
        self.base = self.peak = self._proc.memory_info().rss
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()
        return self

    def _watch(self):
        while not self._stop.is_set():
            self.peak = max(self.peak, self._proc.memory_info().rss)
            time.sleep(0.005)

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self._proc.memory_info().rss)

    @property
    def growth_mib(self) -> float:
        return (self.peak - self.base) / 2**20


# ----------------------------------------------------------------------------- streaming answers


def test_the_good_answer_passes(hostile):
    """Control: the hostile server's good answer is a clean record (so the failures below are the
    checks, not the server's shape)."""
    rec = generate(case_url(hostile, "ok"))
    assert rec.error is None
    assert rec.output_ids == [5, 6, 7] and rec.chunk_new_tokens == [1, 1, 1]
    assert (rec.prompt_tokens, rec.completion_tokens, rec.cached_tokens) == (64, 3, 32)
    assert (rec.cached_device, rec.cached_host, rec.cached_storage) == (16, 16, 0)
    assert METRICS["host_hit_fraction"].of_record(rec) == 0.25
    comp = generate(case_url(hostile, "ok"), api="completions")
    assert comp.error is None and comp.text == "ab" and comp.cached_tokens == 0


# case → (what the error says, the record's fields that must be None)
BAD_STREAMS = {
    "nan_meta": ("invalid JSON in stream (NaN is not valid JSON", ["cached_tokens", "cached_host"]),
    "infinity_tier": ("invalid JSON in stream (Infinity is not valid JSON", ["cached_tokens", "cached_host"]),
    "negative_cached": ("cached_tokens is -5, not a token count", ["cached_tokens", "cached_host"]),
    "cached_over_prompt": ("cached_tokens 1000000 exceeds prompt_tokens 64", ["cached_tokens", "cached_host"]),
    "absurd_cached": ("cached_tokens is 64000000000, not a token count", ["cached_tokens", "cached_host"]),
    "tiers_over_prompt": (
        "cached_tokens_details sum to 80, more than prompt_tokens 64",
        ["cached_device", "cached_host", "cached_storage"],
    ),
    "string_prompt_tokens": ("prompt_tokens is '64', not a token count", ["prompt_tokens"]),
    "no_prompt_tokens": (
        "no prompt_tokens reported for a prompt of 64 tokens; cached_tokens 640 exceeds the 64 prompt tokens sent",
        ["prompt_tokens", "cached_tokens", "cached_host"],
    ),
    "bad_output_id": ("output id -1 is not a token id", []),
    "cut_short": ("the answer ended at 2 of the 3 tokens asked, with no finish reason", []),
    "list_meta": ("meta_info is [1, 2], not an object", ["prompt_tokens", "cached_tokens"]),
    "deep_json": ("invalid JSON in stream (JSON nested too deep to read", ["prompt_tokens", "cached_tokens"]),
}


@pytest.mark.parametrize("case", sorted(BAD_STREAMS))
def test_a_bad_stream_is_a_request_error_with_a_reason(hostile, case):
    reason, nulls = BAD_STREAMS[case]
    rec = generate(case_url(hostile, case))  # never raises
    assert rec.error is not None and rec.error.startswith("protocol: "), rec.error
    assert reason in rec.error, rec.error
    for name in nulls:
        assert getattr(rec, name) is None, (name, getattr(rec, name))
    # the request's timestamps stay
    assert rec.sent_ns > 0 and rec.wall_start > 0
    assert rec.done_ns is not None and rec.done_ns >= rec.sent_ns  # [DONE] came: the stream ended
    assert all(t >= rec.sent_ns for t in rec.chunk_ns)
    # no garbage figure: a hit fraction is either unknown or a fraction
    for metric in ("host_hit_fraction", "device_hit_fraction", "cached_fraction"):
        v = METRICS[metric].of_record(rec)
        assert v is None or 0.0 <= v <= 1.0, (metric, v)
    rec.to_json()  # and it stores


def test_endless_small_chunks_stop_at_the_chunk_cap(hostile):
    rec = generate(case_url(hostile, "many_chunks"), max_new_tokens=4)
    assert rec.error.startswith("protocol: more than ") and "chunks" in rec.error, rec.error
    assert len(rec.chunk_ns) == 4 * 4 + 1024 + 1  # one past CHUNKS_PER_TOKEN * max_new_tokens + OUTPUT_SLACK


@pytest.mark.parametrize("api", ["generate", "completions"])
def test_an_endless_line_is_cut_at_the_bound_with_bounded_memory(hostile, api):
    """2 GiB without a newline: the client stops at MAX_LINE_BYTES, drops the connection (the
    server's write fails, long before 2 GiB), and this process grows by well under 50 MB."""
    before = stats(hostile)["cut_off"].get("long_line", 0)
    with PeakRss() as rss:
        rec = generate(case_url(hostile, "long_line"), api=api)
    assert rec.error == f"protocol: line longer than {MAX_LINE_BYTES} bytes"
    assert rec.sent_ns > 0 and rec.chunk_ns == [] and rec.done_ns is None
    assert rss.growth_mib < 50, rss.growth_mib
    deadline = time.monotonic() + 10
    while stats(hostile)["cut_off"].get("long_line", 0) == before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert stats(hostile)["cut_off"].get("long_line", 0) > before, "the connection was not dropped"
    assert stats(hostile)["bytes"]["long_line"] < 2 << 30


def _within(seconds: float, fn):
    """fn() in a thread, its result; a hang guard (far above the bound under test), not a speed
    check: a call still running after ``seconds`` is the unbounded wait the test is about."""
    out: dict = {}

    def go():
        try:
            out["value"] = fn()
        except BaseException as exc:  # handed back to the test
            out["error"] = exc

    t = threading.Thread(target=go, daemon=True)
    t.start()
    t.join(seconds)
    assert not t.is_alive(), f"still waiting after {seconds} s: the time bound did not hold"
    if "error" in out:
        raise out["error"]
    return out["value"]


def test_a_server_dripping_its_head_is_given_up_at_each_bound(hostile):
    """A head that comes one byte every 50 ms passes any per-read timeout: every control reader
    bounds the whole answer — server info, /health_generate (startup, final check, hang probe),
    /flush_cache, /metrics, identification — and so does a stream's total timeout."""
    url = case_url(hostile, "drip_head")
    assert _within(60, lambda: fetch_server_info(url, timeout_s=1.0)) is None
    with pytest.raises(NoAnswer, match="in time"):
        _within(60, lambda: get_status(url + "/health_generate", timeout_s=1.0))
    assert _within(60, lambda: asyncio.run(probe_health(url, 1.0))) == "/health_generate: no answer in 1s"
    assert _within(60, lambda: final_liveness(_Alive(), url, 0.0, timeout_s=1.0)) == (
        "server_hung",
        "/health_generate failed: no complete answer in time",
    )
    with pytest.raises(NotSglangError, match="in time"):
        _within(60, lambda: identify_sglang(url, timeout_s=1.0))
    with pytest.raises(MetricsUnavailable):
        _within(60, lambda: MetricsPage(url, 0.5, 1 << 20, 1.0).fetch())

    async def flush():
        async with StreamingClient(url) as client:
            return await client.flush_cache(attempts=1)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(client_module, "FLUSH_S", 1.0)
        assert _within(60, lambda: asyncio.run(flush())) is False
    rec = _within(60, lambda: generate(url, timeout_s=1.0))
    assert rec.error is not None and rec.error.startswith("timeout"), rec.error


class _Alive:
    def alive(self) -> bool:
        return True

    def exit_code(self) -> None:
        return None


def test_control_calls_read_bounded_bodies(hostile):
    """/flush_cache and /health_generate: only the status counts; an endless body is not read."""

    async def flush():
        async with StreamingClient(case_url(hostile, "long_line")) as client:
            return await client.flush_cache(attempts=1)

    with PeakRss() as rss:
        assert asyncio.run(flush()) is True
        assert get_status(case_url(hostile, "long_line") + "/health_generate", timeout_s=10) == 200
    assert rss.growth_mib < 50, rss.growth_mib


# ----------------------------------------------------------------------------- /get_server_info


def test_server_info_good_answer(hostile):
    info = fetch_server_info(case_url(hostile, "ok"))
    assert info is not None
    assert (info.max_total_num_tokens, info.max_req_input_len, info.context_length) == (4096, 4095, 8192)
    assert info.page_size == 1 and info.version == "0.5.17-hostile"
    assert info.hicache.enabled is True and info.hicache.ratio == 2.0 and info.hicache.write_policy == "write_through"
    assert info.raw["internal_states"] == [{}]


@pytest.mark.parametrize(
    "case, reason",
    [
        ("list_server_info", "server info is a JSON list, not an object"),
        ("deep_info", "server info is not valid JSON (JSON nested too deep to read"),
        ("deep_but_readable_info", "server info nests deeper than 64 levels"),
        ("string_pool", "max_total_num_tokens is 'lots'; expected an integer"),
        ("nan_server_info", "server info is not valid JSON (NaN is not valid JSON"),
        ("long_line", "answer longer than"),
    ],
)
def test_a_bad_server_info_raises_server_answer_error(hostile, case, reason):
    with PeakRss() as rss:
        with pytest.raises(ServerAnswerError) as err:
            fetch_server_info(case_url(hostile, case))
    assert reason in err.value.reason, err.value.reason
    assert not isinstance(err.value, ValueError)  # the CLI maps ValueError to "bad input", exit 2
    assert rss.growth_mib < 50


def test_no_server_info_endpoint_is_unknown_not_an_error(hostile):
    assert fetch_server_info(case_url(hostile, "no_such_case")) is None  # 404 on both paths
    assert fetch_server_info("http://127.0.0.1:9") is None  # nothing listening


@pytest.mark.parametrize(
    "obj, reason",
    [
        ("text", "server info is a JSON string"),
        (None, "server info is a JSON null"),
        ({"max_total_num_tokens": True}, "max_total_num_tokens is True"),
        ({"max_total_num_tokens": 4096.0}, "max_total_num_tokens is 4096.0"),
        ({"max_total_num_tokens": 0}, "max_total_num_tokens is 0"),
        ({"max_total_num_tokens": -1}, "max_total_num_tokens is -1"),
        ({"max_total_num_tokens": 2**40}, "max_total_num_tokens is 1099511627776"),
        ({"max_total_num_tokens": float("nan")}, "max_total_num_tokens is nan"),
        ({"context_len": 4096, "max_req_input_len": 8000}, "max_req_input_len 8000 exceeds the context length 4096"),
        ({"page_size": "16"}, "page_size is '16'"),
        ({"hicache_ratio": 0}, "hicache_ratio is 0"),
        ({"hicache_ratio": float("inf")}, "hicache_ratio is inf"),
        ({"hicache_size": -1}, "hicache_size is -1"),
        ({"enable_hierarchical_cache": "yes"}, "enable_hierarchical_cache is 'yes'"),
        ({"hicache_write_policy": 3}, "hicache_write_policy is 3"),
        ({"version": "v" * 1000}, "version is 'vvvv"),
        ({"max_mamba_cache_size": -2}, "max_mamba_cache_size is -2"),
    ],
)
def test_server_info_parse_rejects_wrong_types_and_ranges(obj, reason):
    with pytest.raises(ServerAnswerError) as err:
        ServerInfo.parse(obj)
    assert err.value.reason.startswith(reason), err.value.reason


def test_server_info_parse_unknown_and_null_fields():
    info = ServerInfo.parse({"context_length": None, "whatever": [1, {"x": None}], "hicache_storage_backend": None})
    assert info.max_total_num_tokens is None and info.context_length is None and info.hicache.enabled is None
    assert ServerInfo.parse({"context_length": 2048}).context_length == 2048  # the arg when context_len is absent


@pytest.mark.parametrize("path", GOLDEN_INFOS, ids=lambda p: f"{p.parent.parent.name}/{p.parent.name}")
def test_server_info_parse_reads_the_stored_answers(path):
    """Every server_info.json of the golden runs (the simulator's real answers) parses."""
    info = ServerInfo.parse_body(path.read_bytes())
    assert info.max_total_num_tokens and info.max_total_num_tokens > 0
    assert info.simulated is True and info.version


# ----------------------------------------------------------------------------- /metrics


@pytest.mark.parametrize(
    "case, reason",
    [
        ("garbage_metrics", "no sglang: series"),
        ("nan_counter", 'counter sglang:prompt_tokens_total{model_name="m"} is nan'),
        ("negative_counter", "is -3.0"),
        ("binary_metrics", "UnicodeDecodeError"),
        ("long_line", "answer longer than"),
    ],
)
def test_a_bad_metrics_answer_is_a_skipped_sample_with_a_reason(hostile, case, reason):
    samples: list[dict] = []
    sampler = Sampler(None, case_url(hostile, case), samples.append, interval_s=0.05, gpu=False, metrics_timeout_s=2.0)
    with PeakRss() as rss:
        sampler.start()
        time.sleep(0.3)
        assert sampler.running  # the sampler thread is still going
        assert sampler.stop(timeout_s=10)
    assert samples and all(s["counters"] is None for s in samples)
    assert sampler.metrics_errors == len(samples)
    assert reason in sampler.last_error, sampler.last_error
    assert rss.growth_mib < 50


def test_good_metrics_answer_and_a_nan_gauge(hostile):
    samples: list[dict] = []
    with Sampler(None, case_url(hostile, "ok"), samples.append, interval_s=0.05, gpu=False):
        time.sleep(0.2)
    assert samples and samples[-1]["counters"] == {
        'sglang:prompt_tokens_total{model_name="m"}': 64.0,
        'sglang:token_usage{model_name="m"}': 0.25,
    }
    # a non-finite gauge is legal Prometheus text: dropped, the rest kept
    kept = checked_metric_values({"sglang:token_usage": math.nan, "sglang:prompt_tokens_total": 5.0})
    assert kept == {"sglang:prompt_tokens_total": 5.0}


def test_a_deeply_nested_stream_fails_alone(hostile):
    """One stream of 100,000 nested lists among five good ones, on one client: it is a protocol
    error, the five are clean records (a RecursionError used to escape the reader and stall them)."""

    async def go():
        async with StreamingClient(hostile, timeout_s=20.0) as client:
            reqs = [
                client.generate(
                    GenerateRequest(input_ids=list(range(3, 67)), max_new_tokens=3),
                    Labels(workload="w", phase="p", index=i),
                    # the case comes from the path: the deep one through its own base URL
                )
                for i in range(5)
            ]
            async with StreamingClient(case_url(hostile, "deep_json"), timeout_s=20.0) as deep:
                recs = await asyncio.gather(
                    *reqs, deep.generate(GenerateRequest(input_ids=list(range(3, 67)), max_new_tokens=3))
                )
        return recs

    *good, bad = asyncio.run(go())
    assert [r.error for r in good] == [None] * 5 and all(r.output_ids == [5, 6, 7] for r in good)
    assert bad.error.startswith("protocol: invalid JSON in stream (JSON nested too deep"), bad.error


def test_an_api_key_the_server_echoes_is_scrubbed_from_the_record(hostile):
    """The server's abort message repeats the Authorization header: the record (its error, its
    JSON row) never holds the key — it is scrubbed by value where the server's text comes in."""
    url = case_url(hostile, "echo_key")
    key = "sk-live-9f8e7d6c5b4a"
    use_api_key(url, key)
    try:
        rec = generate(url)
    finally:
        server_info_module._API_KEYS.pop(url, None)
    assert rec.error is not None and "invalid request from Bearer ***" in rec.error, rec.error
    assert key not in rec.to_json() and key not in json.dumps(rec.to_dict())

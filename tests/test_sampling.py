"""Sampler pieces without the simulator: /metrics parsing, per-phase summaries on hand-built
samples, process-tree RSS, and the Sampler thread against a tiny local /metrics server."""

from __future__ import annotations

import http.server
import os
import subprocess
import sys
import threading
import time

import pytest

from harness.sampling import (
    Sampler,
    is_counter_key,
    metric_key,
    parse_metrics_text,
    process_tree_rss_kib,
    summarize_samples,
)

SAMPLE_FIELDS = {
    "t_ns", "wall_time", "phase", "mem_available_kib", "mem_free_kib", "cached_kib", "mlocked_kib",
    "shmem_kib", "swap_total_kib", "swap_free_kib", "pswpin_kib_s", "pswpout_kib_s",
    "pgmajfault_s", "server_rss_kib", "counters",
}

METRICS_TEXT = """\
# HELP sglang:prompt_tokens_total Number of prefill tokens processed.
# TYPE sglang:prompt_tokens_total counter
sglang:prompt_tokens_total{model_name="m"} 1200.0
# HELP sglang:cached_tokens_total Number of cached prompt tokens.
# TYPE sglang:cached_tokens_total counter
sglang:cached_tokens_total{cache_source="device",model_name="m"} 64.0
# HELP sglang:token_usage The token usage.
# TYPE sglang:token_usage gauge
sglang:token_usage{model_name="m"} 0.25
# HELP sglang:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE sglang:time_to_first_token_seconds histogram
sglang:time_to_first_token_seconds_bucket{le="0.1",model_name="m"} 2.0
sglang:time_to_first_token_seconds_bucket{le="+Inf",model_name="m"} 3.0
sglang:time_to_first_token_seconds_sum{model_name="m"} 0.42
sglang:time_to_first_token_seconds_count{model_name="m"} 3.0
# HELP process_cpu_seconds_total Total user and system CPU time.
# TYPE process_cpu_seconds_total counter
process_cpu_seconds_total 5.5
"""


def test_parse_metrics_keeps_sglang_series_and_drops_buckets():
    m = parse_metrics_text(METRICS_TEXT)
    assert m == {
        'sglang:prompt_tokens_total{model_name="m"}': 1200.0,
        'sglang:cached_tokens_total{cache_source="device",model_name="m"}': 64.0,
        'sglang:token_usage{model_name="m"}': 0.25,
        'sglang:time_to_first_token_seconds_sum{model_name="m"}': 0.42,
        'sglang:time_to_first_token_seconds_count{model_name="m"}': 3.0,
    }
    assert metric_key("a", {"z": "1", "b": "2"}) == 'a{b="2",z="1"}'
    assert is_counter_key('sglang:prompt_tokens_total{model_name="m"}')
    assert not is_counter_key('sglang:token_usage{model_name="m"}')


# ----------------------------------------------------------------------------- summaries


def mk(t_s: float, phase: str, counters=None, **kw) -> dict:
    """A Sample as the sampler writes it (fields of docs/architecture.md)."""
    s = {
        "t_ns": int(t_s * 1e9), "wall_time": 1.7e9 + t_s, "phase": phase,
        "mem_available_kib": 10_000_000, "mem_free_kib": 5_000_000, "cached_kib": 1_000_000,
        "mlocked_kib": 0, "shmem_kib": 0, "swap_total_kib": 0, "swap_free_kib": 0,
        "pswpin_kib_s": 0.0, "pswpout_kib_s": 0.0, "pgmajfault_s": 0.0, "server_rss_kib": 100,
        "counters": counters,
    }
    s.update(kw)
    return s


P = "sglang:prompt_tokens_total"
H = 'sglang:cached_tokens_total{cache_source="host"}'
D = 'sglang:cached_tokens_total{cache_source="device"}'


def test_summarize_phases_deltas_and_missing_counters():
    samples = [
        mk(0.0, "startup", None),  # /metrics not up yet
        mk(0.5, "startup", {P: 0}, mem_available_kib=9_000_000),
        mk(1.0, "idle", {P: 0}, pswpin_kib_s=547.0, cached_kib=600_000),
        mk(1.5, "idle", {P: 0}, pswpin_kib_s=172.0),
        mk(2.0, "cold", {P: 500}, server_rss_kib=900,
           gpus=[{"index": 0, "mem_used_mib": 7000.0, "util_pct": 90.0}]),
        # host counter appears for the first time (missing before = 0)
        mk(2.5, "cold", {P: 1000, H: 300, "sglang:token_usage": 0.5},
           gpus=[{"index": 0, "mem_used_mib": 7100.0, "util_pct": 40.0}]),
        mk(3.0, "second_pass", {P: 1000, H: 300, D: 10, "sglang:token_usage": 0.2}),
        mk(4.0, "second_pass", {P: 1800, H: 900, D: 10}, pswpout_kib_s=12.0),
    ]
    s = summarize_samples(samples)
    assert list(s) == ["startup", "idle", "cold", "second_pass"]
    assert s["startup"]["min_mem_available_kib"] == 9_000_000
    assert s["startup"]["counter_deltas"] == {P: 0}
    idle = s["idle"]
    assert idle["n_samples"] == 2
    assert idle["mean_pswpin_kib_s"] == pytest.approx((547 + 172) / 2)
    assert idle["max_pswpin_kib_s"] == 547.0
    assert idle["min_cached_kib"] == 600_000
    assert idle["duration_s"] == pytest.approx(1.0)  # from startup's last sample (0.5) to 1.5
    cold = s["cold"]
    # start = idle's last sample (P=0, H missing → 0)
    assert cold["counter_deltas"] == {P: 1000, H: 300}
    assert cold["max_server_rss_kib"] == 900
    assert cold["peak_gpu_mem_used_mib"] == {"0": 7100.0}
    assert cold["max_gpu_util_pct"] == {"0": 90.0}
    assert cold["gauges_max"] == {"sglang:token_usage": 0.5}
    sp = s["second_pass"]
    assert sp["counter_deltas"] == {P: 800, H: 600, D: 10}
    assert sp["max_pswpout_kib_s"] == 12.0
    assert sp["peak_gpu_mem_used_mib"] == {}


def test_summarize_repeated_phase_and_counter_reset():
    samples = [
        mk(0, "idle", {P: 0}),
        mk(1, "w", {P: 100}),
        mk(2, "idle", {P: 100}),
        mk(3, "w", {P: 150}),
        mk(4, "w", {P: 30}),  # server restarted: counts from zero
    ]
    s = summarize_samples(samples)
    assert s["w"]["counter_deltas"][P] == 100 + 50 + 30
    assert s["w"]["n_samples"] == 3
    assert s["idle"]["n_samples"] == 2
    assert summarize_samples([]) == {}


def test_summarize_none_values_ignored():
    s = summarize_samples([mk(0, "a", None, pswpin_kib_s=None, server_rss_kib=None)])
    assert s["a"]["mean_pswpin_kib_s"] is None and s["a"]["max_server_rss_kib"] is None
    assert s["a"]["counter_deltas"] == {}


# ----------------------------------------------------------------------------- process tree


def test_process_tree_rss_includes_children():
    code = "import time; b = bytearray(64 * 1024 * 1024); time.sleep(30)"
    child = subprocess.Popen([sys.executable, "-c", code])
    try:
        deadline = time.monotonic() + 10
        alone = None
        while time.monotonic() < deadline:
            import psutil

            rss_child = psutil.Process(child.pid).memory_info().rss // 1024
            if rss_child > 60 * 1024:
                break
            time.sleep(0.05)
        alone = psutil.Process(os.getpid()).memory_info().rss // 1024
        tree = process_tree_rss_kib(os.getpid())
        assert tree >= alone + 60 * 1024
    finally:
        child.kill()
        child.wait()
    assert process_tree_rss_kib(child.pid) is None  # gone


# ----------------------------------------------------------------------------- the thread


class _Metrics(http.server.BaseHTTPRequestHandler):
    count = 0

    def do_GET(self):  # noqa: N802
        body = (
            "# TYPE sglang:prompt_tokens_total counter\n"
            f'sglang:prompt_tokens_total{{model_name="m"}} {type(self).count}\n'
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *a):
        pass


@pytest.fixture()
def metrics_server():
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Metrics)
    _Metrics.count = 0
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()


def test_sampler_thread_phases_boundaries_and_fields(metrics_server):
    out: list[dict] = []
    s = Sampler(os.getpid(), metrics_server, out.append, interval_s=0.1, gpu="auto")
    s.start()
    time.sleep(0.25)
    assert s.set_phase("idle", wait_s=2)
    time.sleep(0.25)
    assert s.set_phase("work", wait_s=2)  # boundary sample written before the "requests"
    _Metrics.count = 500  # "requests" of the work phase
    time.sleep(0.35)
    s.set_phase("cooldown")
    time.sleep(0.05)
    assert s.stop(timeout_s=5)
    assert not s.running
    phases = [x["phase"] for x in out]
    # phases appear in order, each as one run
    runs = [p for i, p in enumerate(phases) if i == 0 or phases[i - 1] != p]
    assert runs == ["startup", "idle", "work", "cooldown"]
    for x in out:
        assert SAMPLE_FIELDS <= set(x), set(x) ^ SAMPLE_FIELDS
        assert x["server_rss_kib"] > 0
        assert x["mem_available_kib"] > 0
    assert out[0]["pswpin_kib_s"] is None  # no earlier reading for the first sample
    assert all(x["counters"] is not None for x in out)
    summ = summarize_samples(out)
    key = 'sglang:prompt_tokens_total{model_name="m"}'
    assert summ["work"]["counter_deltas"][key] == 500
    assert summ["idle"]["counter_deltas"][key] == 0
    assert s.samples_written == len(out) and s.write_errors == 0
    assert 0 < s.cpu_seconds < s.wall_seconds
    assert s.cpu_fraction < 0.5


def test_sampler_survives_bad_writer_dead_pid_and_no_server():
    calls = []

    def bad_writer(d):
        calls.append(d)
        raise OSError("disk full")

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    s = Sampler(dead.pid, "http://127.0.0.1:9", bad_writer, interval_s=0.05,
                metrics_timeout_s=0.2, gpu=False)
    s.start()
    time.sleep(0.2)
    t0 = time.monotonic()
    assert s.stop(timeout_s=5)
    assert time.monotonic() - t0 < 2
    assert calls and s.write_errors == len(calls)
    assert all(c["counters"] is None and c["server_rss_kib"] is None for c in calls)
    assert "gpus" not in calls[0]
    assert s.metrics_errors >= 1


def test_sampler_rejects_bad_interval():
    with pytest.raises(ValueError):
        Sampler(None, None, lambda d: None, interval_s=0)


def test_aset_phase_from_event_loop(metrics_server):
    import asyncio

    out: list[dict] = []
    s = Sampler(None, metrics_server, out.append, interval_s=0.2, gpu=False)
    s.start()

    async def workload():
        ticks = 0

        async def ticker():  # the loop must stay responsive while waiting for the boundary
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0.001)

        t = asyncio.create_task(ticker())
        assert await s.aset_phase("w1")
        _Metrics.count = 7
        await asyncio.sleep(0.05)
        assert await s.aset_phase("w2")
        t.cancel()
        return ticks

    try:
        ticks = asyncio.run(workload())
    finally:
        s.stop()
    assert ticks > 0
    summ = summarize_samples(out)
    key = 'sglang:prompt_tokens_total{model_name="m"}'
    assert summ["w1"]["counter_deltas"][key] == 7
    assert summ["w2"]["counter_deltas"].get(key, 0) == 0


def test_process_tree_rss_cache_picks_up_late_children():
    from harness.sampling import ProcessTreeRss

    tree = ProcessTreeRss(os.getpid(), min_rescan_s=0.1, max_rescan_s=0.4)
    first = tree.read_kib()
    assert first and first > 0
    for _ in range(3):  # stable tree: the rescan interval backs off
        time.sleep(0.05)
        tree.read_kib()
    code = "import time; b = bytearray(64 * 1024 * 1024); time.sleep(30)"
    child = subprocess.Popen([sys.executable, "-c", code])
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if (tree.read_kib() or 0) > first + 60 * 1024:
                break
            time.sleep(0.05)
        else:
            pytest.fail("late child never counted")
    finally:
        child.kill()
        child.wait()
    assert tree.read_kib() < first + 60 * 1024  # vanished child dropped

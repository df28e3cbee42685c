"""Sampler pieces without the simulator: /metrics parsing, per-phase summaries on hand-built
samples, process-tree RSS, and the Sampler thread against a tiny local /metrics server."""

from __future__ import annotations

import http.server
import os
import subprocess
import sys
import threading
import time
import types

import pytest

from harness.analysis.samples import summarize_samples
from harness.host import nvml
from harness.run import cooldown
from harness.run.sampler import Sampler, process_tree_rss_kib
from harness.server.metrics_page import is_counter_key, metric_key, parse_metrics_text

SAMPLE_FIELDS = {
    "t_ns",
    "wall_time",
    "phase",
    "mem_available_kib",
    "mem_free_kib",
    "cached_kib",
    "mlocked_kib",
    "shmem_kib",
    "swap_total_kib",
    "swap_free_kib",
    "pswpin_kib_s",
    "pswpout_kib_s",
    "pgmajfault_s",
    "server_rss_kib",
    "counters",
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


TRICKY_TEXT = METRICS_TEXT + (
    "# TYPE sglang:odd_total counter\n"
    'sglang:odd_total{path="/a,b}c",q="say \\"hi\\"",nl="x\\ny",bs="c:\\\\d",} 7 1700000000000\n'
    "sglang:no_labels_total 3e2\n"
    'sglang:spaced {a = "1" , b="2"}   4.5\n'
    'sglang:gauge_nan{a="1"} NaN\n'
    'sglang:gauge_inf{a="1"} +Inf\n'
    "sglang:empty_labels{} 1\n"
)


def _prometheus_client_parse(text: str, prefix: str = "sglang:") -> dict[str, float]:
    """What parse_metrics_text returned when it used prometheus_client's parser (the reference)."""
    from prometheus_client.parser import text_string_to_metric_families

    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name.startswith(prefix) and not s.name.endswith(("_bucket", "_created", "_gsum", "_gcount")):
                out[metric_key(s.name, s.labels)] = float(s.value)
    return out


def test_the_metrics_reader_gives_what_prometheus_client_gives():
    """The sampler's own /metrics reader (a regular expression per kept line) against
    prometheus_client's parser: escaped and odd label values, no labels, timestamps, NaN/Inf,
    spaces, and the simulator's whole /metrics."""
    import math

    from harness.sim.metrics import SimMetrics

    want = _prometheus_client_parse(TRICKY_TEXT)
    got = parse_metrics_text(TRICKY_TEXT)
    assert got.keys() == want.keys() and len(got) == 11
    assert all(got[k] == want[k] or (math.isnan(got[k]) and math.isnan(want[k])) for k in got)
    odd = {"path": "/a,b}c", "q": 'say "hi"', "nl": "x\ny", "bs": "c:\\d"}  # unescaped, as prometheus_client
    assert got[metric_key("sglang:odd_total", odd)] == 7.0
    sim = SimMetrics("m")
    sim.cached("host", 5)
    sim_text = sim.render().decode()
    assert parse_metrics_text(sim_text) == _prometheus_client_parse(sim_text) and parse_metrics_text(sim_text)
    for bad in ('sglang:x{a="1" 2', "sglang:x", "sglang:x{a=1} 2", "sglang:x one"):
        with pytest.raises(ValueError):
            parse_metrics_text(bad + "\n")


# ----------------------------------------------------------------------------- summaries


def mk(t_s: float, phase: str, counters=None, **kw) -> dict:
    """A Sample as the sampler writes it (fields of docs/architecture.md)."""
    s = {
        "t_ns": int(t_s * 1e9),
        "wall_time": 1.7e9 + t_s,
        "phase": phase,
        "mem_available_kib": 10_000_000,
        "mem_free_kib": 5_000_000,
        "cached_kib": 1_000_000,
        "mlocked_kib": 0,
        "shmem_kib": 0,
        "swap_total_kib": 0,
        "swap_free_kib": 0,
        "pswpin_kib_s": 0.0,
        "pswpout_kib_s": 0.0,
        "pgmajfault_s": 0.0,
        "server_rss_kib": 100,
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
        mk(2.0, "cold", {P: 500}, server_rss_kib=900, gpus=[{"index": 0, "mem_used_mib": 7000.0, "util_pct": 90.0}]),
        # host counter appears for the first time (missing before = 0)
        mk(
            2.5,
            "cold",
            {P: 1000, H: 300, "sglang:token_usage": 0.5},
            gpus=[{"index": 0, "mem_used_mib": 7100.0, "util_pct": 40.0}],
        ),
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
    s = Sampler(dead.pid, "http://127.0.0.1:9", bad_writer, interval_s=0.05, metrics_timeout_s=0.2, gpu=False)
    s.start()
    time.sleep(0.2)
    assert s.stop(timeout_s=5)  # the thread ended (within stop's own timeout)
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
    from harness.run.sampler import ProcessTreeRss

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


# ----------------------------------------------------------------------------- the variant's GPUs
# A fake NVML (nvidia-ml-py's pynvml) with four GPUs: the sampler must read only the GPUs the
# variant's server uses, say how it chose them, and follow the server's processes when NVML
# lists them elsewhere.

UUIDS = ["GPU-aaaa1111-0000", "GPU-bbbb2222-0000", "GPU-bbbb3333-0000", "GPU-cccc4444-0000"]


class FakeNvml(types.ModuleType):
    """pynvml with len(UUIDS) GPUs: GPU i uses (i + 1) GiB; `procs[i]` lists (pid, bytes)."""

    def __init__(self):
        super().__init__("pynvml")
        self.used_mib = {i: 1024.0 * (i + 1) for i in range(len(UUIDS))}
        self.procs: dict[int, list[tuple[int, int | None]]] = {}
        self.process_calls = 0
        self.memory_reads: list[int] = []

    def nvmlInit(self):  # noqa: N802
        pass

    def nvmlShutdown(self):  # noqa: N802
        pass

    def nvmlDeviceGetCount(self):  # noqa: N802
        return len(UUIDS)

    def nvmlDeviceGetHandleByIndex(self, i):  # noqa: N802
        return i

    def nvmlDeviceGetUUID(self, h):  # noqa: N802
        return UUIDS[h].encode()  # old bindings return bytes

    def nvmlDeviceGetMemoryInfo(self, h):  # noqa: N802
        self.memory_reads.append(h)
        return types.SimpleNamespace(used=int(self.used_mib[h] * 1024 * 1024), total=80 << 30)

    def nvmlDeviceGetUtilizationRates(self, h):  # noqa: N802
        return types.SimpleNamespace(gpu=10 * h)

    def nvmlDeviceGetComputeRunningProcesses(self, h):  # noqa: N802
        self.process_calls += 1
        return [types.SimpleNamespace(pid=p, usedGpuMemory=b) for p, b in self.procs.get(h, [])]

    def nvmlDeviceGetHandleByUUID(self, uuid):  # noqa: N802
        if uuid == "MIG-xyz":
            return ("mig", 3)
        raise RuntimeError("not found")

    def nvmlDeviceGetDeviceHandleFromMigDeviceHandle(self, mig):  # noqa: N802
        return mig[1]

    def nvmlDeviceGetIndex(self, h):  # noqa: N802
        return h


@pytest.fixture()
def fake_nvml(monkeypatch):
    fake = FakeNvml()
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    return fake


@pytest.mark.parametrize(
    "value, visible, stop",
    [
        ("1", [1], None),
        ("2,0", [2, 0], None),  # CUDA's order is the variable's order
        ("GPU-cccc", [3], None),  # a unique UUID prefix
        ("gpu-aaaa1111-0000", [0], None),  # UUIDs compare case-insensitively
        ("0, GPU-bbbb", [0], "GPU-bbbb"),  # an ambiguous prefix stops CUDA there
        ("0,2,-1,1", [0, 2], "-1"),  # CUDA's own example: 1 stays hidden
        ("1,1", [1], "1"),  # a repeated device is invalid
        ("7", [], "7"),  # out of range
        ("", [], ""),  # set but empty: no GPU
        ("MIG-xyz", [3], None),  # a MIG device: its parent GPU
    ],
)
def test_cuda_visible_devices_map_to_nvml_indices(fake_nvml, value, visible, stop):
    reader = nvml.GpuReader()
    try:
        got = nvml.resolve_visible(nvml.parse_cuda_visible_devices(value), reader.uuids, reader.mig_parent)
    finally:
        reader.close()
    assert got == (visible, stop)
    assert nvml.parse_cuda_visible_devices(None) is None


def test_selection_from_the_launch_env_and_sglang_argv():
    sel = nvml.select_gpus(UUIDS, {"CUDA_VISIBLE_DEVICES": "3,1,2"}, ["--tp-size", "2", "--base-gpu-id", "1"])
    assert sel.indices == (1, 2) and sel.method == "cuda_visible_devices"
    assert "CUDA_VISIBLE_DEVICES=3,1,2" in sel.how and "position 1" in sel.how
    assert sel.uuids == (UUIDS[1], UUIDS[2])
    # unset: every GPU visible; a TP1 server takes the first
    sel = nvml.select_gpus(UUIDS, {}, ["python", "-m", "sglang.launch_server", "--port", "30000"])
    assert sel.indices == (0,) and sel.method == "all" and "not set" in sel.how
    sel = nvml.select_gpus(UUIDS, {}, ["--tp=2", "--gpu-id-step", "2"])
    assert sel.indices == (0, 2)
    # more GPUs asked for than visible: keep all visible, say so
    sel = nvml.select_gpus(UUIDS, {"CUDA_VISIBLE_DEVICES": "1"}, ["--tp-size", "2"])
    assert sel.indices == (1,) and "all visible kept" in sel.how
    # no argv (not an sglang server, or unknown): everything visible
    assert nvml.select_gpus(UUIDS, {"CUDA_VISIBLE_DEVICES": "0,1"}).indices == (0, 1)
    assert nvml.select_gpus(UUIDS, {"CUDA_VISIBLE_DEVICES": ""}).method == "none"


def _run_sampler(sampler, ticks: float = 0.25) -> None:
    sampler.start()
    time.sleep(ticks)
    sampler.set_phase("work", wait_s=2)
    time.sleep(ticks)
    assert sampler.stop(timeout_s=5)


def test_sampler_reads_only_the_variants_gpus(fake_nvml, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2,3")  # the harness's own view: not the server's
    out: list[dict] = []
    s = Sampler(
        None,
        None,
        out.append,
        interval_s=0.05,
        gpu="auto",
        launch_env={"CUDA_VISIBLE_DEVICES": "GPU-bbbb3333"},
        launch_argv=["--tp-size", "1"],
    )
    _run_sampler(s)
    assert len(out) >= 3
    assert all([g["index"] for g in x["gpus"]] == [2] for x in out)
    assert set(fake_nvml.memory_reads) == {2}  # the other GPUs are never read
    assert out[0]["gpus"][0]["mem_used_mib"] == 3072.0
    assert "server_mem_mib" not in out[0]["gpus"][0]  # no server pid: nothing to attribute
    # the choice is recorded once, on the first sample
    assert out[0]["gpu_selection"]["indices"] == [2]
    assert out[0]["gpu_selection"]["method"] == "cuda_visible_devices"
    assert out[0]["gpu_selection"]["uuids"] == [UUIDS[2]]
    assert "GPU-bbbb3333" in out[0]["gpu_selection"]["how"]
    assert not any("gpu_selection" in x for x in out[1:])
    summ = summarize_samples(out)
    for phase in ("startup", "work"):
        assert summ[phase]["gpus_sampled"] == ["2"]
        assert summ[phase]["peak_gpu_mem_used_mib"] == {"2": 3072.0}
        assert summ[phase]["gpu_selection"]["indices"] == [2]  # carried into later phases


def test_sampler_follows_the_server_processes(fake_nvml):
    """CUDA_VISIBLE_DEVICES unset and a TP1 argv say GPU 0; NVML shows the server's process on
    GPU 3: the sampler reads GPU 3, says why, and records the server's own share there."""
    me = os.getpid()
    fake_nvml.procs = {3: [(me, 5 << 30), (999_999_999, 1 << 30)], 0: [(999_999_998, 2 << 30)]}
    out: list[dict] = []
    s = Sampler(me, None, out.append, interval_s=0.05, gpu=True, launch_env={}, launch_argv=["--tp-size", "1"])
    _run_sampler(s)
    assert s.gpu_selection.method == "processes" and s.gpu_selection.indices == (3,)
    first = out[0]
    assert [g["index"] for g in first["gpus"]] == [3]
    assert first["gpus"][0]["server_mem_mib"] == 5120.0  # only the server's own process
    assert first["gpu_selection"]["method"] == "processes"
    assert "NVML [3]" in first["gpu_selection"]["how"] and "[0]" in first["gpu_selection"]["how"]
    summ = summarize_samples(out)
    assert summ["work"]["gpus_sampled"] == ["3"]
    assert summ["work"]["peak_server_gpu_mem_mib"] == {"3": 5120.0}


def test_sampler_keeps_the_launch_choice_when_processes_confirm_it(fake_nvml):
    me = os.getpid()
    fake_nvml.procs = {1: [(me, None)]}  # NVML without per-process memory: the share reads 0
    out: list[dict] = []
    s = Sampler(
        me,
        None,
        out.append,
        interval_s=0.05,
        launch_env={"CUDA_VISIBLE_DEVICES": "1,2"},
        launch_argv=["--tp-size", "2"],
    )
    _run_sampler(s)
    assert s.gpu_selection.method == "cuda_visible_devices" and s.gpu_selection.indices == (1, 2)
    assert [(g["index"], g["server_mem_mib"]) for g in out[-1]["gpus"]] == [(1, 0.0), (2, 0.0)]
    assert sum("gpu_selection" in x for x in out) == 1


def test_sampler_default_is_this_process_cuda_visible_devices(fake_nvml, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    out: list[dict] = []
    _run_sampler(Sampler(None, None, out.append, interval_s=0.05))
    assert {g["index"] for x in out for g in x["gpus"]} == {1}


def test_cooldown_sees_only_this_shards_gpus(fake_nvml, monkeypatch):
    """Two shards on one host (CUDA_VISIBLE_DEVICES=0 and =1): the other shard's server
    starting on GPU 1 must not keep shard 1's cooldown waiting."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    base = cooldown.take_baseline(read_mem_available=lambda: 10_000_000)
    assert base.gpu_mem_used_mib == {0: 1024.0}
    fake_nvml.used_mib[1] += 70_000  # the other shard's server
    res = cooldown.wait(base, timeout_s=0, read_mem_available=lambda: 10_000_000, sleep=lambda s: None)
    assert res.clean and res.still_high_gpus == []
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert nvml.read_gpu_mem_used_mib() == {0: 1024.0, 1: 72_048.0, 2: 3072.0, 3: 4096.0}
    assert nvml.read_gpu_mem_used_mib({"CUDA_VISIBLE_DEVICES": ""}) is None


def test_the_metrics_reader_on_a_histogram_heavy_page_read_twice():
    """sglang's /metrics is mostly histogram buckets and the same series every reading: buckets
    are dropped by their name, and a series seen before takes its key from the reader's cache.
    Both readings of such a page, and a third with changed values, equal prometheus_client's."""
    from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

    reg = CollectorRegistry()
    labels = {"model_name": 'm "q" {x}', "tp_rank": "0"}
    hists = [
        Histogram(f"sglang:h{i}_seconds", "h", list(labels), buckets=[0.01 * 2**k for k in range(20)], registry=reg)
        for i in range(4)
    ]
    counter = Counter("sglang:reqs", "c", list(labels), registry=reg)
    gauge = Gauge("sglang:usage", "g", list(labels), registry=reg)
    for h in hists:
        h.labels(**labels).observe(0.3)
    counter.labels(**labels).inc(3)
    gauge.labels(**labels).set(0.25)
    page = generate_latest(reg).decode()
    assert page.count("_bucket{") > 80
    want = _prometheus_client_parse(page)
    assert parse_metrics_text(page) == want == parse_metrics_text(page)
    assert not any("_bucket" in k or "_created" in k for k in want)
    counter.labels(**labels).inc(4)
    gauge.labels(**labels).set(0.5)
    later = generate_latest(reg).decode()
    got = parse_metrics_text(later)
    assert got == _prometheus_client_parse(later)
    assert got[metric_key("sglang:reqs_total", labels)] == 7.0 and got[metric_key("sglang:usage", labels)] == 0.5


def test_a_known_series_with_a_bad_value_is_still_refused():
    """The cached path reads only the value; what the full line regex refuses, it refuses too."""
    parse_metrics_text('sglang:known_total{a="1"} 2\n')
    for bad in ('sglang:known_total{a="1"} two', 'sglang:known_total{a="1"}2', 'sglang:known_total{a="1"} 2 x'):
        with pytest.raises(ValueError):
            parse_metrics_text(bad + "\n")
    assert parse_metrics_text('sglang:known_total{a="1"} 5 1700000000000\n') == {'sglang:known_total{a="1"}': 5.0}


class _CountingMetricsServer:
    """A stdlib HTTP/1.1 server in a thread: /metrics answers `page` (chunked when asked), other
    paths 404; counts the connections it accepted; `close_idle()` drops every kept connection."""

    def __init__(self, page: bytes, chunked: bool = False) -> None:
        import http.server
        import socketserver
        import threading

        owner = self
        self.connections = 0
        self.open_sockets: list = []

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def setup(self) -> None:
                super().setup()
                owner.connections += 1
                owner.open_sockets.append(self.connection)

            def do_GET(self) -> None:  # noqa: N802
                if self.path != "/metrics":
                    self.send_response(404)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                self.send_response(200)
                if chunked:
                    self.send_header("Transfer-Encoding", "chunked")
                    self.end_headers()
                    for i in range(0, len(page), 1000):
                        part = page[i : i + 1000]
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(part), part))
                    self.wfile.write(b"0\r\n\r\n")
                else:
                    self.send_header("Content-Length", str(len(page)))
                    self.end_headers()
                    self.wfile.write(page)

            def log_message(self, *a: object) -> None:
                pass

        class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
            daemon_threads = True

        self.server = Server(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close_idle(self) -> None:
        import socket

        for s in self.open_sockets:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.mark.parametrize("chunked", [False, True])
def test_metrics_page_keeps_one_connection_and_reopens_one_the_server_closed(chunked):
    """The sampler reads /metrics every 0.5 s: over one kept-alive connection (a new TCP
    connection per sample would cost more than the page), also for a chunked answer; when the
    server has closed the idle connection, the next reading reopens it without an error."""
    from harness.server.metrics_page import MetricsPage

    page = ("\n".join(f'sglang:c{i}_total{{a="1"}} {i}' for i in range(300)) + "\n").encode()
    srv = _CountingMetricsServer(page, chunked=chunked)
    try:
        reader = MetricsPage(srv.url, 2.0, 1 << 20, 4.0)
        for _ in range(5):
            assert reader.fetch() == page
        assert srv.connections == 1
        srv.close_idle()
        time.sleep(0.05)
        assert reader.fetch() == page  # no MetricsUnavailable: reopened at once
        assert srv.connections == 2
        reader.close()
    finally:
        srv.stop()


def test_metrics_page_not_there_is_unavailable_not_a_bad_answer():
    """A status other than 200 (metrics off: 404) or no server is `MetricsUnavailable` (expected
    while a server starts; counted, not logged), not a bad answer."""
    from harness.server.metrics_page import MetricsPage, MetricsUnavailable

    srv = _CountingMetricsServer(b"sglang:x_total 1\n")
    try:
        with pytest.raises(MetricsUnavailable, match="404"):
            MetricsPage(srv.url + "/nothing", 2.0, 1 << 20, 4.0).fetch()
    finally:
        srv.stop()
    with pytest.raises(MetricsUnavailable):
        MetricsPage(srv.url, 0.5, 1 << 20, 1.0).fetch()  # the server is gone: connection refused


def test_on_stop_is_called_once_after_the_last_sample(tmp_path):
    """The runner hands the sampler its samples' writer's close (no attribute set on it from
    outside): called once, after the thread wrote its last sample, however often stop() is called."""
    events: list[str] = []
    s = Sampler(
        None,
        None,
        lambda sample: events.append("sample"),
        interval_s=0.05,
        gpu=False,
        server_metrics=False,
        on_stop=lambda: events.append("closed"),
    ).start()
    time.sleep(0.15)
    assert s.stop(timeout_s=5) and s.stop(timeout_s=5)
    assert events.count("closed") == 1 and events[-1] == "closed" and "sample" in events

"""Where a start goes (harness.server.startup_phases), from sglang-format log stamps; the simulator logs
them as sglang does; compare judges the host pool's setup (harness.compare.startup)."""

from __future__ import annotations

import time

import pytest

from harness.compare.startup import MIN_CHANGE_S, host_pool_row
from harness.server import startup_phases as sp
from tests.conftest import run_in_process, sim_scenario, write_scenario
from tests.factories import as_status


def _t(stamp: str) -> float:
    return time.mktime(time.strptime(stamp, "%Y-%m-%d %H:%M:%S"))


# sglang 0.5.17's order, TP2: max_total_num_tokens is printed before the HiRadixCache allocates the host pool
SGLANG_TP2 = """\
[2026-11-30 03:38:00] server_args=ServerArgs(model_path='/m', tp_size=2)
[2026-11-30 03:38:09 TP0] Init torch distributed begin.
[2026-11-30 03:38:09 TP1] Init torch distributed begin.
[2026-11-30 03:38:10 TP0] Load weight begin. avail mem=139.37 GB
[2026-11-30 03:38:11 TP1] Load weight begin. avail mem=139.37 GB
[2026-11-30 03:38:40 TP0] Load weight end. type=LlamaForCausalLM, dtype=torch.bfloat16, avail mem=124.10 GB, mem usage=15.27 GB.
[2026-11-30 03:38:41 TP1] Load weight end. type=LlamaForCausalLM, dtype=torch.bfloat16, avail mem=124.10 GB, mem usage=15.27 GB.
[2026-11-30 03:38:43 TP0] KV Cache is allocated. #tokens: 105000, K size: 6.41 GB, V size: 6.41 GB
[2026-11-30 03:38:43 TP0] Memory pool end. avail mem=110.00 GB
[2026-11-30 03:38:44 TP0] Capture cuda graph begin. This can take up to several minutes. avail mem=110.00 GB
[2026-11-30 03:39:05 TP0] Capture cuda graph end. Time elapsed: 20.61 s. mem usage=1.93 GB. avail mem=108.07 GB.
[2026-11-30 03:39:06 TP0] max_total_num_tokens=105000, chunked_prefill_size=8192, max_prefill_tokens=16384
[2026-11-30 03:39:06 TP0] Allocating 25.80 GB host memory for hierarchical KV cache.
[2026-11-30 03:39:06 TP1] Allocating 25.80 GB host memory for hierarchical KV cache.
[2026-11-30 03:39:17 TP0] Scheduler ready.
[2026-11-30 03:39:30] End of prefill warmup with status 200, resp: [{'text': ''}]
[2026-11-30 03:39:30] The server is fired up and ready to roll!
"""


def test_an_sglang_tp2_start_split_at_its_landmarks():
    spawned, ready = _t("2026-11-30 03:37:58") + 0.5, _t("2026-11-30 03:39:30") + 0.8
    out = sp.split_startup(SGLANG_TP2, spawned, ready)
    assert out["phases"] == {
        "process_start": 11.5,  # spawn .. the first rank's Load weight begin
        "weight_load": 30.0,
        "memory_profiling": 4.0,
        "cuda_graph": 22.0,  # graph begin .. the host pool (the scheduler's setup with it)
        "host_pool": 11.0,  # the first pool line .. the first stamped line after the last one
        "warm_up": 13.0,
        "ready_detect": 0.8,
    }
    assert sum(out["phases"].values()) == pytest.approx(ready - spawned)
    assert out["reported"] == {"cuda_graph": 20.61}
    assert out["missing"] == []


def test_a_start_without_hicache_or_graphs_gives_those_phases_no_time():
    log = "\n".join(
        line
        for line in SGLANG_TP2.splitlines()
        if "host memory" not in line and "cuda graph" not in line and "Scheduler ready" not in line
    )
    out = sp.split_startup(log, None, None)
    assert set(out["phases"]) == {"weight_load", "memory_profiling", "warm_up"}
    assert out["phases"]["memory_profiling"] == 26.0  # to max_total_num_tokens: nothing between
    assert out["phases"]["warm_up"] == 24.0
    assert out["missing"] == ["cuda_graph", "host_pool"]
    assert sp.split_startup("no stamps at all\n", None, None)["phases"] == {}


def test_history_names_and_one_console_line():
    status = {"startup": {"phases": {"weight_load": 30.0, "host_pool": 11.0}}}
    assert sp.history_values(status["startup"]) == {"startup.weight_load_s": 30.0, "startup.host_pool_s": 11.0}
    assert sp.summary_line(status["startup"]) == "weight_load 30 s, host_pool 11 s"


def _status(host_pool_s):
    return as_status({"startup": {"phases": {"weight_load": 30.0, "host_pool": host_pool_s}}})


def test_compare_judges_the_host_pool_on_size_beyond_the_stamps_resolution():
    slower = host_pool_row("on", _status(10.0), _status(20.0), {})
    assert slower["state"] == "regression" and slower["change"] == pytest.approx(1.0)
    assert host_pool_row("on", _status(20.0), _status(10.0), {})["state"] == "improved"
    # +50 % but within two stamps' resolution: the stamps cannot tell
    assert host_pool_row("on", _status(2.0), _status(2.0 + MIN_CHANGE_S - 1), {})["state"] == "unchanged"
    # beyond the resolution but within the threshold
    assert host_pool_row("on", _status(100.0), _status(103.0), {"startup_s": 0.1})["state"] == "unchanged"
    assert host_pool_row("off", as_status({"startup": {"phases": {}}}), as_status({}), {}) is None
    assert host_pool_row("on", as_status({}), _status(3.0), {})["state"] == "not_comparable"


def test_the_simulator_logs_a_start_as_sglang_does(tmp_path):
    """Weight load, graph capture, the host pool's pinning and the warm-up each take the time the
    knobs say, and the run records the split in status.json."""
    text = sim_scenario(
        '- name: "on"\n  hicache: {ratio: 2}\n',
        "- kind: cold_prefill\n  n: 1\n  prompt_tokens: 128\n",
        name="phases",
        startup_s=1.0,
        max_total_tokens=8192,
    ).replace("startup_s: 1.0,", "startup_s: 1.0, capture_s: 1.2, register_s_per_gb: 12, warmup_s: 1.0,")
    outcome, run = run_in_process(write_scenario(tmp_path, text), tmp_path)
    assert outcome.exit_code == 0
    st = run.variants[0].status.to_json()
    phases = st["startup"]["phases"]
    assert set(phases) == set(sp.PHASES)
    # the host pool: 16385 tokens x 16 KiB = 0.27 GB at 12 s/GB = 3.2 s; whole-second stamps: +-1 s
    assert 2.0 <= phases["host_pool"] <= 4.5
    assert 0.0 <= phases["weight_load"] <= 2.0 and 0.0 <= phases["warm_up"] <= 2.5
    assert st["startup"]["reported"]["cuda_graph"] == pytest.approx(1.2, abs=0.3)
    assert sum(phases.values()) == pytest.approx(st["ready_s"], abs=2.5)

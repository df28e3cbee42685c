"""The roofline of host and storage hits (`harness.measures.roofline`): each hit's floor from its KV bytes,
the probed (or simulated) bandwidths and the cold prefill rate; achieved / floor per phase as a
gateable derived figure; and "worse than off" when a hit is slower than recomputing it, in the
verdict's warnings and the console. The simulator's ``slow_host_load`` fault is the layout that
loads back at a small fraction of the link (sglang 0.5.17's page_first + direct)."""

from __future__ import annotations

import json

import pytest

from harness.analysis.summary import summarize
from harness.cli import main
from harness.measures.roofline import (
    Platform,
    cold_prefill_rate,
    phase_roofline,
    platform_for,
    request_floor_s,
    worse_than_off,
)
from tests.conftest import write_sim_scenario
from tests.factories import as_summary, make_record

PLATFORM = Platform(kv_bytes_per_token=131072, h2d_gbs=50.0, h2d_source="probe pinned H2D", storage_read_gbs=2.0)


def test_a_host_hit_floor_is_its_kv_bytes_over_h2d_plus_the_suffix_at_the_cold_rate():
    # 32,000 host tokens x 128 KiB = 4.19 GB at 50 GB/s = 83.9 ms; 1,000 uncached at 10,000 tok/s = 100 ms
    r = make_record(prompt_tokens=33_000, cached_tokens=32_000, cached_device=0, cached_host=32_000, cached_storage=0)
    assert request_floor_s(r, PLATFORM, 10_000.0) == pytest.approx(32_000 * 131072 / 50e9 + 0.1)
    # a storage hit is read from disk, then loaded over PCIe
    s = make_record(prompt_tokens=1000, cached_tokens=1000, cached_device=0, cached_host=0, cached_storage=1000)
    assert request_floor_s(s, PLATFORM, 10_000.0) == pytest.approx(1000 * 131072 * (1 / 50e9 + 1 / 2e9))
    # no bandwidth: no floor, never a guess
    assert request_floor_s(r, Platform(131072, None), 10_000.0) is None


def test_the_phase_roofline_reads_achieved_over_floor_and_against_recompute():
    cold = [make_record(phase="cold", index=i, ttft_ms=3300, prompt_tokens=33_000, cached_tokens=0) for i in range(3)]
    rate = cold_prefill_rate(cold)
    assert rate == pytest.approx(10_000)
    hits = [
        make_record(
            phase="hit",
            index=i,
            ttft_ms=ttft,
            prompt_tokens=33_000,
            cached_tokens=32_000,
            cached_device=0,
            cached_host=32_000,
            cached_storage=0,
        )
        for i, ttft in enumerate((200, 210, 220))
    ]
    roof = phase_roofline(hits, PLATFORM, rate, "cold")
    floor_ms = (32_000 * 131072 / 50e9 + 0.1) * 1e3
    assert roof["tier"] == "host" and roof["n"] == 3 and roof["host_tokens"] == 96_000
    assert roof["floor_ms"] == pytest.approx(floor_ms)
    assert roof["ratio"] == pytest.approx(210 / floor_ms)
    assert roof["recompute_ms"] == pytest.approx(3300)
    assert roof["vs_recompute"] == pytest.approx(210 / 3300)
    # a phase without host or storage hits has no roofline
    assert phase_roofline(cold, PLATFORM, rate, "cold") is None


def test_a_concurrent_pass_is_judged_by_its_first_token_wall_against_the_sum_of_its_floors():
    # two requests sent together, the second's first token 100 ms later: the pass wall is 100 ms
    group = [
        make_record(
            phase="pass2",
            index=i,
            ttft_ms=50 * (i + 1),
            prompt_tokens=10_000,
            cached_tokens=10_000,
            cached_device=0,
            cached_host=10_000,
            cached_storage=0,
            concurrency_group="g2",
        )
        for i in range(2)
    ]
    roof = phase_roofline(group, PLATFORM, 10_000.0, "cold")
    assert roof["concurrent"] and roof["n"] == 1
    assert roof["achieved_ms"] == pytest.approx(100)
    assert roof["floor_ms"] == pytest.approx(2 * 10_000 * 131072 / 50e9 * 1e3)
    # cold concurrent passes: the pass's tokens over its first-token wall, not each request's own
    cold = [
        make_record(index=i, ttft_ms=100 * (i + 1), prompt_tokens=1000, cached_tokens=0, concurrency_group="g1")
        for i in range(4)
    ]
    assert cold_prefill_rate(cold) == pytest.approx(4000 / 0.4)


def test_the_platform_comes_from_the_probe_else_from_a_simulated_servers_pretend_host():
    preflight = {"prediction": {"kv_bytes_per_token": 16384}}
    probe = {"bandwidth_gbs": {"pinned_h2d": 55.4}, "disk": {"read_gbs": 3.1}}
    p = platform_for(probe, preflight, {"simulated": True, "sim": {"platform_h2d_gbs": 13.75}})
    assert (p.kv_bytes_per_token, p.h2d_gbs, p.h2d_source, p.storage_read_gbs) == (16384, 55.4, "probe pinned H2D", 3.1)
    p = platform_for(None, preflight, {"simulated": True, "sim": {"platform_h2d_gbs": 13.75}})
    assert (p.h2d_gbs, p.h2d_source, p.storage_read_gbs) == (13.75, "simulated host", None)
    # a real server's answer is no probe
    assert platform_for(None, preflight, {"sim": {"platform_h2d_gbs": 13.75}}).h2d_gbs is None


def _summary(ttft_hit: float, ttft_cold: float = 3300) -> dict:
    recs = [
        make_record(workload="repeat_prefill", phase="cold", ttft_ms=ttft_cold, prompt_tokens=33_000, cached_tokens=0),
        make_record(
            workload="repeat_prefill",
            phase="repeat_after_evict",
            ttft_ms=ttft_hit,
            prompt_tokens=33_000,
            cached_tokens=32_000,
            cached_device=0,
            cached_host=32_000,
            cached_storage=0,
        ),
    ]
    return summarize(recs, platform=PLATFORM)


def test_the_summary_derives_host_hit_vs_floor_and_worse_than_off_fires_on_a_hit_slower_than_recompute():
    good, bad = _summary(210), _summary(4200)
    floor_ms = (32_000 * 131072 / 50e9 + 0.1) * 1e3
    assert good["workloads"]["repeat_prefill"]["derived"]["host_hit_vs_floor"] == pytest.approx(210 / floor_ms)
    assert good["workloads"]["repeat_prefill"]["derived_by_repeat"]["host_hit_vs_floor"] == [
        pytest.approx(210 / floor_ms)
    ]
    off = summarize(
        [
            make_record(
                workload="repeat_prefill", phase=p, index=i, ttft_ms=3300, prompt_tokens=33_000, cached_tokens=0
            )
            for i, p in enumerate(("cold", "repeat_after_evict"))
        ],
        platform=PLATFORM,
    )
    off, good, bad = as_summary(off), as_summary(good), as_summary(bad)
    assert worse_than_off({"off": off, "good": good}, "off") == []
    (w,) = worse_than_off({"off": off, "good": good, "bad": bad}, "off")
    assert (w.variant, w.phase, w.against) == ("bad", "repeat_after_evict", "own recompute")
    assert "worse than off: repeat_prefill/repeat_after_evict (host hits) took 4,200.0 ms, 1.27x its own recompute" in (
        w.text
    )
    # within its own recompute but slower than OFF's same phase (OFF faster than the cold rate says)
    off_fast = summarize(
        [
            make_record(workload="repeat_prefill", phase=p, index=i, ttft_ms=t, prompt_tokens=33_000, cached_tokens=0)
            for i, (p, t) in enumerate((("cold", 3300), ("repeat_after_evict", 150)))
        ]
    )
    (w,) = worse_than_off({"off": as_summary(off_fast), "good": good}, "off")
    assert w.against == "off" and w.against_ms == pytest.approx(150)


SIM_VARIANTS = """\
- name: "off"
- name: on
  hicache: {ratio: 2, mem_layout: page_first}
- name: on-slow
  description: loads back at 1/200 of the link, as page_first + direct did on the H200
  hicache: {ratio: 2, mem_layout: page_first}
  sim_faults: [slow_host_load=200]
"""
SIM_WORKLOADS = """\
- kind: repeat_prefill
  n: 2
  prompt_tokens: 3000
  eviction_tokens: "1.2x pool"
"""


def test_on_the_simulator_a_slow_load_back_is_far_above_its_floor_and_worse_than_off(tmp_path, capsys):
    path = write_sim_scenario(
        tmp_path, SIM_VARIANTS, SIM_WORKLOADS, name="roofline", max_total_tokens=8192, time_scale=2
    )
    pytest.importorskip("jinja2")
    rc = main(["run", str(path), "--results-dir", str(tmp_path / "r"), "--reports-dir", str(tmp_path / "rep")])
    out = capsys.readouterr().out
    (run,) = (tmp_path / "r" / "roofline").iterdir()
    summ = {v: json.loads((run / v / "summary.json").read_text()) for v in ("off", "on", "on-slow")}
    roof = {v: summ[v]["workloads"]["repeat_prefill"]["phases"]["repeat_after_evict"].get("roofline") for v in summ}
    assert roof["off"] is None  # no host tier, no hit
    assert roof["on"]["h2d_source"] == "simulated host" and roof["on"]["h2d_gbs"] == pytest.approx(27.5)
    assert roof["on"]["kv_bytes_per_token"] == 16384 and roof["on"]["host_tokens"] > 0
    # the slow layout: 200x the load time, far above the floor the healthy one stays near
    assert roof["on-slow"]["ratio"] > 5 * roof["on"]["ratio"]
    assert roof["on"]["vs_recompute"] < 1 < roof["on-slow"]["vs_recompute"]
    verdict = json.loads((run / "verdict.json").read_text())
    worse = [w for w in verdict["warnings"] if w["code"] == "worse_than_off"]
    assert [w["variant"] for w in worse] == ["on-slow"]
    assert "repeat_prefill/repeat_after_evict (host hits)" in worse[0]["text"]
    assert rc == 0 and verdict["outcome"] == "PASS"  # a warning, stated with the figures
    assert "warning: on-slow: worse than off: repeat_prefill/repeat_after_evict" in out
    # the report: the warning at the top, the roofline table under the HiCache table
    (page,) = (tmp_path / "rep").rglob("index.html")
    html = page.read_text()
    assert html.index('id="worse-than-off"') < html.index('<section id="hicache">') < html.index('id="roofline"')
    assert "on-slow: worse than off: repeat_prefill/repeat_after_evict" in html


H200_SHAPE = """\
name: h200_shape
server:
  backend: sim
  model_path: models/llama3-8b
  args: {--max-total-tokens: 70000, --skip-tokenizer-init: true, --context-length: 65536, --page-size: 64}
  startup_timeout_s: 30
  request_timeout_s: 60
  liveness_idle_s: 0.1
  sim: {time_scale: 1, startup_s: 0, host_mem_scale: 0.0005, mem_available_gib: 200}
sampling: {enabled: false}
variants:
  - name: "off"
  - name: on-layer_first-direct
    hicache: {ratio: 2, mem_layout: layer_first, io_backend: direct, write_policy: write_back}
    sim_faults: [slow_page_first_direct]
  - name: on-page_first-direct
    description: switched to page_first_direct, as sglang 0.5.17 does; loads back at 2.6 % of the link
    hicache: {ratio: 2, mem_layout: page_first, io_backend: direct, write_policy: write_back}
    sim_faults: [slow_page_first_direct]
workloads:
  - kind: repeat_prefill
    n: 1
    prompt_tokens: 32768
    eviction_tokens: "1.1x pool"
"""


@pytest.mark.slow  # the real-time cost model (time scale 1), so the modelled times dwarf a loaded box's noise
def test_the_h200_case_on_the_simulator_page_first_direct_is_worse_than_off_layer_first_is_near_its_floor(
    tmp_path, capsys
):
    """The H200's 8B shape (32K prompts; a 70K-token pool, half the H200's, to halve the eviction): the same fault on both direct variants acts
    only on the layout sglang switches page_first + direct to; that one comes out worse than off,
    layer_first within a few times its floor (the H200: 4.2 s vs a 2.6 s recompute; 201 ms, 92 %)."""
    import shutil

    from tests.conftest import MODELS

    shutil.copytree(MODELS / "llama3-8b", tmp_path / "models" / "llama3-8b")
    (tmp_path / "h200_shape.yaml").write_text(H200_SHAPE)
    rc = main(["run", str(tmp_path / "h200_shape.yaml"), "--results-dir", str(tmp_path / "r"), "--no-report"])
    out = capsys.readouterr().out
    (run,) = (tmp_path / "r" / "h200_shape").iterdir()

    def roof(v):
        s = json.loads((run / v / "summary.json").read_text())
        return s["workloads"]["repeat_prefill"]["phases"]["repeat_after_evict"]["roofline"]

    good, bad = roof("on-layer_first-direct"), roof("on-page_first-direct")
    assert good["kv_bytes_per_token"] == 131072 and good["host_tokens"] == 32704  # 32,767 down to 64-token pages
    # 4.29 GB at 1.46 GB/s is 2.94 s of modelled load-back over a 78 ms floor (55 GB/s): >= 37x
    assert bad["ratio"] > 30 and bad["ratio"] > 2 * good["ratio"]
    assert bad["vs_recompute"] > 1.5 > 1 > good["vs_recompute"]
    verdict = json.loads((run / "verdict.json").read_text())
    worse = [w for w in verdict["warnings"] if w["code"] == "worse_than_off"]
    assert [w["variant"] for w in worse] == ["on-page_first-direct"]
    assert "warning: on-page_first-direct: worse than off: repeat_prefill/repeat_after_evict" in out
    assert rc == 0


def _hit(i: int, ttft_ms: float, queue_s: float | None, group: str | None = None):
    r = make_record(
        phase="hit",
        index=i,
        ttft_ms=ttft_ms,
        prompt_tokens=33_000,
        cached_tokens=32_000,
        cached_device=0,
        cached_host=32_000,
        cached_storage=0,
        concurrency_group=group,
    )
    r.queue_time_s = queue_s
    return r


def test_the_queueing_of_a_phase_is_the_median_of_what_sglang_reported_per_hit():
    roof = phase_roofline([_hit(0, 200, 0.010), _hit(1, 210, 0.030), _hit(2, 220, 0.020)], PLATFORM, 1e4, "cold")
    assert roof["queue_ms"] == pytest.approx(20.0) and roof["queue_reported"] == 3
    # a server that sent no queue_time (no --enable-metrics): no figure, never a guess
    roof = phase_roofline([_hit(0, 200, None), _hit(1, 210, None)], PLATFORM, 1e4, "cold")
    assert roof["queue_ms"] is None and roof["queue_reported"] == 0


def test_a_concurrent_pass_queues_as_its_last_first_token_did():
    # the second request's first token ends the pass's wall: its 80 ms in the queue are the pass's
    group = [_hit(0, 50, 0.001, "g"), _hit(1, 100, 0.080, "g")]
    roof = phase_roofline(group, PLATFORM, 1e4, "cold")
    assert roof["achieved_ms"] == pytest.approx(100) and roof["queue_ms"] == pytest.approx(80)

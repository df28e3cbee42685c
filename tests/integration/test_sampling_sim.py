"""Sampler, preflight and cooldown against the live simulated server (`python -m harness.sim`).

The simulator really allocates `--sim-host-mem-scale` × its host pool and applies sglang's
host-memory rule (with `--sim-mem-available-gib` for determinism), so these tests check that the
sampler sees the pool in the server's RSS, that the preflight predicts the simulator's refusal
and acceptance, and that per-phase counter deltas match the requests sent. The host's own
MemAvailable (the pool arriving, cooldown clean once the server is gone) moves with every other
process on a shared machine: those checks are `-m slow`.
"""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest

from harness.analysis.samples import summarize_samples
from harness.core.model_config import load_model_shape
from harness.host.procfs import read_mem_available_kib
from harness.run import cooldown
from harness.run.hostpool import check_budget, predict_host_pool
from harness.run.sampler import Sampler

ROOT = Path(__file__).resolve().parents[2]
MODEL = ROOT / "scenarios" / "models" / "llama-tiny"


def _sim_missing() -> str | None:
    if not (ROOT / "harness" / "sim" / "__main__.py").exists():
        return "harness/sim/__main__.py missing: the simulated server has not landed yet"
    try:
        import harness.sim.server  # noqa: F401  (what `python -m harness.sim` runs)
        import harness.sim.testing  # noqa: F401
    except Exception as e:  # the simulator helper has not landed (or is broken)
        return f"harness.sim not importable: {type(e).__name__}: {e}"
    return None


pytestmark = pytest.mark.skipif(_sim_missing() is not None, reason=str(_sim_missing()))


@pytest.fixture()
def sims():
    """Start simulators (not yet waited for); every process group is killed at the end."""
    from harness.sim.testing import SimProcess

    started = []

    def start(*flags: str, model: str = "llama-tiny"):
        sim = SimProcess(["--skip-tokenizer-init", *flags], model=model, wait_ready=False, time_scale=0.01)
        started.append(sim)
        return sim.__enter__()

    yield start
    for sim in started:
        sim.kill()


def _send(sim, n_tokens: int, seed: int) -> None:
    from harness.sim.testing import generate

    generate(sim.url, [(seed * 7919 + i * 31) % 30000 + 10 for i in range(n_tokens)])


def _metric(counters: dict, name: str) -> float:
    return sum(v for k, v in counters.items() if k.split("{", 1)[0] == name)


def _phase_delta(summary: dict, phase: str, name: str) -> float:
    return sum(v for k, v in summary[phase]["counter_deltas"].items() if k.split("{", 1)[0] == name)


HOST_POOL_GB, HOST_MEM_SCALE = 4.0, 0.25  # a ~0.93 GiB real host allocation
REAL_KIB = HOST_POOL_GB * 1e9 * HOST_MEM_SCALE / 1024


def _sample_a_live_sim(sims) -> tuple[cooldown.Baseline, dict, list[dict]]:
    """Start an ON server with a real host pool under a Sampler, label idle / cold / second phases
    while sending 3 and 2 requests, stop it: (pre-launch baseline, phase summary, samples)."""
    baseline = cooldown.take_baseline()
    sim = sims(
        "--enable-metrics",
        "--enable-hierarchical-cache",
        "--hicache-size",
        str(HOST_POOL_GB),
        "--hicache-mem-layout",
        "page_first",
        "--max-total-tokens",
        "40000",
        "--sim-host-mem-scale",
        str(HOST_MEM_SCALE),
    )
    samples: list[dict] = []
    sampler = Sampler(sim.proc.pid, sim.url, samples.append)  # default 0.5 s interval
    sampler.start()
    try:
        sim.wait_until_ready(30)
        assert sampler.set_phase("idle", wait_s=5)
        time.sleep(0.6)
        assert sampler.set_phase("cold", wait_s=5)
        for i in range(3):
            _send(sim, 100, seed=i)
        time.sleep(0.25)
        assert sampler.set_phase("second", wait_s=5)
        for i in range(2):  # a phase shorter than one interval: only its boundary sample
            _send(sim, 200, seed=100 + i)
        assert sampler.set_phase("cooldown", wait_s=5)
    finally:
        sampler.stop()
        sim.kill()
    return baseline, summarize_samples(samples), samples


def test_sampler_on_live_sim_phases_rss_counters_and_host_pool(sims):
    """Per-phase samples of a live server: its RSS holds the real host pool, and per-phase
    counter deltas equal the requests and prompt tokens sent in each phase."""
    _, summ, samples = _sample_a_live_sim(sims)
    assert list(summ)[:4] == ["startup", "idle", "cold", "second"]
    assert all(s["server_rss_kib"] and s["server_rss_kib"] > 0 for s in samples if s["phase"] == "idle")
    assert any(s["counters"] for s in samples if s["phase"] == "idle")
    assert summ["idle"]["max_server_rss_kib"] > 0.9 * REAL_KIB  # the scaled host pool is really allocated

    # counters: exactly what each phase sent
    assert _phase_delta(summ, "cold", "sglang:num_requests_total") == 3
    assert _phase_delta(summ, "cold", "sglang:prompt_tokens_total") == 300
    assert _phase_delta(summ, "second", "sglang:num_requests_total") == 2
    assert _phase_delta(summ, "second", "sglang:prompt_tokens_total") == 400
    assert _phase_delta(summ, "idle", "sglang:prompt_tokens_total") == 0


@pytest.mark.slow  # reads the host's MemAvailable: needs a host where nothing else allocates meanwhile
def test_host_pool_shows_in_mem_available_and_comes_back(sims):
    """MemAvailable in the idle samples is lower than the pre-launch baseline by about the real
    host pool; once the server is gone, cooldown is clean."""
    baseline, summ, _ = _sample_a_live_sim(sims)
    drop_kib = baseline.mem_available_kib - summ["idle"]["min_mem_available_kib"]
    assert 0.8 * REAL_KIB < drop_kib < REAL_KIB + 0.5 * 1024 * 1024, (drop_kib, REAL_KIB)
    res = cooldown.wait(baseline, timeout_s=20, mem_tolerance_gib=0.4, poll_s=0.2)
    assert res.clean, res.reason


def test_preflight_matches_sim_refusal_and_success(sims):
    """With --sim-mem-available-gib 11 the per-rank budget is 1 GiB (1.07 GB): ratio 2 of 40000
    tokens (1.31 GB) is refused by the simulator and by the prediction; ratio 1 (0.66 GB) fits."""
    shape = load_model_shape(MODEL)
    mem_kib = 11 * 1024 * 1024
    common = (
        "--enable-hierarchical-cache",
        "--max-total-tokens",
        "40000",
        "--sim-mem-available-gib",
        "11",
        "--sim-host-mem-scale",
        "0.01",
    )
    big = predict_host_pool(shape, {"ratio": 2.0}, 40000, 1)
    small = predict_host_pool(shape, {"ratio": 1.0}, 40000, 1)
    big_r, small_r = check_budget(big, mem_kib), check_budget(small, mem_kib)
    assert big_r.fits is False and small_r.fits is True

    refused = sims(*common, "--hicache-ratio", "2")
    code = refused.wait_exit(30)
    log = refused.output()
    assert code != 0, log
    assert "Not enough host memory available" in log
    assert f"Requesting {big.total_bytes_per_rank / 1e9:.2f} GB" in log, log[-2000:]

    ok = sims(*common, "--hicache-ratio", "1", "--enable-metrics")
    ok.wait_until_ready(30)
    info = httpx.get(ok.url + "/get_server_info", timeout=5).json()
    assert info["max_total_num_tokens"] == 40000
    text = httpx.get(ok.url + "/metrics", timeout=5).text
    if "sglang:hicache_host_total_tokens" in text:
        from harness.server.metrics_page import parse_metrics_text

        total = _metric(parse_metrics_text(text), "sglang:hicache_host_total_tokens")
        assert total == small.kv_host_tokens


@pytest.mark.slow  # reads the host's MemAvailable: needs a host where nothing else allocates meanwhile
def test_cooldown_not_clean_while_server_holds_memory(sims):
    """Bounded: while the server (holding its scaled host pool) still runs, cooldown reports not
    clean within its timeout."""
    baseline = cooldown.take_baseline()
    sim = sims(
        "--enable-hierarchical-cache",
        "--hicache-size",
        "4",
        "--max-total-tokens",
        "20000",
        "--sim-host-mem-scale",
        "0.25",
    )
    sim.wait_until_ready(30)
    time.sleep(0.2)
    assert baseline.mem_available_kib - read_mem_available_kib() > 0.5 * 1024 * 1024
    res = cooldown.wait(baseline, timeout_s=1.0, mem_tolerance_gib=0.4, poll_s=0.2)
    assert not res.clean and res.waited_s >= 1.0  # waited out its timeout, then said so
    assert "MemAvailable" in res.reason


def test_preflight_matches_sim_hybrid_pools(sims):
    """Hybrid GDN model: the predicted KV tokens and mamba bytes are the simulator's log lines,
    for ratio sizing and for --hicache-size (each pool given the whole size)."""
    import re

    model = ROOT / "scenarios" / "models" / "qwen3next-tiny"
    shape = load_model_shape(model)
    for hicache, flags in (({"ratio": 2.0}, ("--hicache-ratio", "2")), ({"size_gb": 0.05}, ("--hicache-size", "0.05"))):
        pred = predict_host_pool(shape, hicache, 20000, 1, mamba_device_slots=8)
        sim = sims(
            "--enable-hierarchical-cache",
            "--hicache-mem-layout",
            "page_first",
            "--max-total-tokens",
            "20000",
            "--max-mamba-cache-size",
            "8",
            *flags,
            model="qwen3next-tiny",
        )
        sim.wait_until_ready(30)
        log = sim.output()
        kv = re.search(r"KV host pool: (\d+) tokens, ([\d.]+) GB", log)
        mamba = re.search(r"Allocating ([\d.]+) GB host memory for hierarchical Mamba cache", log)
        assert kv and mamba, log[-3000:]
        assert int(kv.group(1)) == pred.kv_host_tokens
        assert kv.group(2) == f"{pred.kv_host_bytes / 1e9:.2f}"
        assert mamba.group(1) == f"{pred.mamba_host_bytes / 1e9:.2f}"
        sim.kill()

"""Host-pool prediction against sglang's sizing (real logged numbers), the budget check, and the
cooldown wait (with injected readers, plus one real held buffer)."""

from __future__ import annotations

import pytest

from harness.core.model_config import load_model_shape
from harness.host.procfs import read_mem_available_kib
from harness.run import cooldown
from harness.run.gpu_pool import kv_dtype_bytes_for, pool_args_from_server_args
from harness.run.hostpool import DEVICE_POOL_UNKNOWN, check_budget, predict_host_pool, preflight_variant
from tests.unit.run.scenario_objects import MODELS, scenario, variant

KIB_PER_GIB = 1024 * 1024


@pytest.fixture(scope="module")
def llama_tiny():
    return load_model_shape(MODELS / "llama-tiny")


@pytest.fixture(scope="module")
def gdn27b():
    return load_model_shape(MODELS / "hybrid-gdn-27b")


def test_llama_tiny_ratio2_matches_sglang_0517_log(llama_tiny):
    # sglang 0.5.17: "Allocating kv hierarchical KV host pool: 40961 tokens, 0.67 GB host memory."
    p = predict_host_pool(llama_tiny, {"ratio": 2.0}, 20480, 1)
    assert p.known and p.source == "ratio"
    assert p.kv_host_tokens == 40961
    assert round(p.total_gb_per_rank, 2) == 0.67
    assert p.mamba_host_slots is None


def test_seed000_hybrid_tp2_int2(gdn27b):
    # seed 000: "hierarchical KV host pool: 420001 tokens, 2.58 GB", then the mamba pool
    # "Requesting 2.55 GB but only have 0.59 GB free" (65 slots of 39.2 MB)
    p = predict_host_pool(
        gdn27b, {"ratio": 2}, 210000, 2, mamba_device_slots=32, kv_dtype_bytes=kv_dtype_bytes_for("int2")
    )
    assert p.kv_host_tokens == 420001
    assert round(p.kv_host_bytes / 1e9, 2) == 2.58
    assert p.mamba_host_slots == 65
    assert round(p.mamba_host_bytes / 1e9, 2) == 2.55
    # budget such that KV fits and 0.59 GB remain for the mamba pool: refused on mamba
    mem_kib = int((10 * 2**30 + 2 * (p.kv_host_bytes + 0.59e9)) / 1024)
    r = check_budget(p, mem_kib, reserve_gib=10, ranks_on_host=2)
    assert r.fits is False and r.failing_pool == "mamba"
    assert "2.55 GB" in r.reason and "0.59 GB" in r.reason


def test_size_gb_overrides_ratio_and_aligns_to_pages(llama_tiny):
    bpt = llama_tiny.kv_bytes_per_token(1)
    p = predict_host_pool(llama_tiny, {"ratio": 2, "size_gb": 1.0}, None, 1, page_size=64)
    assert p.source == "size_gb" and p.known  # device pool not needed for a dense model
    raw = int(1.0 * 1e9 // bpt)
    assert p.kv_host_tokens == (raw // 64 + 1) * 64
    assert p.kv_host_tokens % 64 == 0


def test_hybrid_size_gb_split(gdn27b):
    kv_bpt = gdn27b.kv_bytes_per_token(1)
    m_bps = gdn27b.mamba_bytes_per_slot(1)
    prop = predict_host_pool(gdn27b, {"size_gb": 10}, 100000, 1, mamba_device_slots=16, size_split="proportional")
    kv_dev, m_dev = 100000 * kv_bpt, 16 * m_bps
    assert prop.kv_host_tokens == int(10 * kv_dev / (kv_dev + m_dev) * 1e9 // kv_bpt) + 1
    assert prop.total_bytes_per_rank <= 10e9 + kv_bpt + m_bps
    each = predict_host_pool(gdn27b, {"size_gb": 10}, 100000, 1, mamba_device_slots=16, size_split="each")
    assert each.kv_host_tokens == int(10e9 // kv_bpt) + 1
    assert each.mamba_host_slots == int(10e9 // m_bps) + 1
    assert predict_host_pool(gdn27b, {"size_gb": 10}, None, 1).known  # "each" needs no device pool
    unknown = predict_host_pool(gdn27b, {"size_gb": 10}, None, 1, size_split="proportional")
    assert not unknown.known and unknown.total_bytes_per_rank is None


def test_unknown_device_pool_then_recomputed(llama_tiny):
    before = predict_host_pool(llama_tiny, {"ratio": 2}, None, 1)
    assert not before.known and before.note == DEVICE_POOL_UNKNOWN
    r = check_budget(before, 50 * KIB_PER_GIB)
    assert r.fits is None and "max_total_num_tokens" in r.reason
    after = predict_host_pool(llama_tiny, {"ratio": 2}, 20480, 1)
    assert check_budget(after, 50 * KIB_PER_GIB).fits is True


def test_hicache_off_always_fits(llama_tiny):
    p = predict_host_pool(llama_tiny, None, None, 1)
    r = check_budget(p, 0)
    assert p.total_bytes_per_rank == 0 and r.fits is True


def test_budget_rule_divides_by_ranks(llama_tiny):
    p = predict_host_pool(llama_tiny, {"size_gb": 3.0}, None, 1)  # ~3.0 GB
    # (16 GiB - 10 GiB) / 1 = 6.44 GB: fits; / 2 ranks = 3.22 GB: fits; / 3 = 2.15 GB: no
    assert check_budget(p, 16 * KIB_PER_GIB, 10, 1).fits is True
    assert check_budget(p, 16 * KIB_PER_GIB, 10, 2).fits is True
    r3 = check_budget(p, 16 * KIB_PER_GIB, 10, 3)
    assert r3.fits is False and r3.failing_pool == "kv"
    assert r3.budget_gb == pytest.approx(6 * 2**30 / 3 / 1e9, abs=1e-3)
    assert r3.requested_gb == pytest.approx(p.total_bytes_per_rank / 1e9, abs=1e-3)
    assert check_budget(p, 9 * KIB_PER_GIB).fits is False  # below the reserve: negative budget
    d = r3.to_dict()
    assert d["prediction"]["kv_host_tokens"] == p.kv_host_tokens


def test_pool_args_from_scenario_args():
    a = pool_args_from_server_args(
        {
            "--max-total-tokens": 20480,
            "--page-size": 64,
            "--attention-backend": "triton",
            "--kv-cache-dtype": "fp8_e4m3",
        }
    )
    assert a.max_total_tokens == 20480 and a.page_size == 64 and a.kv_cache_dtype == "fp8_e4m3"
    assert kv_dtype_bytes_for(a.kv_cache_dtype) == 1
    b = pool_args_from_server_args({"--skip-tokenizer-init": True})
    assert b.max_total_tokens is None and b.page_size == 1 and b.max_mamba_cache_size is None


# ----------------------------------------------------------------------------- cooldown


def test_cooldown_clean_when_memory_comes_back():
    readings = iter([10, 11, 15, 20])  # GiB, recovering
    gpu = iter([{0: 9000.0}, {0: 5000.0}, {0: 600.0}, {0: 500.0}])
    base = cooldown.Baseline(mem_available_kib=20 * KIB_PER_GIB, gpu_mem_used_mib={0: 500.0}, wall_time=0)
    slept = []
    r = cooldown.wait(
        base,
        timeout_s=60,
        mem_tolerance_gib=1.0,
        gpu_tolerance_mib=256,
        read_mem_available=lambda: next(readings) * KIB_PER_GIB,
        read_gpu=lambda: next(gpu),
        sleep=slept.append,
        poll_s=0.01,
    )
    assert r.clean and r.polls == 4 and r.still_high_gpus == []


def test_cooldown_not_clean_is_bounded_and_reports_gpu():
    base = cooldown.Baseline(mem_available_kib=20 * KIB_PER_GIB, gpu_mem_used_mib={0: 500.0}, wall_time=0)
    r = cooldown.wait(
        base,
        timeout_s=0.3,
        mem_tolerance_gib=1.0,
        poll_s=0.05,
        read_mem_available=lambda: 20 * KIB_PER_GIB,
        read_gpu=lambda: {0: 30000.0},
    )
    assert not r.clean and r.still_high_gpus == [0]
    assert r.waited_s >= 0.3 and "GPU 0" in r.reason  # gave up at its timeout, naming the GPU


def test_cooldown_skips_gpu_without_baseline_gpu():
    base = cooldown.Baseline(mem_available_kib=20 * KIB_PER_GIB, gpu_mem_used_mib=None, wall_time=0)

    def boom():
        raise AssertionError("GPU must not be read when the baseline had none")

    r = cooldown.wait(base, timeout_s=1, read_mem_available=lambda: 20 * KIB_PER_GIB, read_gpu=boom)
    assert r.clean and r.gpu_mem_used_mib_now is None


@pytest.mark.slow  # touches 1.5 GiB of real memory; on a shared host other processes move MemAvailable too
def test_cooldown_not_clean_while_a_real_buffer_is_held():
    """Real MemAvailable: a 1.5 GiB touched buffer taken after the baseline keeps it low."""
    import mmap

    base = cooldown.take_baseline()
    assert base.mem_available_kib == pytest.approx(read_mem_available_kib(), rel=0.2)
    size = 1536 * 1024 * 1024
    buf = mmap.mmap(-1, size)
    try:
        import numpy as np

        np.frombuffer(buf, dtype=np.uint8)[::4096] = 1  # fault every page in
        r = cooldown.wait(base, timeout_s=1.0, mem_tolerance_gib=0.5, poll_s=0.2)
        assert not r.clean and r.mem_shortfall_kib > 0.5 * KIB_PER_GIB
        assert r.waited_s >= 1.0  # it waited out its timeout for the memory to come back
    finally:
        buf.close()
    r2 = cooldown.wait(base, timeout_s=5.0, mem_tolerance_gib=0.5, poll_s=0.2)
    assert r2.clean, r2.reason


# ----------------------------------------------------------------------------- runner entry


def _scenario(mode="warn", backend="sim", mem_gib=None, ranks=None, tp=1):
    sim = {"mem_available_gib": mem_gib} if backend == "sim" and mem_gib is not None else None
    return scenario(backend=backend, tp=tp, sim=sim, mode=mode, ranks_on_host=ranks)


def _variant(sc, name, hicache, **args):
    return variant(sc, name, hicache, {f"--{k.replace('_', '-')}": v for k, v in args.items()})


def test_preflight_variant_before_launch_and_after_ready():
    sc = _scenario(mem_gib=None, backend="sglang")
    v = _variant(sc, "pv-on", {"ratio": 2.0})
    before = preflight_variant(sc, v)
    assert before["stage"] == "before_launch" and before["fits"] is None
    assert "max_total_num_tokens" in before["reason"]
    after = preflight_variant(sc, v, device_pool_tokens=20480, before=before)
    assert after["stage"] == "after_ready"
    assert after["prediction"]["kv_host_tokens"] == 40961
    # budget judged on the MemAvailable read before launch, and both records kept
    assert after["mem_available_kib"] == before["mem_available_kib"]
    assert after["mem_available_source"] == "host, read before launch"
    assert after["before_launch"]["stage"] == "before_launch"
    # nothing is remembered between calls: without `before` the host is read afresh
    fresh = preflight_variant(sc, v, device_pool_tokens=20480)
    assert fresh["mem_available_source"] == "host" and "before_launch" not in fresh
    import json

    json.dumps(after)  # JSON-ready for status.json


def test_preflight_variant_uses_max_total_tokens_arg_and_sim_memory():
    sc = _scenario(mem_gib=10.5)  # 0.5 GiB budget
    small = preflight_variant(sc, _variant(sc, "s", {"ratio": 1.0}, max_total_tokens=20000))
    assert small["fits"] is True and small["mem_available_source"] == "sim.mem_available_gib"
    big = preflight_variant(sc, _variant(sc, "b", {"ratio": 2.0}, max_total_tokens=20000))
    assert big["fits"] is False and big["failing_pool"] == "kv"
    off_sc = _scenario(mode="off")
    assert preflight_variant(off_sc, _variant(off_sc, "x", None)) is None
    off = preflight_variant(sc, _variant(sc, "off", None))
    assert off["fits"] is True and off["requested_gb"] == 0
    # TP2 on one host: the budget is split between the ranks
    sc2 = _scenario(mem_gib=11.0, tp=2)
    tp2 = preflight_variant(sc2, _variant(sc2, "t", {"ratio": 1.0}, max_total_tokens=40000))
    assert tp2["ranks_on_host"] == 2
    assert tp2["budget_gb"] == pytest.approx(2**30 / 2 / 1e9, abs=1e-3)


def test_cooldown_result_is_record_like():
    base = cooldown.Baseline(mem_available_kib=1, gpu_mem_used_mib=None, wall_time=0)
    r = cooldown.wait(base, timeout_s=0, read_mem_available=lambda: 1)
    assert r.get("clean") is True and r.to_json()["clean"] is True

"""The simulator's storage tier (L3): the page cache below the host pool, its cost, what a request
and /metrics say about it, and its two faults (corrupt_storage, missing_storage_pages)."""

from __future__ import annotations

import httpx
import pytest

from harness.analysis.samples import storage_io
from harness.core.model_config import load_model_shape
from harness.server.metrics_page import parse_metrics_text
from harness.sim.cache import TwoTierCache
from harness.sim.cost import CostModel
from harness.sim.testing import MODELS, SimProcess, generate

pytestmark = pytest.mark.skipif(not (MODELS / "llama-tiny" / "config.json").exists(), reason="needs llama-tiny")

POOL = 4096
PAGE = 16
PROMPT = 1500


def ids(seed: int, n: int = PROMPT) -> list[int]:
    return [(seed * 7919 + i * 31) % 30000 + 5 for i in range(n)]


def fill(cache: TwoTierCache, seeds: range, n: int = 200) -> None:
    for s in seeds:
        toks = ids(s, n)
        cache.make_room(n)
        cache.insert(toks, n)


# ------------------------------------------------------------------ the page cache
def test_storage_hits_after_host_eviction():
    cache = TwoTierCache(256, 1024, page_size=PAGE, storage_tokens=100_000)
    a = ids(1, 200)
    fill(cache, range(1, 2))
    fill(cache, range(2, 12))  # 2000 tokens: past the GPU (256) and the host pool (1024)
    m = cache.match(a)
    assert m.device == [] and m.host == []
    assert m.storage_tokens == (200 - 1) // PAGE * PAGE  # every full page but the last token's
    new = cache.prefetch(m)
    assert len(new) == len(m.host) == (200 - 1) // PAGE and m.storage == []
    assert all(p.on_host and not p.on_device and p.lock == 1 for p in new)
    assert cache.stats.storage_read_tokens == len(new) * PAGE
    cache.unlock(new)
    assert cache.host_used_tokens <= 1024
    # now they are host pages: the next lookup finds them on the host, not in storage
    again = cache.match(a)
    assert again.host_tokens == len(new) * PAGE and again.storage == []


def test_prefetch_stops_where_the_host_pool_has_no_slot():
    # write-through: the GPU's 16 pages hold 16 of the host's 24 slots; the rest take the prefetch
    cache = TwoTierCache(256, 384, page_size=PAGE, storage_tokens=100_000)
    fill(cache, range(1, 12))
    m = cache.match(ids(1, 200))
    new = cache.prefetch(m)
    assert 0 < len(new) < (200 - 1) // PAGE and cache.host_used_tokens <= 384


def test_without_a_storage_backend_nothing_is_stored():
    cache = TwoTierCache(256, 384, page_size=PAGE)
    fill(cache, range(1, 12))
    assert cache.storage_used_tokens == 0 and cache.match(ids(1, 200)).storage == []


def test_storage_is_lru_with_its_own_capacity():
    cache = TwoTierCache(256, 384, page_size=PAGE, storage_tokens=40 * PAGE)  # 40 pages
    fill(cache, range(1, 12))  # 11 x 12 full pages written through: the oldest fall out
    assert cache.storage_used_tokens == 40 * PAGE
    assert cache.stats.storage_evicted_tokens == (11 * 12 - 40) * PAGE
    assert cache.match(ids(1, 200)).storage == []  # the first prompt was evicted from storage
    assert cache.match(ids(11, 200)).device_tokens > 0  # the newest is still on the GPU


def test_write_back_stores_pages_when_the_gpu_evicts_them():
    cache = TwoTierCache(256, 384, page_size=PAGE, write_policy="write_back", storage_tokens=100_000)
    fill(cache, range(1, 2))
    assert cache.storage_used_tokens == 0  # not on the host yet, so not on storage either
    fill(cache, range(2, 4))
    assert cache.storage_used_tokens > 0 and cache.stats.storage_written_tokens == cache.storage_used_tokens


def test_flush_keeps_storage():
    cache = TwoTierCache(256, 384, page_size=PAGE, storage_tokens=100_000)
    fill(cache, range(1, 2))
    cache.reset()
    assert cache.match(ids(1, 200)).storage_tokens == (200 - 1) // PAGE * PAGE


def test_storage_hit_ttft_is_between_host_hit_and_recompute_on_the_cost_model():
    shape = load_model_shape(str(MODELS / "llama-tiny"))
    cost = CostModel.for_model(shape, 1, "kernel", "page_first", 1.0)
    kvb = shape.kv_bytes_per_token(1, None)
    n = 8000
    recompute = cost.prefill_s(n, 0, 0)
    host = cost.prefill_s(1, n * kvb, 0)
    storage = cost.prefill_s(1, n * kvb, 0, n * kvb)
    assert host < storage < recompute
    slow_disk = CostModel.for_model(shape, 1, "kernel", "page_first", 1.0, storage_read_gbs=0.05)
    assert slow_disk.prefill_s(1, n * kvb, 0, n * kvb) > recompute  # a slow disk is worse than recompute


# ------------------------------------------------------------------ the server
ARGS = [
    "--enable-hierarchical-cache",
    "--max-total-tokens",
    str(POOL),
    "--hicache-ratio",
    "1.5",
    "--page-size",
    str(PAGE),
    "--enable-metrics",
    "--enable-deterministic-inference",
    "--sim-mem-available-gib",
    "64",
]
STORAGE = ["--hicache-storage-backend", "file", "--hicache-storage-prefetch-policy", "wait_complete"]


def cold_then_past_host(sim: SimProcess) -> tuple[dict, dict]:
    """One prompt cold, ten more (past GPU and host), the first one again."""
    cold = generate(sim.url, ids(1), max_new_tokens=4, return_logprob=True, top_logprobs_num=5)
    for k in range(2, 12):
        generate(sim.url, ids(k))
    again = generate(sim.url, ids(1), max_new_tokens=4)
    return cold, again


def storage_series(sim: SimProcess) -> dict:
    return storage_io(parse_metrics_text(httpx.get(sim.url + "/metrics", timeout=10).text)) or {}


def test_storage_hit_is_reported_in_details_and_metrics():
    with SimProcess(ARGS + STORAGE) as sim:
        cold, again = cold_then_past_host(sim)
        series = storage_series(sim)
    details = again["meta_info"]["cached_tokens_details"]
    hit = (PROMPT - 1) // PAGE * PAGE
    assert details == {"device": 0, "host": 0, "storage": hit, "storage_backend": "file"}
    assert again["meta_info"]["cached_tokens"] == hit
    assert again["output_ids"] == cold["output_ids"]  # a healthy storage tier answers the same
    assert series["prefetched_tokens"] == series["cached_storage_tokens"] == hit
    assert (
        series["backuped_tokens"] > 0 and series["prefetch_ops"] == 1 and series["prefetch_gbs"] == pytest.approx(2.0)
    )


def test_below_the_prefetch_threshold_storage_is_not_read():
    extra = ["--hicache-storage-backend-extra-config", '{"prefetch_threshold": 4096}']
    with SimProcess(ARGS + STORAGE + extra) as sim:
        _, again = cold_then_past_host(sim)
    assert again["meta_info"]["cached_tokens"] == 0


def test_corrupt_storage_changes_only_storage_hits():
    with SimProcess(ARGS + STORAGE + ["--sim-fault", "corrupt_storage"]) as sim:
        cold, again = cold_then_past_host(sim)
        device_hit = generate(sim.url, ids(11), max_new_tokens=4)  # the newest prompt: on the GPU
        device_cold = generate(sim.url, ids(11) + [7], max_new_tokens=4)
    assert again["meta_info"]["cached_tokens_details"]["storage"] > 0
    top0 = [t for _, t, _ in cold["meta_info"]["output_top_logprobs"][0]]
    assert again["output_ids"][0] != cold["output_ids"][0] and again["output_ids"][0] not in top0
    assert device_hit["meta_info"]["cached_tokens_details"]["storage"] == 0
    assert device_cold["meta_info"]["cached_tokens"] > 0  # a GPU hit: untouched by the fault


def test_missing_storage_pages_means_recompute_and_right_answers():
    with SimProcess(ARGS + STORAGE + ["--sim-fault", "missing_storage_pages"]) as sim:
        cold, again = cold_then_past_host(sim)
        series = storage_series(sim)
    assert again["meta_info"]["cached_tokens"] == 0 and again["meta_info"]["cached_tokens_details"] is None
    assert again["output_ids"] == cold["output_ids"]
    # the server believes it wrote: backups counted, nothing ever prefetched
    assert series["backuped_tokens"] > 0 and series["prefetched_tokens"] == 0 and series["cached_storage_tokens"] == 0


def test_corrupt_host_load_leaves_storage_hits_alone():
    with SimProcess(ARGS + STORAGE + ["--sim-fault", "corrupt_host_load"]) as sim:
        cold, again = cold_then_past_host(sim)
    assert again["meta_info"]["cached_tokens_details"]["storage"] > 0
    assert again["meta_info"]["cached_tokens_details"]["host"] == 0
    assert again["output_ids"] == cold["output_ids"]

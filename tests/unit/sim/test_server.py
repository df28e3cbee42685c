"""The simulated server over HTTP: SSE shape, cache tiers, flush, determinism, metrics, faults on outputs."""

import json
import threading
import time

import httpx
import pytest

from harness.sim.testing import SimProcess, generate

POOL = 2048


def prompt(n, seed):
    return [(seed * 7919 + i * 31) % 30000 + 300 for i in range(n)]


@pytest.fixture(scope="module")
def on():
    with SimProcess(
        [
            "--enable-hierarchical-cache",
            "--hicache-ratio",
            "2",
            "--max-total-tokens",
            str(POOL),
            "--enable-metrics",
            "--skip-tokenizer-init",
            "--sim-mem-available-gib",
            "64",
            "--enable-deterministic-inference",
        ]
    ) as sim:
        yield sim


@pytest.fixture(scope="module")
def off():
    # HiCache off, real-time costs (time scale 1), tokenizer on
    with SimProcess(["--max-total-tokens", str(POOL), "--chunked-prefill-size", "512"], time_scale=1.0) as sim:
        yield sim


def details(resp):
    return resp["meta_info"]["cached_tokens_details"]


def test_sse_format_and_meta_info(on):
    body = {
        "input_ids": prompt(40, 1),
        "sampling_params": {"max_new_tokens": 4, "temperature": 0},
        "stream": True,
        "return_logprob": True,
        "top_logprobs_num": 5,
        "rid": "abc",
    }
    with httpx.stream("POST", on.url + "/generate", json=body, timeout=30) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        raw = r.read().decode()
    events = [e for e in raw.split("\n\n") if e]
    assert all(e.startswith("data: ") for e in events)
    assert events[-1] == "data: [DONE]"
    chunks = [json.loads(e[6:]) for e in events[:-1]]
    assert [len(c["output_ids"]) for c in chunks] == [1, 2, 3, 4]  # cumulative
    assert all("text" not in c for c in chunks)  # --skip-tokenizer-init
    last = chunks[-1]["meta_info"]
    assert last["id"] == "abc" and last["finish_reason"] == {"type": "length", "length": 4}
    assert (last["prompt_tokens"], last["completion_tokens"], last["cached_tokens"]) == (40, 4, 0)
    assert last["cached_tokens_details"] is None and last["e2e_latency"] > 0
    assert chunks[0]["meta_info"]["finish_reason"] is None
    lp = last["output_token_logprobs"]
    assert len(lp) == 4 and all(
        len(x) == 3 and x[2] is None and x[1] == t for x, t in zip(lp, chunks[-1]["output_ids"])
    )
    top = last["output_top_logprobs"]
    assert len(top) == 4 and all(len(pos) == 5 for pos in top)
    assert all(pos[0][0] >= pos[1][0] >= pos[4][0] for pos in top)


def test_repeat_is_a_device_hit(on):
    p = prompt(300, 2)
    first = generate(on.url, p, 8)
    again = generate(on.url, p, 8)
    assert details(first) is None
    assert details(again) == {"device": 299, "host": 0}
    assert again["output_ids"] == first["output_ids"]  # deterministic inference


def test_host_hits_only_after_device_pool_overflow(on):
    httpx.post(on.url + "/flush_cache", timeout=10).raise_for_status()
    base = [prompt(800, 10 + k) for k in range(3)]
    cold = generate(on.url, base[0], 4)
    assert generate(on.url, base[0], 4)["meta_info"]["cached_tokens_details"]["host"] == 0
    for p in base[1:]:
        generate(on.url, p, 4)  # 3 x 800 > 2048: the first prompt's pages go to host
    hit = generate(on.url, base[0], 4)
    d = details(hit)
    assert d["host"] > 0 and d["device"] + d["host"] == 799
    assert hit["output_ids"] == cold["output_ids"]
    m = httpx.get(on.url + "/metrics").text
    assert 'sglang:cached_tokens_total{cache_source="host"' in m
    assert "sglang:load_back_tokens_total{" in m and "sglang:evicted_tokens_total{" in m


def test_no_host_hits_with_hicache_off(off):
    base = [prompt(800, 20 + k) for k in range(3)]
    for p in base:
        generate(off.url, p, 1)
    r = generate(off.url, base[0], 1)
    assert r["meta_info"]["cached_tokens"] < 799 and (details(r) or {}).get("host", 0) == 0


def test_flush_clears_both_tiers(on):
    base = [prompt(800, 30 + k) for k in range(3)]
    for p in base:
        generate(on.url, p, 1)
    r = httpx.post(on.url + "/flush_cache", timeout=10)
    assert r.status_code == 200 and r.text.startswith("Cache flushed.")
    for p in base:
        assert details(generate(on.url, p, 1)) is None
    m = httpx.get(on.url + "/metrics").text
    used = [ln for ln in m.splitlines() if ln.startswith("sglang:hicache_host_used_tokens{")]
    assert used and float(used[0].split()[-1]) > 0  # refilled by the three misses, not stale


def test_flush_refused_while_busy(off):
    box = {}
    t = threading.Thread(target=lambda: box.update(r=generate(off.url, prompt(50, 40), 150)))
    t.start()
    try:
        time.sleep(0.3)  # 150 decode steps of ~4 ms at time scale 1
        assert httpx.post(off.url + "/flush_cache", timeout=10).status_code == 400
    finally:
        t.join(30)
    assert box["r"]["meta_info"]["completion_tokens"] == 150
    assert httpx.post(off.url + "/flush_cache", timeout=10).status_code == 200


def _scheduled(url: str) -> float:
    """Requests the simulated scheduler holds (running, in a chunked prefill, or waiting)."""
    text = httpx.get(url + "/metrics", timeout=10).text
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith(("sglang:num_running_reqs", "sglang:num_queue_reqs"))
    )


def test_short_prompt_waits_behind_long_prefill():
    """A short prompt that arrives during a long prompt's chunked prefill waits for the running
    chunks (the chunked request goes first). Load-proof: time scale 10 makes the long prefill's
    four 512-token chunks ~0.43 s of server time, far above a loaded machine's scheduling noise;
    the short one is sent only once the server holds the long one (its /metrics), so a late
    thread start cannot reorder them; latencies are the server's own (meta_info.e2e_latency)."""
    args = ["--max-total-tokens", str(POOL), "--chunked-prefill-size", "512", "--enable-metrics"]
    with SimProcess(args, time_scale=10.0) as sim:
        alone = generate(sim.url, prompt(16, 50), 1)["meta_info"]["e2e_latency"]
        th = threading.Thread(target=lambda: generate(sim.url, prompt(2000, 51), 1))
        th.start()
        deadline = time.monotonic() + 30
        while _scheduled(sim.url) < 1:
            assert time.monotonic() < deadline, "the long prompt never showed up in the scheduler's gauges"
            time.sleep(0.002)
        during = generate(sim.url, prompt(16, 52), 1)["meta_info"]["e2e_latency"]
        th.join(30)
    assert during > alone + 0.1, (alone, during)  # at least one of the long prompt's ~0.11 s chunks


def test_outputs_deterministic_and_text_mode(off, on):
    p = prompt(64, 60)
    a, b = generate(off.url, p, 12), generate(on.url, p, 12)
    assert a["output_ids"] == b["output_ids"]  # same function of the prompt on any server
    assert isinstance(a["text"], str) and a["text"] and "text" not in b
    r = httpx.post(off.url + "/generate", json={"text": "hello", "sampling_params": {"max_new_tokens": 2}})
    assert r.status_code == 200 and r.json()["meta_info"]["prompt_tokens"] == 5
    bad = httpx.post(on.url + "/generate", json={"text": "hello"})
    assert bad.status_code == 400  # no tokenizer


def test_completions_and_info_endpoints(on):
    r = httpx.post(on.url + "/v1/completions", json={"prompt": prompt(20, 70), "max_tokens": 3}, timeout=10)
    assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 3
    info = httpx.get(on.url + "/get_server_info").json()
    assert info["simulated"] is True and info["version"].endswith("-sim")
    assert info["max_total_num_tokens"] == POOL and info["host_pool_tokens"] == 2 * POOL + 1
    assert httpx.get(on.url + "/server_info").json()["simulated"] is True
    assert httpx.get(on.url + "/get_model_info").json()["model_type"] == "llama"
    assert httpx.post(on.url + "/generate", json={"sampling_params": {}}).status_code == 400
    too_long = httpx.post(on.url + "/generate", json={"input_ids": prompt(POOL + 10, 1)})
    assert too_long.status_code == 400
    # a malformed field is the client's error (400), never an internal server error
    bad_k = httpx.post(on.url + "/generate", json={"input_ids": prompt(20, 71), "top_logprobs_num": "five"})
    assert bad_k.status_code == 400 and "top_logprobs_num" in bad_k.text


def test_metrics_need_flag(off):
    assert httpx.get(off.url + "/metrics").status_code == 404


def host_hit_pair(sim, seed):
    """(cold, device-hit, host-hit) responses for one 800-token prompt, 8 new tokens each."""
    httpx.post(sim.url + "/flush_cache", timeout=10).raise_for_status()
    p = prompt(800, seed)
    cold = generate(sim.url, p, 8, return_logprob=True, top_logprobs_num=5)
    dev = generate(sim.url, p, 8)
    for k in range(2):
        generate(sim.url, prompt(800, seed + 100 + k), 1)
    host = generate(sim.url, p, 8)
    return cold, dev, host


def test_corrupt_host_load_changes_only_host_hits():
    with SimProcess(
        [
            "--enable-hierarchical-cache",
            "--max-total-tokens",
            str(POOL),
            "--sim-mem-available-gib",
            "64",
            "--enable-deterministic-inference",
            "--sim-fault",
            "corrupt_host_load",
        ]
    ) as sim:
        cold, dev, host = host_hit_pair(sim, 80)
    assert details(dev)["host"] == 0 and dev["output_ids"] == cold["output_ids"]
    assert details(host)["host"] > 0
    top0 = [t for _, t, _ in cold["meta_info"]["output_top_logprobs"][0]]
    assert host["output_ids"][0] != cold["output_ids"][0] and host["output_ids"][0] not in top0


@pytest.mark.parametrize("deterministic", [False, True])
def test_near_tie_flips_only_without_deterministic_inference(deterministic):
    extra = [
        "--enable-hierarchical-cache",
        "--max-total-tokens",
        str(POOL),
        "--sim-mem-available-gib",
        "64",
        "--sim-fault",
        "near_tie_flips",
    ] + (["--enable-deterministic-inference"] if deterministic else [])
    differ = 0
    with SimProcess(extra) as sim:
        for seed in range(6):
            p = prompt(100, 90 + seed)
            cold = generate(sim.url, p, 32)
            again = generate(sim.url, p, 32)
            assert again["meta_info"]["cached_tokens"] == 99
            differ += cold["output_ids"] != again["output_ids"]
    assert (differ == 0) if deterministic else (differ >= 2)

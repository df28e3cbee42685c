"""The storage tier (L3) through the harness: the scenario's storage options as sglang flags and
environment, the sampler's storage figures, the storage-hit metric, repeat_prefill's storage
phases, parity catching a corrupt storage path, and the probe's disk bandwidth."""

from __future__ import annotations

import asyncio
import json

import pytest

from harness.analysis.bandwidth import storage_fraction
from harness.analysis.samples import storage_io, summarize_samples
from harness.measures.metrics import METRICS
from harness.probe.disk import disk_bandwidth
from harness.probe.run import run_probes
from harness.quality.config import Quality
from harness.quality.parity import evaluate_parity
from harness.run.launch import launch_spec
from harness.scenario import ScenarioError, load_scenario_text
from harness.server.client import StreamingClient
from harness.sim.testing import MODELS, SimProcess
from harness.store.records import RequestRecord
from tests.conftest import write_scenario
from tests.sim_workloads import ask_quality, run_on, sim, summary_of, workload

pytestmark = pytest.mark.skipif(not (MODELS / "llama-tiny" / "config.json").exists(), reason="needs llama-tiny")

SCENARIO = """\
name: st
server:
  backend: sim
  model_path: models/llama-tiny
  sim: {storage_read_gbs: 3, storage_gb: 50}
variants:
  - name: on-file
    hicache:
      ratio: 2.5
      storage_backend: file
      storage:
        dir: /tmp/l3-here
        prefetch_policy: wait_complete
        prefetch_threshold: 128
        extra_config: {hicache_storage_pass_prefix_keys: true}
"""


def scenario(tmp_path, text: str = SCENARIO):
    path = write_scenario(tmp_path, text)
    return load_scenario_text(path.read_text(), str(path), env={})


# ------------------------------------------------------------------ scenario -> sglang
def test_storage_options_become_sglang_flags_and_env(tmp_path):
    scn = scenario(tmp_path)
    (v,) = scn.expand_variants()
    spec = launch_spec(scn, v, 31000)
    argv = list(spec.argv)
    assert argv[argv.index("--hicache-storage-backend") + 1] == "file"
    assert argv[argv.index("--hicache-storage-prefetch-policy") + 1] == "wait_complete"
    extra = json.loads(argv[argv.index("--hicache-storage-backend-extra-config") + 1])
    assert extra == {"prefetch_threshold": 128, "hicache_storage_pass_prefix_keys": True}
    assert spec.env_overrides["SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR"] == "/tmp/l3-here"
    assert argv[argv.index("--sim-storage-read-gbs") + 1] == "3" and "--sim-storage-gb" in argv
    assert v.storage_dir() == "/tmp/l3-here"


def test_a_variant_env_overrides_the_storage_dir(tmp_path):
    text = SCENARIO + "    env: {SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR: /mnt/nvme/l3}\n"
    scn = scenario(tmp_path, text)
    (v,) = scn.expand_variants()
    assert launch_spec(scn, v, 31000).env_overrides["SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR"] == "/mnt/nvme/l3"
    assert v.storage_dir() == "/mnt/nvme/l3"


@pytest.mark.parametrize(
    ("hicache", "message"),
    [
        ("{storage: {prefetch_policy: wait_complete}}", "needs hicache.storage_backend"),
        ("{storage_backend: mooncake, storage: {dir: /tmp/x}}", "file backend's directory"),
        ("{storage_backend: file, storage: {prefetch_policy: eventually}}", "prefetch_policy"),
        ("{storage_backend: file, storage: {prefetch_threshold: 0}}", "prefetch_threshold"),
    ],
)
def test_bad_storage_options_are_refused(tmp_path, hicache, message):
    text = SCENARIO.split("variants:")[0] + f"variants:\n  - name: on\n    hicache: {hicache}\n"
    with pytest.raises(ScenarioError) as ei:
        scenario(tmp_path, text)
    assert any(message in e for e in ei.value.errors), ei.value.errors


def test_raw_storage_flags_in_args_point_to_the_hicache_block(tmp_path):
    text = SCENARIO.replace("  sim: {", "  args: {--hicache-storage-prefetch-policy: timeout}\n  sim: {")
    with pytest.raises(ScenarioError) as ei:
        scenario(tmp_path, text)
    assert any("hicache.storage.prefetch_policy" in e for e in ei.value.errors), ei.value.errors


# ------------------------------------------------------------------ records, metrics, sampler
def test_storage_hit_fraction_is_declared_once_and_reads_cached_storage():
    rec = RequestRecord(
        variant="v", workload="w", phase="p", repeat=0, index=0, rid="r", prompt_len=1000, input_hash="h",
        sent_ns=0, prompt_tokens=1000, cached_tokens=960, cached_device=0, cached_host=0, cached_storage=960,
    )  # fmt: skip
    assert METRICS["storage_hit_fraction"].of_record(rec) == pytest.approx(0.96)
    assert METRICS["host_hit_fraction"].of_record(rec) == 0.0


def _sample(t_s: float, phase: str, counters: dict) -> dict:
    return {"t_ns": int(t_s * 1e9), "phase": phase, "counters": counters}


def test_sampler_summarizes_storage_counters_per_phase():
    lab = '{dp_rank="0",storage_backend="file",tp_rank="0"}'
    start = {"sglang:prompt_tokens_total": 0.0}
    end = {
        f"sglang:prefetched_tokens_total{lab}": 4096.0,
        f"sglang:backuped_tokens_total{lab}": 8192.0,
        f"sglang:prefetch_bandwidth_sum{lab}": 6.0,
        f"sglang:prefetch_bandwidth_count{lab}": 2.0,
        'sglang:cached_tokens_total{cache_source="storage",tp_rank="0"}': 4096.0,
        'sglang:cached_tokens_total{cache_source="host",tp_rank="0"}': 100.0,
    }
    out = summarize_samples([_sample(0, "a", start), _sample(1, "b", end)])
    st = out["b"]["storage"]
    assert st["prefetched_tokens"] == st["cached_storage_tokens"] == 4096.0
    assert st["backuped_tokens"] == 8192.0
    assert st["prefetch_gbs"] == 3.0 and st["prefetch_ops"] == 2.0
    assert st["backup_gbs"] is None and st["backup_ops"] == 0.0
    assert out["a"]["storage"] is None  # no storage series: no storage figures, not zeros


def test_storage_io_accepts_a_backend_named_cache_source():
    st = storage_io({'sglang:cached_tokens_total{cache_source="storage_HiCacheFile"}': 64.0})
    assert st is not None and st["cached_storage_tokens"] == 64.0


def test_storage_fraction():
    assert storage_fraction(1.0, 4.0) == 0.25
    assert storage_fraction(None, 4.0) is None and storage_fraction(1.0, 0.0) is None
    assert storage_fraction(float("nan"), 1.0) is None and storage_fraction(-1.0, 1.0) is None


# ------------------------------------------------------------------ probe
def test_probe_measures_the_disk_under_the_storage_dir(tmp_path):
    r = disk_bandwidth(tmp_path / "not-yet-created" / "l3", 8 << 20)
    assert r["ok"], r["error"]
    assert r["path"] == str(tmp_path) and r["nbytes"] == 8 << 20
    assert r["write_gbs"] > 0 and r["read_gbs"] > 0 and r["method"] in ("O_DIRECT", "buffered+fsync")
    assert list(tmp_path.iterdir()) == []  # the probe's file is gone


def test_run_probes_has_the_disk_figure_without_a_gpu(tmp_path):
    def no_gpu(name, params, timeout_s):
        return {"ok": True, "value": {"cuda_available": False}}

    res = run_probes({"storage_dir": str(tmp_path), "disk_bytes": 4 << 20}, runner=no_gpu)
    assert res["disk"]["ok"] and res["disk"]["read_gbs"] > 0 and res["disk"]["path"] == str(tmp_path)
    assert res["gpu_present"] is False
    assert run_probes({"disk_bytes": 0}, runner=no_gpu)["disk"] is None


# ------------------------------------------------------------------ workload on the simulator
STORAGE_SERVER = (
    "--enable-hierarchical-cache",
    "--hicache-ratio",
    "2.5",
    "--page-size",
    "16",
    "--hicache-storage-backend",
    "file",
    "--sim-mem-available-gib",
    "64",
)


def test_repeat_prefill_storage_phase_gets_storage_hits():
    w = workload(
        kind="repeat_prefill",
        name="rp",
        n=2,
        prompt_tokens="0.3x pool",
        eviction_tokens="1.2x pool",
        storage_eviction_tokens="3.2x pool",
    )
    with sim(4096, *STORAGE_SERVER, time_scale=0.02) as server:
        outcome, records = run_on(server, [w])
    assert all(r.error is None for r in records)
    phases = summary_of(records, [w])["rp"]["phases"]
    assert list(phases) == ["cold", "repeat_device", "evict", "repeat_after_evict", "evict_host", "repeat_from_storage"]
    storage = [r for r in records if r.phase == "repeat_from_storage"]
    assert len(storage) == 2 and all(r.cached_storage and r.cached_storage >= 1200 for r in storage)
    assert all(r.cached_host and not r.cached_storage for r in records if r.phase == "repeat_after_evict")
    derived = summary_of(records, [w])["rp"]["derived"]
    assert derived["storage_hit_fraction"] > 0.9 and derived["storage_hit_ttft_ms"] > 0


# ------------------------------------------------------------------ parity
POOL = 4096
QCFG = dict(
    tasks=["needle", "multi_needle", "variable_tracking", "aggregation", "ordered_codes"],
    lengths=[1000],
    samples_per_task=1,
    max_new_tokens=8,
    churn_tokens="1.5x pool",
    churn_past_host=True,
    reasks=2,
    top_logprobs=5,
    tie_epsilon=0.05,
    mode="auto",
    control=True,
)


def _server(*extra: str) -> SimProcess:
    argv = ["--max-total-tokens", str(POOL), "--skip-tokenizer-init", "--enable-deterministic-inference", *extra]
    return SimProcess(argv, wait_ready=False)


def _quality(server: SimProcess, role: str):
    async def go():
        async with StreamingClient(server.url, timeout_s=60) as client:
            return await ask_quality(server.url, client, POOL, QCFG, role)

    recs = asyncio.run(go())
    assert all(r.error is None for r in recs), [r.error for r in recs if r.error]
    return recs


@pytest.fixture(scope="module")
def parity_servers():
    specs = {
        "off": (),
        "storage": STORAGE_SERVER,
        "corrupt": STORAGE_SERVER + ("--sim-fault", "corrupt_storage"),
        "missing": STORAGE_SERVER + ("--sim-fault", "missing_storage_pages"),
    }
    started: dict[str, SimProcess] = {}
    try:
        for name, extra in specs.items():
            started[name] = _server(*extra).__enter__()
        for s in started.values():
            s.wait_until_ready(30.0)
        yield started
    finally:
        for s in started.values():
            s.kill()


@pytest.fixture(scope="module")
def off_records(parity_servers):
    return _quality(parity_servers["off"], "off")


def test_parity_passes_with_reasks_served_from_storage(parity_servers, off_records):
    on = _quality(parity_servers["storage"], "on")
    rep = evaluate_parity(on, off_records, cfg=Quality(**QCFG))
    assert rep.verdict == "PASS", rep.reason
    reasks = [r for r in on if r.ask > 0]
    assert reasks and all(r.cached_storage and not r.cached_host for r in reasks)  # from L3, not the host
    assert rep.reasks_with_host_hit == len(reasks)


def test_parity_fails_on_corrupt_storage(parity_servers, off_records):
    on = _quality(parity_servers["corrupt"], "on")
    rep = evaluate_parity(on, off_records, cfg=Quality(**QCFG))
    assert rep.verdict == "FAIL", rep.reason
    assert any(r.cached_storage for r in on)


def test_missing_storage_pages_recompute_and_parity_is_not_exercised(parity_servers, off_records):
    on = _quality(parity_servers["missing"], "on")
    rep = evaluate_parity(on, off_records, cfg=Quality(**QCFG))
    # every re-ask recomputed (right answers, no storage hit): nothing came back through the host
    assert not any(r.cached_storage or r.cached_host for r in on if r.ask > 0)
    assert all(c.token_equal for c in rep.comparisons)
    assert rep.verdict == "NOT_EXERCISED", rep.reason


# ------------------------------------------------------------------ the whole run (slow)
@pytest.mark.slow
def test_sim_storage_scenario_end_to_end_with_the_disk_fraction(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    from harness.report.hicache_table import hicache_table
    from harness.report.view import load_view

    root = Path(__file__).resolve().parents[2]
    r = subprocess.run(
        [sys.executable, "-m", "harness", "run", "scenarios/sim_storage.yaml", "--probe", "--no-report", "--results-dir", str(tmp_path)],
        cwd=root, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    (run,) = (tmp_path / "sim_storage").iterdir()
    view = load_view(run)
    assert view.probe["disk"]["ok"]
    rows = {row.label: [c.value for c in row.cells] for row in hicache_table(view)[0]}
    off, host, file_ = rows["storage prefetch, fraction of disk read"]
    assert off is None and host is None and file_ > 0
    assert rows["storage-hit fraction"][2] > 0.9

"""storage_restart on the simulator with sglang's file keying: the server stopped and started
again with its storage directory kept serves the same prompts from storage (TTFT, outputs equal);
another model, or a wider KV dtype (short reads), gets 0 storage hits; a narrower KV dtype is
served by sglang's keying (no dtype in the key) and the harness fails the variant for it."""

from __future__ import annotations

import json
from pathlib import Path

from harness.cli import main
from harness.sim.storage_file import FileStorage

MODELS = Path(__file__).resolve().parents[2] / "scenarios" / "models"


def _run(tmp_path, base_dtype: str, workloads: str, l3=None) -> tuple[int, dict, list[dict], dict]:
    tmp_path.mkdir(parents=True, exist_ok=True)
    scenario = tmp_path / "restart.yaml"
    scenario.write_text(
        f"""
name: restart
server:
  backend: sim
  model_path: {MODELS / "llama-tiny"}
  args: {{--max-total-tokens: 4096, --page-size: 64, --skip-tokenizer-init: true, --enable-metrics: true,
          --enable-deterministic-inference: true, --kv-cache-dtype: {base_dtype}}}
  startup_timeout_s: 60
  startup_retries: 0
  sim: {{time_scale: 0.05, mem_available_gib: 16, startup_s: 0.05, storage_persist: true}}
sampling: {{enabled: true, interval_s: 0.25, idle_window_s: 0, gpu: false, cooldown_timeout_s: 5}}
variants:
  - name: on-file
    hicache:
      ratio: 2
      storage_backend: file
      storage: {{dir: {l3 or tmp_path / "l3"}, prefetch_policy: wait_complete}}
workloads:
{workloads}
"""
    )
    code = main(["run", str(scenario), "--no-report", "--results-dir", str(tmp_path / "results")])
    run = max((tmp_path / "results" / "restart").iterdir(), key=lambda p: p.stat().st_mtime_ns)
    v = run / "on-file"
    summary = json.loads((v / "summary.json").read_text())
    recs = [json.loads(line) for line in (v / "requests.jsonl").read_text().splitlines()]
    return code, summary, recs, json.loads((v / "status.json").read_text())


def _storage(recs, workload, phase):
    return [r["cached_storage"] for r in recs if r["workload"] == workload and r["phase"] == phase]


def test_after_a_restart_storage_serves_its_model_and_refuses_another(tmp_path):
    workloads = f"""
  - kind: storage_restart
    name: same
    prompt_tokens: 1500
  - kind: storage_restart
    name: other_model
    prompt_tokens: 1500
    restart_with: {{model_path: {MODELS / "llama-tiny-2"}}}
  - kind: storage_restart
    name: wider_dtype
    prompt_tokens: 1500
    restart_with: {{model_path: {MODELS / "llama-tiny-2"}, args: {{--kv-cache-dtype: bf16}}}}
"""
    code, summary, recs, status = _run(tmp_path, "fp8_e4m3", workloads)
    assert code == 0, status
    assert _storage(recs, "same", "before") == [0, 0]
    assert all(s >= 1408 for s in _storage(recs, "same", "after_restart"))  # every page but the last partial one
    derived = summary["workloads"]["same"]["derived"]
    assert derived["restart_storage_hit_fraction"] > 0.9 and derived["restart_output_match"] == 1.0
    assert _storage(recs, "other_model", "after_change") == [0, 0]
    assert _storage(recs, "wider_dtype", "after_change") == [0, 0]
    assert summary["workloads"]["other_model"]["derived"]["foreign_storage_tokens"] == 0
    # the tier model knows the restart: pools empty, the files kept -- or, changed, unusable
    phases = summary["tier_prediction"]["phases"]
    same = phases["same"]["after_restart"]
    assert same["predicted"]["device"] == 0 and same["predicted"]["storage"] > 0 and same["shortfall"] == 0
    assert phases["other_model"]["after_change"]["predicted_total"] == 0
    log = (tmp_path / "results" / "restart").glob("*/on-file/server.log")
    assert "Short read" in next(log).read_text()  # the fp8 pages read by bf16: refused, not served
    files = list((tmp_path / "l3").iterdir())
    assert files and all(f.name.endswith(("_0_1.bin")) for f in files)


def test_a_hit_served_across_a_dtype_change_fails_the_variant(tmp_path):
    workloads = """
  - kind: storage_restart
    name: narrower_dtype
    prompt_tokens: 1500
    restart_with: {args: {--kv-cache-dtype: fp8_e4m3}}
"""
    code, _, recs, status = _run(tmp_path, "bf16", workloads)
    assert all(s > 0 for s in _storage(recs, "narrower_dtype", "after_change"))  # sglang's keying serves them
    assert code == 1 and status["state"] == "failed"
    assert "written before the restart by another configuration" in json.dumps(status)


def test_file_keys_are_sglangs(tmp_path):
    """``<page hash><suffix>.bin``, the suffix the model name (/ as -) and TP rank/size; MLA: the name."""
    fs = FileStorage(str(tmp_path), "org/model", 2, 4096)
    assert fs.path(-1).name == "ffffffffffffffff_org-model_0_2.bin"
    assert FileStorage(str(tmp_path), "org/model", 2, 4096, mla=True).suffix == "_org-model"


def test_the_same_seed_sends_the_same_prompts_and_an_earlier_runs_pages_are_named(tmp_path):
    """The prompts come from the seed: two runs into two storage directories send the same ones.
    A run into a directory that already holds them (the first run's pages) is not measured as a
    first pass that wrote them: the variant fails with what to do."""
    workloads = """
  - kind: storage_restart
    name: same
    prompt_tokens: 1500
"""
    hashes = []
    for k in (1, 2):
        code, _, recs, status = _run(tmp_path / f"r{k}", "bf16", workloads)
        assert code == 0, status
        hashes.append([(r["phase"], r["index"], r["input_hash"]) for r in recs if r["workload"] == "same"])
    assert hashes[0] == hashes[1] and len({h for _, _, h in hashes[0]}) == 2
    code, _, recs, status = _run(tmp_path / "r3", "bf16", workloads, l3=tmp_path / "r1" / "l3")
    assert all(s > 0 for s in _storage(recs, "same", "before"))  # the first run's pages
    assert code == 1 and status["state"] == "failed"
    assert "already held these prompts' pages" in json.dumps(status)

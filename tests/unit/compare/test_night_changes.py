"""What changed between two nights (`harness.compare.changes`): every difference of the two runs'
manifests and pools, ranked (build first), listed by ``harness compare`` (Markdown and console,
comparison.json, the report's banner) when the comparison flags a change, and by ``harness
history`` at each change point (console and page)."""

from __future__ import annotations

import argparse
import copy
import json

from harness.cli.history import cli_main
from harness.compare import history as H
from harness.compare.changes import night_changes
from harness.store import results
from tests.factories import as_manifest, as_status, cold_records, noisy, write_run

BASE = {
    "harness_version": "0.1.0",
    "scenario": {"hash": "aaaa"},
    "sglang": {"version": "0.5.17"},
    "env": {"CUDA_VISIBLE_DEVICES": "0"},
    "host": {"kernel": "6.8.0", "os": "Linux", "gpus": [{"name": "H200", "driver": "580.95.05"}]},
    "probe": {"bandwidth_gbs": {"pinned_h2d": 55.4, "pageable_h2d": 20.0}, "disk": {"read_gbs": 3.0}},
    "design_warnings": {},
    "variants": [
        {
            "name": "on",
            "argv": ["python", "-m", "sglang.launch_server", "--port", "30000", "--hicache-mem-layout", "layer_first"],
            "env": {"SGLANG_HICACHE_HOST_ALLOC": "pin"},
            "build": {"version": "0.5.17", "git": {"commit": "abc123", "dirty": False}},
        }
    ],
}


def test_every_difference_is_listed_ranked_build_first_and_the_moving_or_noisy_ones_are_not():
    cand = copy.deepcopy(BASE)
    v = cand["variants"][0]
    v["build"]["git"] = {"commit": "def456", "dirty": True}
    v["argv"] = [
        *v["argv"][:3],
        "--port",
        "31000",
        "--hicache-mem-layout",
        "page_first",
        "--hicache-io-backend",
        "direct",
    ]
    v["env"] = {}
    cand["host"]["kernel"] = "6.11.0"
    cand["host"]["gpus"][0]["driver"] = "590.10"
    cand["probe"]["bandwidth_gbs"] = {"pinned_h2d": 53.0, "pageable_h2d": 12.0}  # -4 % (noise), -40 %
    cand["design_warnings"] = {"on": ["prompt_tokens 8,000 is a multiple of 64 on a hybrid model"]}
    cand["harness_version"] = "0.2.0"
    pools_b = {"on": {"pools": {"max_total_num_tokens": 100_000, "host_pool_tokens": 200_001}}}
    pools_c = {"on": {"pools": {"max_total_num_tokens": 100_000, "host_pool_tokens": 150_001}}}
    status_b = {n: as_status(st) for n, st in pools_b.items()}
    status_c = {n: as_status(st) for n, st in pools_c.items()}
    changes = night_changes(as_manifest(BASE), as_manifest(cand), status_b, status_c)
    texts = [c.text for c in changes]
    assert [c.category for c in changes] == [
        "build",
        "build",
        "server args",
        "server args",
        "env",
        "driver",
        "kernel",
        "probe",
        "pools",
        "design warnings",
        "harness",
    ]
    assert texts[0] == "build: on: commit: abc123 → def456" and texts[1] == "build: on: dirty: False → True"
    assert "server args: on: --hicache-io-backend: (none) → direct" in texts
    assert "server args: on: --hicache-mem-layout: layer_first → page_first" in texts  # --port moved: not listed
    assert "env: on: SGLANG_HICACHE_HOST_ALLOC: pin → (none)" in texts
    assert "probe: pageable_h2d GB/s (-40%): 20 → 12" in texts  # pinned -4 %: the probe's noise
    assert "pools: on: host_pool_tokens: 200001 → 150001" in texts
    assert night_changes(as_manifest(BASE), as_manifest(copy.deepcopy(BASE))) == []


def test_history_lists_what_changed_at_a_change_point(tmp_path, capsys):
    results_dir, reports_dir = tmp_path / "results", tmp_path / "reports"
    for night in range(8):
        ttft = 100 if night < 5 else 115  # a sustained step from night 6 on
        root = write_run(
            results_dir, f"202601{night + 1:02d}T000000Z-aaaaaa", {"on": cold_records(noisy(ttft, 6, seed=night))}
        )
        manifest = json.loads((root / "manifest.json").read_text())
        manifest["variants"][0]["build"] = {"version": "0.5.17", "git": {"commit": "new" if night >= 5 else "old"}}
        results.write_json_atomic(root / "manifest.json", manifest)
    h = H.collect(results_dir, "synth")
    assert list(h.night_changes) == [5]
    assert [c["text"] for c in h.night_changes[5]] == ["build: on: commit: old → new"]
    assert (
        cli_main(argparse.Namespace(scenario="synth", results_dir=str(results_dir), reports_dir=str(reports_dir))) == 0
    )
    out = capsys.readouterr().out
    assert "change point at 20260106T000000Z-aaaaaa: what changed since 20260105T000000Z-aaaaaa:" in out
    assert "  - build: on: commit: old → new" in out
    html = (reports_dir / "synth" / "history.html").read_text()
    assert 'id="night-changes"' in html and "build: on: commit: old → new" in html

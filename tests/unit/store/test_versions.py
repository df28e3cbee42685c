"""The one migration hook (harness/store/versions.py) and the typed summary and manifest it feeds."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from harness.store import results, versions
from harness.store.manifest import read_manifest
from harness.store.run_folder import load_run
from harness.store.stats import STAT_KEYS
from harness.store.summary import read_summary
from harness.store.variant_status import read_status

GOLDEN = Path(__file__).parents[2] / "golden" / "runs"


def _write(path: Path, data: dict) -> Path:
    path.write_text(json.dumps(data))
    return path


def test_a_version_1_summary_is_upgraded_on_read():
    """The golden runs' summaries are version 1 (written before p95 and the per-repeat figures):
    read, they are today's shape, every statistic key present and the per-repeat figures None."""
    raw = json.loads((GOLDEN / "healthy" / "on-r2" / "summary.json").read_text())
    assert raw["schema_version"] == 1 and "p95" not in json.dumps(raw)
    s = read_summary(GOLDEN / "healthy" / "on-r2" / "summary.json")
    assert s.schema_version == versions.CURRENT[versions.SUMMARY] == 2
    phase = s.workload("repeat_prefill").phases["repeat_after_evict"]
    assert tuple(phase.metrics["ttft_ms"].values) == STAT_KEYS
    assert phase.stat("ttft_ms", "p95") is None and phase.stat("ttft_ms") == pytest.approx(10.8549575)
    assert phase.metrics["itl_ms"] is None  # not measured stays None, never zeros
    assert all(w.derived_by_repeat is None for w in s.workloads.values())
    assert s.derived("parallel_prefixes", "second_pass_speedup") == pytest.approx(1.32275661)
    assert s.parity["verdict"] == "PASS"


def test_a_summary_of_today_is_read_as_written(tmp_path):
    data = {
        "schema_version": 2,
        "variant": "on",
        "state": "ok",
        "repeats": [0, 1],
        "workloads": {
            "decode": {
                "phases": {"decode": {"n": 2, "metrics": {"tpot_ms": dict.fromkeys(STAT_KEYS, 1.0)}}},
                "derived": {"tpot_ms": 1.0},
                "derived_by_repeat": {"tpot_ms": [1.0, None]},
                "history_stats_by_repeat": {},
            }
        },
    }
    s = read_summary(_write(tmp_path / "summary.json", data))
    assert s.workload("decode").derived_by_repeat == {"tpot_ms": (1.0, None)}
    assert s.raw["workloads"]["decode"]["derived"] == {"tpot_ms": 1.0}


def test_a_newer_version_is_refused_by_name(tmp_path):
    path = _write(tmp_path / "summary.json", {"schema_version": 3, "workloads": None})
    with pytest.raises(results.ResultsError, match=r"summary.json: schema_version 3 was written by a newer harness"):
        read_summary(path)
    path = _write(tmp_path / "status.json", {"schema_version": 2, "state": "ok"})
    with pytest.raises(results.ResultsError, match="newer harness"):
        read_status(path)


@pytest.mark.parametrize("version", [0, -1, "1", True, None])
def test_a_version_that_is_not_one_is_refused(tmp_path, version):
    shutil.copytree(GOLDEN / "healthy", tmp_path / "run")
    m = json.loads((tmp_path / "run" / "manifest.json").read_text())
    m["schema_version"] = version
    _write(tmp_path / "run" / "manifest.json", m)
    with pytest.raises(results.ResultsError, match="manifest.json: schema_version"):
        read_manifest(tmp_path / "run")


@pytest.mark.parametrize(
    ("where", "value", "message"),
    [
        (("workloads", "decode", "phases", "decode", "metrics", "tpot_ms", "p42"), 1.0, "unknown statistic 'p42'"),
        (("workloads", "decode", "phases", "decode", "metrics", "tpot_ms", "p50"), "fast", "not a number"),
        (("workloads", "decode", "derived", "tpot_ms"), [1], "not a number"),
        (("workloads", "decode", "phases"), [], "expected an object"),
        (("repeats",), "0,1", "expected a list of integers"),
    ],
)
def test_a_summary_of_another_shape_is_refused_by_file_and_key(tmp_path, where, value, message):
    data = json.loads((GOLDEN / "healthy" / "on-r2" / "summary.json").read_text())
    node = data
    for k in where[:-1]:
        node = node[k]
    node[where[-1]] = value
    with pytest.raises(results.ResultsError, match=message) as exc:
        read_summary(_write(tmp_path / "summary.json", data))
    assert "summary.json" in str(exc.value)


def test_the_manifest_parses_its_stored_scenario_once():
    m = read_manifest(GOLDEN / "healthy")
    assert m.names == ["off", "on-r2", "on-200gb"]
    assert m.variant("off").hicache is None and m.variant("on-r2").hicache.ratio == 2.0
    assert [w["kind"] for w in m.scenario.data["workloads"]][:2] == ["cold_prefill", "repeat_prefill"]
    assert m.scenario.data is m.scenario.data  # parsed once
    assert m.scenario.block("quality")["baseline_variant"] == "off"


def test_a_stored_scenario_that_is_not_yaml_reads_as_empty(tmp_path):
    shutil.copytree(GOLDEN / "healthy", tmp_path / "run")
    m = json.loads((tmp_path / "run" / "manifest.json").read_text())
    m["scenario"]["text"] = "workloads: [unclosed"
    _write(tmp_path / "run" / "manifest.json", m)
    stored = read_manifest(tmp_path / "run").scenario
    assert stored.data == {} and stored.block("verdict") == {}


def test_load_run_gives_typed_variants_and_not_run_without_a_status():
    run = load_run(GOLDEN / "interrupted")
    states = {v.name: v.status.state for v in run.variants}
    assert "not_run" in states.values() or all(v.paths.status.exists() for v in run.variants)
    ok = load_run(GOLDEN / "healthy")
    assert ok.variant("on-200gb").status.state == "startup_failed" and ok.variant("off").ok

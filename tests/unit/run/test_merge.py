"""`harness merge` on hand-built run folders: refusals (exit 2), which copy of a variant is kept,
completeness, hard links. The end-to-end merges of real shard runs are in test_shard_cli.py."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from harness.analysis.run_products import judge_run
from harness.cli import main
from harness.run.merge import MergeRefused, merge_runs
from harness.store import results, run_folder

HASH_A = "a" * 64
HASH_B = "b" * 64


def make_run(
    base: Path,
    run_id: str,
    variants: dict[str, str],
    *,
    scenario_hash: str = HASH_A,
    shard: tuple[int, int] | None = None,
    assigned: list[str] | None = None,
    support: list[str] | None = None,
    complete: bool = True,
    config: dict | None = None,
    all_variants: list[str] | None = None,
    rows: int = 2,
    kernel: str = "k",
) -> Path:
    run = results.RunPaths(base / "tiny" / run_id)
    run.root.mkdir(parents=True)
    manifest = {
        "schema_version": 1,
        "kind": "run",
        "created_at": run_id,
        "scenario": {"name": "tiny", "path": None, "text": "x", "hash": scenario_hash},
        "host": {"kernel": kernel},
        "sglang": {"version": "simulated"},
        "probe": None,
        "variants": [{"name": n, "dir": n, "config_hash": (config or {}).get(n, "c-" + n)} for n in variants],
    }
    if shard:
        manifest["shard"] = {
            "index": shard[0],
            "count": shard[1],
            "assigned": assigned or list(variants),
            "support": support or [],
            "all_variants": all_variants or list(variants),
        }
    results.write_json_atomic(run.manifest, manifest)
    for name, state in variants.items():
        vp = run.variant(name)
        vp.root.mkdir()
        results.write_json_atomic(
            vp.status,
            {"schema_version": 1, "variant": name, "state": state, "expect_met": state == "ok", "host": kernel},
        )
        if state in ("ok", "failed", "startup_failed"):
            results.write_json_atomic(
                vp.summary, {"schema_version": 1, "variant": name, "state": state, "workloads": None, "from": run_id}
            )
        with results.JsonlWriter(vp.requests) as w:
            for i in range(rows):
                w.append({"variant": name, "workload": "w", "phase": "p", "repeat": 0, "index": i, "warmup": False})
    results.write_json_atomic(run.complete if complete else run.interrupted, {"at": "t"})
    return run.root


def merge_cli(*args) -> int:
    return main(["merge", *map(str, args)])


ALL = ["off", "on-a", "on-b"]


def test_merges_shards_keeping_assigned_baseline(tmp_path, capsys):
    s1 = make_run(tmp_path / "in", "r1", {"off": "ok", "on-a": "ok"}, shard=(1, 2), all_variants=ALL, kernel="h1")
    s2 = make_run(
        tmp_path / "in",
        "r2",
        {"off": "ok", "on-b": "ok"},
        shard=(2, 2),
        assigned=["on-b"],
        support=["off"],
        all_variants=ALL,
        kernel="h2",
    )
    code = merge_cli(s2, s1, "--results-dir", tmp_path / "out")
    out = capsys.readouterr().out
    assert "merged:" in out and "dropped" not in out  # a support baseline copy is expected
    run = run_folder.load_run(next((tmp_path / "out" / "tiny").iterdir()))
    assert run.complete
    assert [v.name for v in run.variants] == ALL
    assert (
        json.loads(run.variant("off").paths.status.read_text())["host"] == "h1"
    )  # the assigned copy, not shard 2's support copy
    m = run.manifest.raw
    assert [(s["run_id"], s["host"]["kernel"], s["variants"]) for s in m["shards"]] == [
        ("r1", "h1", ["off", "on-a"]),
        ("r2", "h2", ["on-b"]),
    ]
    assert m["merge"]["dropped"] == [
        {"variant": "off", "run_id": "r2", "role": "support", "state": "ok", "kept_from": "r1"}
    ]
    assert "per-shard" in m["merge"]["parity"]
    # hard links (same file system): no copy of the data
    assert os.stat(run.variant("on-b").paths.requests).st_ino == os.stat(s2 / "on-b" / "requests.jsonl").st_ino
    assert all(len(run.requests(n)) == 2 for n in ALL)
    # its verdict, as a run writes one (a merged run had no verdict.json: compare judged it again)
    verdict = json.loads((run.paths.root / "verdict.json").read_text())
    assert {k: v for k, v in verdict.items() if k != "schema_version"} == judge_run(run.paths.root).to_json()
    assert code == verdict["exit_code"]  # the exit code is the merged night's verdict's (here: no figures, 4)
    assert json.loads((run.paths.root / "expectations.json").read_text())["checks"] == []


def test_refuses_different_scenarios(tmp_path, capsys):
    a = make_run(tmp_path, "r1", {"off": "ok"})
    b = make_run(tmp_path, "r2", {"on-a": "ok"}, scenario_hash=HASH_B)
    assert merge_cli(a, b, "--results-dir", tmp_path / "out") == 2
    err = capsys.readouterr().err
    assert "different scenarios" in err and HASH_A in err and HASH_B in err
    assert not (tmp_path / "out").exists()  # nothing written


def test_refuses_different_config_of_one_variant(tmp_path, capsys):
    a = make_run(tmp_path, "r1", {"off": "ok", "on-a": "ok"}, config={"on-a": "x" * 64})
    b = make_run(tmp_path, "r2", {"on-a": "ok"}, config={"on-a": "y" * 64})
    assert merge_cli(a, b, "--results-dir", tmp_path / "out") == 2
    err = capsys.readouterr().err
    assert "'on-a'" in err and "x" * 64 in err and "y" * 64 in err


def test_refuses_non_runs_and_merged_runs(tmp_path, capsys):
    assert merge_cli(tmp_path, "--results-dir", tmp_path / "out") == 2
    assert "not a run folder" in capsys.readouterr().err
    a = make_run(tmp_path / "in", "r1", {"off": "ok"})
    merged = merge_runs([a], tmp_path / "out").root
    with pytest.raises(MergeRefused, match="already a merged run"):
        merge_runs([merged], tmp_path / "out2")


def test_duplicate_variant_keeps_the_complete_then_latest_copy(tmp_path):
    # shard 2 ran twice (a CI retry): the first attempt was interrupted in on-b
    a = make_run(tmp_path / "in", "r1", {"off": "ok", "on-a": "ok"}, shard=(1, 2), all_variants=ALL)
    b1 = make_run(
        tmp_path / "in", "r2", {"on-b": "interrupted"}, shard=(2, 2), all_variants=ALL, complete=False, rows=1
    )
    b2 = make_run(tmp_path / "in", "r3", {"on-b": "ok"}, shard=(2, 2), all_variants=ALL)
    b3 = make_run(tmp_path / "in", "r0", {"on-b": "ok"}, shard=(2, 2), all_variants=ALL)  # older, complete
    root = merge_runs([a, b1, b2, b3], tmp_path / "out").root
    run = run_folder.load_run(root)
    assert run.variant("on-b").summary.raw["from"] == "r3"
    kept = {d["run_id"]: d["state"] for d in run.manifest.raw["merge"]["dropped"]}
    assert kept == {"r2": "interrupted", "r0": "ok"}
    # r2 itself was not complete, so neither is the merge
    assert not run.complete
    assert any("r2 is not complete" in p for p in run.manifest.raw["merge"]["problems"])


def test_incomplete_inputs_give_an_incomplete_merge(tmp_path, capsys):
    a = make_run(tmp_path / "in", "r1", {"off": "ok", "on-a": "ok"}, shard=(1, 3), all_variants=ALL)
    b = make_run(tmp_path / "in", "r2", {"on-b": "running"}, shard=(2, 3), all_variants=ALL, complete=False)
    assert merge_cli(a, b, "--results-dir", tmp_path / "out") == 1
    err = capsys.readouterr().err
    assert "shard(s) 3/3 missing" in err and "variant on-b is not complete (running)" in err
    root = next((tmp_path / "out" / "tiny").iterdir())
    assert not (root / results.COMPLETE_MARKER).exists()
    assert json.loads((root / "manifest.json").read_text())["merge"]["complete"] is False
    assert not (root / "verdict.json").exists()  # no verdict until every variant is there: INCOMPLETE


def test_unmet_expectation_exits_1(tmp_path):
    a = make_run(tmp_path / "in", "r1", {"off": "ok", "on-a": "failed"})
    assert merge_cli(a, "--results-dir", tmp_path / "out") == 1
    root = next((tmp_path / "out" / "tiny").iterdir())
    assert run_folder.load_run(root).complete
    verdict = json.loads((root / "verdict.json").read_text())
    assert verdict["outcome"] == "FAIL" and verdict["exit_code"] == 1, verdict


def test_an_inconclusive_merge_exits_4(tmp_path, capsys):
    """A merged night whose verdict is INCONCLUSIVE (an ON arm's parity NOT_EXERCISED) exited 0."""
    a = make_run(tmp_path / "in", "r1", {"off": "ok", "on-a": "ok"})
    summary = a / "on-a" / "summary.json"
    data = json.loads(summary.read_text())
    data["quality"] = {"parity": {"verdict": "NOT_EXERCISED", "reason": "no host-tier hit"}}
    results.write_json_atomic(summary, data)
    assert merge_cli(a, "--results-dir", tmp_path / "out") == 4
    assert "verdict: INCONCLUSIVE (exit 4)" in capsys.readouterr().out
    (root,) = (tmp_path / "out" / "tiny").iterdir()
    assert json.loads((root / "verdict.json").read_text())["outcome"] == "INCONCLUSIVE"


@pytest.mark.parametrize(
    "file, content",
    [
        ("manifest.json", [1, 2]),
        ("manifest.json", {"schema_version": 1, "kind": "run", "scenario": "x", "variants": []}),
        (
            "manifest.json",
            {
                "schema_version": 1,
                "kind": "run",
                "scenario": {"name": "tiny", "hash": "a"},
                "variants": [{"dir": "off"}],
            },
        ),
        ("off/status.json", []),
        ("off/summary.json", "hello"),
        ("off/summary.json", None),
    ],
)
def test_damaged_result_files_are_refused_naming_the_file(tmp_path, capsys, file, content):
    """A hand-edited or damaged input is exit 2 with the file's name, never a traceback, and
    nothing is written."""
    good = make_run(tmp_path / "in", "r1", {"off": "ok"}, shard=(1, 2), all_variants=["off", "on"])
    bad = make_run(tmp_path / "in", "r2", {"off": "ok", "on": "ok"}, shard=(2, 2), all_variants=["off", "on"])
    results.write_json_atomic(bad / file, content)
    assert merge_cli(good, bad, "--results-dir", tmp_path / "out") == 2
    err = capsys.readouterr().err
    assert str(bad / file) in err and "Traceback" not in err
    assert not (tmp_path / "out").exists()

"""The seeds' own figures, each from a scenario that reproduces it (scenarios/seeds/<seed>.yaml for
a GPU box, <seed>_sim.yaml its simulated twin run here): each twin runs on the simulator through
the real `harness run`, and the seed's figure comes out of the run folder -- mamba slots 33/65 and
the refused 2.55 GB mamba pool (seed 000), a chunked cudaHostRegister failing with "invalid
argument" and its rollback (seed 002), first-access vs repeated TTFT with a flag the simulator
declares unmodelled (seed 003), 42 vs 129 mamba host slots (seed 004)."""

from __future__ import annotations

import json
from pathlib import Path

from harness.report.memory_table import memory_table
from harness.report.view import load_view
from harness.scenario import load_scenario
from tests.conftest import only_run, run_harness

SEEDS = Path(__file__).resolve().parents[2] / "scenarios" / "seeds"


def _report_cells(run: Path, label: str) -> list[str]:
    """One row of the report's memory table, read from the run folder as the report reads it."""
    rows = {r.label: r for r in memory_table(load_view(run))}
    return [c.text for c in rows[label].cells]


def _run(seed: str, tmp_path: Path):
    proc = run_harness("run", SEEDS / f"{seed}_sim.yaml", "--results-dir", tmp_path / "r", "--no-report")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    run = only_run(tmp_path / "r")
    return proc, run, lambda v, f="status.json": json.loads((run / v / f).read_text())


def test_every_seed_has_a_scenario_and_a_twin_naming_what_it_reproduces():
    for seed in ("000", "002", "003", "004"):
        for name in (f"{seed}.yaml", f"{seed}_sim.yaml"):
            path = SEEDS / name
            assert path.read_text().startswith("#") and "eproduces" in path.read_text().split("\n\n")[0], name
            load_scenario(path)  # valid as written (the GPU ones with their ${VAR:-default}s)
    assert "## Seed scenarios" in (SEEDS.parent.parent / "docs" / "gpu.md").read_text()


def test_seed_000_mamba_slots_33_65_and_the_refused_mamba_pool(tmp_path):
    _, run, status = _run("000", tmp_path)
    assert _report_cells(run, "mamba slots (device / host)")[:2] == ["33 / 33", "33 / 65"]
    r1, r2 = status("on-r1")["pools"], status("on-r2-small-pool")["pools"]
    assert (r1["mamba_device_slots"], r1["mamba_host_slots"]) == (33, 33)
    assert (r2["mamba_device_slots"], r2["mamba_host_slots"]) == (33, 65)
    refused = status("on-r2")
    assert (refused["state"], refused["cause"]) == ("startup_failed", "host_memory")
    assert refused["pools"]["host_pool_tokens"] == 420001 and refused["pools"]["host_pool_gb"] == 2.58
    assert {k: refused["pools"]["refused_pool"][k] for k in ("kind", "tokens", "gb")} == {
        "kind": "mamba",
        "tokens": 65,
        "gb": 2.55,
    }


def test_seed_002_registration_failure_classified_with_its_rollback(tmp_path):
    _, _, status = _run("002", tmp_path)
    failed = status("on-chunk-1g-fails")
    assert (failed["state"], failed["cause"]) == ("startup_failed", "host_register")
    detail = failed["cause_detail"]
    assert (detail["error"], detail["chunk_limit"], detail["chunks_rolled_back"]) == ("invalid argument", 2**30, 2)
    (kv,) = status("on-chunk-1g")["pools"]["host_pools"]
    assert kv["gb"] == 5.24 and kv["setup_s"] is not None  # the server's setup time of the pool


def test_seed_003_first_access_and_repeated_ttft_with_an_unmodelled_flag(tmp_path):
    proc, run, status = _run("003", tmp_path)
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["sim_unmodelled_flags"] == {"ple-file": {"--ple-offload-backend": "file"}}
    assert "simulator: ple-file: accepted, not modelled: --ple-offload-backend file" in proc.stdout + proc.stderr
    assert status("ple-file", "server_info.json")["sim"]["unmodelled_flags"] == {"--ple-offload-backend": "file"}
    for v in ("main", "ple-file"):
        phases = status(v, "summary.json")["workloads"]["ple_ttft"]["phases"]
        for phase in ("cold", "repeat_device"):  # first access, then repeated: two measurements
            assert phases[phase]["metrics"]["ttft_ms"]["n"] == 2 and phases[phase]["metrics"]["ttft_ms"]["p50"] > 0


def test_seed_004_42_vs_129_mamba_host_slots(tmp_path):
    _, run, status = _run("004", tmp_path)
    assert _report_cells(run, "mamba slots (device / host)") == ["101 / 129", "101 / 42 (preflight: 129)"]
    native, kvcached = status("native"), status("kvcached")
    assert native["pools"]["mamba_host_slots"] == 129 and kvcached["pools"]["mamba_host_slots"] == 42
    assert {p["kind"]: p["gb"] for p in native["pools"]["host_pools"]} == {"kv": 7.40, "mamba": 6.64}
    # the preflight predicts native sglang's split for both: on kvcached the server disagrees
    assert native["preflight"]["prediction"]["mamba_host_slots"] == 129
    assert kvcached["preflight"]["prediction"]["mamba_host_slots"] == 129

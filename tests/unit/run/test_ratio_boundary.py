"""The safe-ratio boundary on seed 000's setup (scenarios/wsl_tp2_sim.yaml: 27B hybrid GDN shape,
TP2, int2 KV, 105,000-token GPU pool, 32 mamba slots, MemAvailable 15.9 GiB at load): where the
host pools stop starting (sglang's rule, the container's limit, the weight-load dip) and where
they start pushing out the page cache; each limit passes and the step above it fails."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.run import ratio_boundary as rb
from harness.run.gpu_pool import GIB
from harness.run.hostpool import GB, preflight_variant
from harness.scenario import load_scenario

SCENARIO = Path(__file__).resolve().parents[3] / "scenarios" / "wsl_tp2_sim.yaml"


@pytest.fixture(scope="module")
def record():
    scenario = load_scenario(SCENARIO)
    variant = next(v for v in scenario.expand_variants() if v.name == "on-r1")
    rec = preflight_variant(scenario, variant)
    assert rec["fits"] is True and rec["mem_available_kib"] == int(15.9 * 1024**2)
    return rec


def _host(gib=15.9, dip=0.0, page_cache_gib=0.0, cgroup_gb=None):
    return rb.HostFigures(
        mem_available_kib=int(gib * 1024**2),
        load_dip_kib=int(dip * 1024**2),
        page_cache_kib=int(page_cache_gib * 1024**2),
        cgroup_limit_bytes=int(cgroup_gb * GB) if cgroup_gb else None,
        cgroup_usage_bytes=0 if cgroup_gb else None,
        source="test",
    )


def test_seed_000_starts_up_to_1_5_and_the_mamba_pool_refuses_1_75(record):
    b = rb.boundary(record, _host(), step=0.25)
    assert b.knob == "ratio" and b.ranks_on_host == 2
    assert (b.starts.value, b.starts.next_value, b.starts.binding) == (1.5, 1.75, "sglang")
    # KV first, then the mamba pool against what is left (seed 000's log order)
    assert "the mamba host pool requests" in b.starts.reason
    # ratio 2 (the scenario's on-r2, declared startup_failed) lies above it; 1 and 1.3 below
    assert b.starts.value < 2 and b.starts.value >= 1.3


def test_a_finer_step_moves_the_limit_but_keeps_it_exact(record):
    b = rb.boundary(record, _host(), step=0.05)
    assert b.starts.value == pytest.approx(1.65) and b.starts.next_value == pytest.approx(1.7)


def test_the_load_dip_lowers_the_start_limit(record):
    dipped = rb.boundary(record, _host(dip=1.0), step=0.25)
    assert dipped.starts.value < 1.5
    assert "MemAvailable 14.90 GiB" in dipped.starts.reason  # the rule read it while weights loaded


def test_the_container_limit_binds_where_sglang_would_start(record):
    b = rb.boundary(record, _host(cgroup_gb=3.0), step=0.25)
    assert b.starts.binding == "cgroup" and "OOM-killed" in b.starts.reason
    assert b.starts.pinned_gb_at_value <= 3.0
    above = rb.boundary(record, _host(), step=0.25)
    assert b.starts.value < above.starts.value  # sglang alone would have started it


def test_the_page_cache_floor_binds_below_the_start_limit(record):
    """MemAvailable now 15.9 GiB, floor 12 GiB: every rank's pool may pin ~3.9 GiB."""
    b = rb.boundary(record, _host(page_cache_gib=12.0), step=0.25)
    assert b.keeps_page_cache.binding == "page_cache"
    assert b.keeps_page_cache.value < b.starts.value and b.safe == b.keeps_page_cache.value
    room = 15.9 * GIB - 12.0 * GIB
    assert b.keeps_page_cache.pinned_gb_at_value * GB <= room
    assert "page-cache floor" in b.keeps_page_cache.reason
    explicit = rb.boundary(record, _host(page_cache_gib=12.0), step=0.25, floor_gib=1.0)
    assert explicit.keeps_page_cache.value > b.keeps_page_cache.value and explicit.floor_source.startswith("preflight")


def test_nothing_starts_when_the_host_has_no_room(record):
    b = rb.boundary(record, _host(gib=10.5), step=0.25)
    assert b.starts.value is None and b.safe is None
    line = rb.boundary_line("on-r1", b.to_dict())
    assert "starts at no ratio of step 0.25" in line


def test_no_boundary_for_hicache_off_or_an_unknown_pool(record):
    assert rb.boundary({"prediction": {"hicache_enabled": False}}, _host(), step=0.25) is None
    unknown = {**record, "prediction": {**record["prediction"], "known": False}}
    assert rb.boundary(unknown, _host(), step=0.25) is None

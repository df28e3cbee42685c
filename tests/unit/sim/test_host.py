"""The simulated host (harness/sim/host.py): a pinned pool takes free memory, then the page cache,
then other processes' memory (swap); past swap or the container's limit the server is OOM-killed;
the /proc files it writes are what the sampler parses; idle swap-in only with pushed-out memory."""

from __future__ import annotations

import signal

import pytest

from harness.host import procfs
from harness.sim.host import GIB, CgroupOomKill, HostState, SimulatedHost
from harness.sim.testing import SimProcess


def _state(**kw):
    base = dict(
        mem_total=32 * GIB,
        mem_available=16 * GIB,
        page_cache=4 * GIB,
        swap_total=8 * GIB,
        load_dip=0,
        cgroup_limit=None,
    )
    return HostState(**{**base, **kw})


def test_a_pool_takes_free_memory_then_the_page_cache_then_swap():
    s = _state()
    s.pinned = 10 * GIB  # of 12 free: the page cache stays whole
    f = s.figures()
    assert (f["free"], f["cache"], f["swapped"]) == (2 * GIB, 4 * GIB, 0)
    s.pinned = 14 * GIB  # 2 past free: the page cache shrinks by 2
    f = s.figures()
    assert (f["free"], f["cache"], f["cache_lost"], f["swapped"]) == (0, 2 * GIB, 2 * GIB, 0)
    s.pinned = 19 * GIB  # 3 past free + cache: swapped out
    f = s.figures()
    assert (f["cache"], f["swapped"], f["over"], f["available"]) == (0, 3 * GIB, 0, 0)
    s.pinned = 30 * GIB
    assert s.figures()["over"] == 6 * GIB  # 14 past free + cache, 8 of swap


def test_the_load_dip_counts_while_weights_load_only():
    s = _state(load_dip=1 * GIB)
    s.loading = True
    assert s.figures()["available"] == 15 * GIB
    s.loading = False
    assert s.figures()["available"] == 16 * GIB


def test_files_parse_and_swap_in_only_with_pushed_out_memory(tmp_path):
    host = SimulatedHost(_state(), tmp_path)
    try:
        host.pin(10 * GIB)
        host.write()
        mi = procfs.read_meminfo(str(tmp_path / "meminfo"))
        assert mi["MemAvailable"] == 6 * 1024**2 and mi["Cached"] == 4 * 1024**2 and mi["SwapFree"] == 8 * 1024**2
        before = procfs.read_vmstat(str(tmp_path / "vmstat"))
        host.write()
        assert procfs.read_vmstat(str(tmp_path / "vmstat"))["pswpin"] == before["pswpin"] == 0
        host.pin(9 * GIB)  # 19 GiB pinned: 3 GiB of other processes' memory swapped out
        host._last -= 1.0  # one second at idle
        host.write()
        after = procfs.read_vmstat(str(tmp_path / "vmstat"))
        assert after["pswpin"] > 0 and after["pgmajfault"] > before["pgmajfault"]
        assert procfs.read_meminfo(str(tmp_path / "meminfo"))["SwapFree"] == 5 * 1024**2
    finally:
        host.close()
    assert procfs.read_meminfo(str(tmp_path / "meminfo"))["MemAvailable"] == 16 * 1024**2  # unpinned at exit


def test_past_the_container_limit_the_pool_is_oom_killed(tmp_path):
    host = SimulatedHost(_state(cgroup_limit=4 * GIB), tmp_path)
    try:
        host.pin(3 * GIB)
        with pytest.raises(CgroupOomKill, match="cgroup out of memory"):
            host.pin(2 * GIB)
    finally:
        host.close()


def test_the_simulator_is_killed_where_sglang_would_have_allocated(tmp_path, monkeypatch):
    """sglang's rule (host MemAvailable 64 GiB) grants the pool; the 2 GiB container does not."""
    monkeypatch.setenv("HARNESS_SIM_HOST_DIR", str(tmp_path))
    flags = ["--enable-hierarchical-cache", "--hicache-size", "3", "--sim-mem-available-gib", "64"]
    host = ["--sim-host-mem-total-gib", "128", "--sim-host-cgroup-limit-gib", "2"]
    with SimProcess(flags + host, wait_ready=False) as sim:
        code = sim.wait_exit(30)
    assert code == -signal.SIGKILL
    out = sim.output()
    assert "Allocating kv hierarchical KV host pool" in out and "oom-kill" in out
    assert "Not enough host memory" not in out
    with SimProcess(flags + ["--sim-host-mem-total-gib", "128", "--sim-host-cgroup-limit-gib", "4"]) as sim:
        assert "ready to roll" in sim.output()
        mi = procfs.read_meminfo(str(tmp_path / "meminfo"))
        assert abs(mi["MemAvailable"] - (64 * 1024**2 - 3e9 / 1024)) < 1024  # 3 GB pinned (+ one page)

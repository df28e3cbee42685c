"""The container's memory limit from a fake cgroup tree: v2 and v1, the named cgroup or the
mount's root (a container's namespaced view), the smallest limit over the ancestors, "no limit"."""

from __future__ import annotations

from harness.host import cgroup


def _v2(tmp_path, limits: dict[str, str], self_path="/kube/pod/ctr"):
    root = tmp_path / "cg"
    (root).mkdir()
    (root / "cgroup.controllers").write_text("cpu memory\n")
    for rel, limit in limits.items():
        d = root / rel if rel else root
        d.mkdir(parents=True, exist_ok=True)
        (d / "memory.max").write_text(limit + "\n")
        (d / "memory.current").write_text("1000\n")
    proc = tmp_path / "cgroup"
    proc.write_text(f"0::{self_path}\n")
    return proc, root


def test_v2_takes_the_smallest_limit_over_the_ancestors(tmp_path):
    proc, root = _v2(tmp_path, {"kube": "8000000000", "kube/pod": "4000000000", "kube/pod/ctr": "max"})
    got = cgroup.read_memory_limit(proc, root)
    assert got is not None and got.version == 2
    assert got.limit_bytes == 4_000_000_000 and got.path.endswith("kube/pod")
    assert got.headroom_bytes == 4_000_000_000 - 1000


def test_v2_namespaced_view_reads_the_mount_root(tmp_path):
    """Inside a container /proc/self/cgroup names a path the mount does not show: its root is it."""
    proc, root = _v2(tmp_path, {"": "2147483648"}, self_path="/not/mounted/here")
    got = cgroup.read_memory_limit(proc, root)
    assert got is not None and got.limit_bytes == 2147483648


def test_unlimited_is_no_limit(tmp_path):
    proc, root = _v2(tmp_path, {"": "max"}, self_path="/")
    assert cgroup.read_memory_limit(proc, root) is None
    assert cgroup.parse_limit("9223372036854771712", 1) is None  # v1's "no limit"
    assert cgroup.parse_limit("1073741824", 1) == 1073741824
    assert cgroup.parse_limit("garbage", 2) is None


def test_v1_memory_controller(tmp_path):
    root = tmp_path / "cg"
    d = root / "memory" / "docker" / "abc"
    d.mkdir(parents=True)
    (root / "memory" / "memory.limit_in_bytes").write_text("9223372036854771712\n")
    (d / "memory.limit_in_bytes").write_text("17179869184\n")
    (d / "memory.usage_in_bytes").write_text("1073741824\n")
    proc = tmp_path / "cgroup"
    proc.write_text("12:pids:/docker/abc\n4:memory:/docker/abc\n0::/\n")
    got = cgroup.read_memory_limit(proc, root)
    assert got is not None and got.version == 1
    assert (got.limit_bytes, got.usage_bytes) == (17179869184, 1073741824)


def test_no_cgroup_at_all(tmp_path):
    assert cgroup.read_memory_limit(tmp_path / "missing", tmp_path / "none") is None

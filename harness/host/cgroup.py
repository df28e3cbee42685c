"""The container's memory limit, from cgroups (v2 ``memory.max``, v1 ``memory.limit_in_bytes``).

sglang's host-memory check reads ``psutil.virtual_memory().available``, which is /proc/meminfo's
MemAvailable: the *host's* figure, not the container's (unless LXCFS rewrites /proc). A host pool
that passes that check can still be more than the container may hold; its pinned pages are charged
to the cgroup and cannot be reclaimed, so the kernel's OOM killer ends the server while it
allocates. `harness.run.ratio_boundary` takes the smaller of the two as the highest pool that starts.

Where the cgroup is: /proc/self/cgroup names it (v2: ``0::/path``; v1: ``N:memory:/path`` or a
line listing ``memory`` among its controllers). Inside a container the mount often shows the
container's own cgroup at the mount's root, so the named path is tried under the mount first and
the mount's root second; every ancestor's limit counts (the smallest binds). An unlimited cgroup
(v2 ``max``, v1 a value near 2**63) is no limit. Pure parsers take text; `read_memory_limit` takes
the roots as arguments so tests build a fake tree.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

V1_UNLIMITED = 1 << 62  # v1 reports "no limit" as a page-aligned value close to 2**63


@dataclass(frozen=True)
class CgroupMemory:
    """The memory limit binding this process's cgroup, and what the cgroup uses now (bytes)."""

    version: int  # 1 or 2
    path: str  # the cgroup directory whose limit binds
    limit_bytes: int
    usage_bytes: int | None

    @property
    def headroom_bytes(self) -> int:
        return self.limit_bytes - (self.usage_bytes or 0)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["headroom_bytes"] = self.headroom_bytes
        return d


def parse_limit(text: str, version: int) -> int | None:
    """One limit file's text → bytes, None for "no limit" (v2 ``max``; v1 >= 2**62) or garbage."""
    value = text.strip()
    if version == 2 and value == "max":
        return None
    try:
        n = int(value)
    except ValueError:
        return None
    if n < 0 or (version == 1 and n >= V1_UNLIMITED):
        return None
    return n


def cgroup_paths(proc_self_cgroup: str) -> dict[int, str]:
    """/proc/self/cgroup text → {2: unified path, 1: memory controller path} (those present)."""
    out: dict[int, str] = {}
    for line in proc_self_cgroup.splitlines():
        parts = line.strip().split(":", 2)
        if len(parts) != 3:
            continue
        hid, controllers, path = parts
        if hid == "0" and controllers == "":
            out[2] = path
        elif "memory" in controllers.split(","):
            out[1] = path
    return out


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="ascii", errors="replace")
    except OSError:
        return None


def _candidates(mount: Path, path: str) -> list[Path]:
    """The named cgroup under the mount and each of its ancestors; the mount's root last."""
    rel = [p for p in path.strip("/").split("/") if p]
    dirs = [mount.joinpath(*rel[:i]) for i in range(len(rel), 0, -1)]
    return [d for d in dirs if d.is_dir()] + [mount]


def _smallest(mount: Path, path: str, limit_file: str, usage_file: str, version: int) -> CgroupMemory | None:
    best: CgroupMemory | None = None
    for d in _candidates(mount, path):
        text = _read(d / limit_file)
        limit = parse_limit(text, version) if text is not None else None
        if limit is None or (best is not None and limit >= best.limit_bytes):
            continue
        usage_text = _read(d / usage_file)
        try:
            usage = int(usage_text.strip()) if usage_text is not None else None
        except ValueError:
            usage = None
        best = CgroupMemory(version=version, path=str(d), limit_bytes=limit, usage_bytes=usage)
    return best


def read_memory_limit(
    proc_self_cgroup: Path = Path("/proc/self/cgroup"), root: Path = Path("/sys/fs/cgroup")
) -> CgroupMemory | None:
    """The smallest memory limit over this process's cgroup and its ancestors, None when there is
    none (no cgroup, no limit, or nothing readable)."""
    text = _read(proc_self_cgroup)
    paths = cgroup_paths(text) if text is not None else {}
    if (root / "cgroup.controllers").exists() or (2 in paths and 1 not in paths):
        return _smallest(root, paths.get(2, "/"), "memory.max", "memory.current", 2)
    if (root / "memory").is_dir():
        return _smallest(root / "memory", paths.get(1, "/"), "memory.limit_in_bytes", "memory.usage_in_bytes", 1)
    return None

"""The one reader of /proc: pure parsers for /proc/meminfo, /proc/vmstat and /proc/cpuinfo,
vmstat-style rates from two readings, and the read_* helpers every other module calls.

Nothing here samples on a schedule; `harness.run.sampler` does that. The read_* helpers only open a
file and hand its text to the parsers, so tests feed captured text straight in.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Iterable, Mapping

# /proc/meminfo fields the harness records. Values are kiB except HugePages_* (page counts).
MEMINFO_FIELDS: tuple[str, ...] = (
    "MemTotal",
    "MemFree",
    "MemAvailable",
    "Buffers",
    "Cached",
    "Mlocked",
    "Shmem",
    "SwapTotal",
    "SwapFree",
    "HugePages_Total",
    "HugePages_Free",
    "HugePages_Rsvd",
    "HugePages_Surp",
    "Hugepagesize",
)


def parse_meminfo(text: str) -> dict[str, int]:
    """`/proc/meminfo` text → {field: value}; values in kiB ("kB" in the file is kiB), except
    HugePages_* which are counts. Every field present is kept; malformed lines are skipped."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        name, sep, rest = line.partition(":")
        if not sep:
            continue
        parts = rest.split()
        if not parts:
            continue
        try:
            out[name.strip()] = int(parts[0])
        except ValueError:
            continue
    return out


def parse_cpu_model(text: str) -> str | None:
    """`/proc/cpuinfo` text → the first "model name" (None when there is none, e.g. on arm64)."""
    for line in text.splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return None


def parse_vmstat(text: str) -> dict[str, int]:
    """`/proc/vmstat` text → {counter: value}. Kernels without swap omit pswpin/pswpout;
    callers treat a missing counter as unknown, not as 0."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) != 2:
            continue
        try:
            out[parts[0]] = int(parts[1])
        except ValueError:
            continue
    return out


def pick_fields(text: str, names: Iterable[str], sep: str) -> dict[str, int]:
    """Only ``names`` of a ``<name><sep> <value> ...`` text — /proc/meminfo (``sep`` ":") or
    /proc/vmstat (" ") — with the values `parse_meminfo` / `parse_vmstat` give for them, found by
    name instead of splitting every line (the sampler reads 7 of meminfo's ~55 fields and 4 of
    vmstat's ~180 counters every 0.5 s). A name absent or not followed by an integer is left out."""
    out: dict[str, int] = {}
    for name in names:
        tag = name + sep
        at = 0 if text.startswith(tag) else text.find("\n" + tag) + 1
        if at == 0 and not text.startswith(tag):
            continue
        end = text.find("\n", at)
        parts = text[at + len(tag) : end if end >= 0 else len(text)].split()
        if sep == " " and len(parts) != 1:
            continue  # as parse_vmstat: a counter line is exactly two fields
        try:
            out[name] = int(parts[0])
        except (IndexError, ValueError):
            continue
    return out


@dataclass(frozen=True)
class VmstatRates:
    """Per-second rates between two vmstat readings; None where the counter is absent."""

    pswpin_kib_s: float | None  # vmstat's `si`
    pswpout_kib_s: float | None  # vmstat's `so`
    pgmajfault_s: float | None
    pgfault_s: float | None


def _rate(prev: Mapping[str, int], cur: Mapping[str, int], key: str, dt_s: float) -> float | None:
    if key not in prev or key not in cur:
        return None
    # A decrease cannot happen on one boot; clamp rather than report a negative rate.
    return max(cur[key] - prev[key], 0) / dt_s


def vmstat_rates(
    prev: Mapping[str, int], cur: Mapping[str, int], dt_s: float, page_size_bytes: int = 4096
) -> VmstatRates:
    """Rates from two vmstat readings `dt_s` apart. pswpin/pswpout count pages; like vmstat's
    si/so they are converted to kiB/s with the page size."""
    if dt_s <= 0:
        raise ValueError(f"dt_s must be > 0, got {dt_s}")
    pages_to_kib = page_size_bytes / 1024
    swin = _rate(prev, cur, "pswpin", dt_s)
    swout = _rate(prev, cur, "pswpout", dt_s)
    return VmstatRates(
        pswpin_kib_s=None if swin is None else swin * pages_to_kib,
        pswpout_kib_s=None if swout is None else swout * pages_to_kib,
        pgmajfault_s=_rate(prev, cur, "pgmajfault", dt_s),
        pgfault_s=_rate(prev, cur, "pgfault", dt_s),
    )


def page_size_bytes() -> int:
    """The kernel page size (what pswpin/pswpout count)."""
    try:
        return os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return 4096


def read_meminfo(path: str = "/proc/meminfo", fields: Iterable[str] | None = None) -> dict[str, int]:
    """Every field, or only ``fields`` (`pick_fields`)."""
    with open(path, encoding="ascii", errors="replace") as f:
        text = f.read()
    return parse_meminfo(text) if fields is None else pick_fields(text, fields, ":")


def read_vmstat(path: str = "/proc/vmstat", fields: Iterable[str] | None = None) -> dict[str, int]:
    """Every counter, or only ``fields`` (`pick_fields`)."""
    with open(path, encoding="ascii", errors="replace") as f:
        text = f.read()
    return parse_vmstat(text) if fields is None else pick_fields(text, fields, " ")


def read_meminfo_field(name: str, path: str = "/proc/meminfo") -> int | None:
    """One /proc/meminfo field (kiB, or a count for HugePages_*); None when the file cannot be
    read or has no such field."""
    try:
        return read_meminfo(path).get(name)
    except OSError:
        return None


def read_mem_available_kib(path: str = "/proc/meminfo") -> int:
    """MemAvailable now, in kiB (0 when the kernel does not report it; OSError when the file
    cannot be read). On hosts whose MemTotal grows as memory is used (some lent GPU hosts, WSL2
    with dynamic memory) this reads low early on."""
    return read_meminfo(path).get("MemAvailable", 0)


def read_cpu_model(path: str = "/proc/cpuinfo") -> str | None:
    """The CPU model name; None when the file cannot be read or names none."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return parse_cpu_model(f.read())
    except OSError:
        return None

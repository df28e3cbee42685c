"""Read sglang server logs: why a startup failed, and the pool sizes it announced.

Pure functions over log text. The signatures come from sglang's own messages (see
docs in shared/sglang-facts.md and the seeds): CUDA faults are asynchronous, so the matching line
can be anywhere in the log; out-of-memory is matched as ``out of memory`` / ``oom-kill`` and
never as a bare ``oom`` (which matches ``bootstrap_room=None``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime

READY_LINE = "The server is fired up and ready to roll!"

# Causes a variant can fail with (status.json "cause").
HOST_MEMORY = "host_memory"
CUDA_FAULT = "cuda_fault"
OUT_OF_MEMORY = "out_of_memory"
HOST_REGISTER = "host_register"  # cudaHostRegister of the host pool failed (seed 002: "invalid argument")
ASSERTION = "assertion"
EXITED_BEFORE_READY = "exited_before_ready"
TIMEOUT = "timeout"
SERVER_DIED = "server_died"
SERVER_HUNG = "server_hung"  # alive but no longer serving (harness/run/serving_window.py)
UNKNOWN = "unknown"
PREFLIGHT = "preflight"  # refused by the harness's preflight before launch (no log to scan)
# The causes a variant may declare with ``expect_cause`` (scenario models read this one list).
STARTUP_CAUSES = (
    HOST_MEMORY,
    HOST_REGISTER,
    CUDA_FAULT,
    ASSERTION,
    OUT_OF_MEMORY,
    EXITED_BEFORE_READY,
    TIMEOUT,
    SERVER_DIED,
    PREFLIGHT,
    UNKNOWN,
)

# Only these are worth another attempt: memory pressure can pass; a CUDA fault or an assertion
# is the same on every try.
TRANSIENT_CAUSES = frozenset({HOST_MEMORY})

_HOST_MEMORY = re.compile(
    r"Not enough host memory available\.\s*Requesting\s+([\d.]+)\s*GB\s+but only have\s+"
    r"(-?[\d.]+)\s*GB free"
)
_CUDA_FAULT = re.compile(
    r"CUDA error: (an illegal memory access was encountered|misaligned address|"
    r"device-side assert triggered|unspecified launch failure|an illegal instruction was encountered)"
    r"|cudaErrorIllegalAddress|illegal memory access",
    re.IGNORECASE,
)
# sglang pool_host/common.py `_cuda_host_register`: 0.5.17 "... (rc=1, invalid argument) for ptr=0x..
# size=N; host buffer is not pinned ...", PR #36798's chunked form "... at offset=O size=S (total=T,
# chunk_limit=C); ..." (any chunk failing rolls the registered ones back before it raises).
_HOST_REGISTER = re.compile(r"cudaHostRegister failed \(rc=(-?\d+),\s*([^)]*)\)(.*)")
_REGISTER_FIELDS = re.compile(r"\b(offset|size|total|chunk_limit)=(\d+)")
# seed 000: the message itself raised, `cudaGetErrorString()` given an int, hiding the real failure
_REGISTER_MESSAGE_BROKEN = re.compile(r"TypeError:\s*cudaGetErrorString\(\)")
_UNREGISTER_FAILED = re.compile(r"cudaHostUnregister failed \(rc=(-?\d+)")
_OOM = re.compile(r"out of memory|oom-kill|OutOfMemoryError", re.IGNORECASE)
_ASSERTION = re.compile(r"\bAssertionError\b:?\s*(.*)")
_ERROR_LINE = re.compile(r"^\s*(?:[\w.]+\.)?(\w+(?:Error|Exception))\b:?\s*(.*)$")

_MAX_TOTAL = re.compile(r"max_total_num_tokens\s*=\s*(\d+)")
_HOST_POOL_NEW = re.compile(r"(?:Allocating\s+(\w+)\s+)?hierarchical KV host pool:\s*(\d+)\s*tokens,\s*([\d.]+)\s*GB")
_HOST_POOL_OLD = re.compile(r"Allocating\s+([\d.]+)\s*GB host memory for hierarchical KV cache")
# sglang 0.5.x mamba host pool: "Allocating 2.55 GB host memory for hierarchical Mamba cache (layout=...)"
_MAMBA_HOST_OLD = re.compile(r"Allocating\s+([\d.]+)\s*GB host memory for hierarchical Mamba cache")
# any of the host-pool allocation lines above (harness.server.startup_phases: where the host pool's time starts)
HOST_POOL_LINES = re.compile("|".join(p.pattern for p in (_HOST_POOL_NEW, _HOST_POOL_OLD, _MAMBA_HOST_OLD)))


@dataclass(frozen=True)
class StartupCause:
    """Why a server did not come up, read from its log."""

    cause: str
    detail: dict = field(default_factory=dict)
    line_number: int | None = None  # 1-based line of the matched text
    line: str | None = None


def _first(pattern: re.Pattern, lines: list[str]) -> tuple[int, re.Match] | None:
    for i, line in enumerate(lines):
        m = pattern.search(line)
        if m:
            return i, m
    return None


def classify_failure(log_text: str) -> StartupCause | None:
    """The cause of a failed startup as shown by the log, or None when the log shows none.

    Order matters: a host-memory refusal is the most specific message; a CUDA fault explains any
    assertion or error that follows it; out-of-memory before a generic assertion.
    """
    lines = log_text.splitlines()
    hit = _first(_HOST_MEMORY, lines)
    if hit:
        i, m = hit
        return StartupCause(
            HOST_MEMORY,
            {"requested_gb": float(m.group(1)), "free_gb": float(m.group(2))},
            i + 1,
            lines[i].strip(),
        )
    hit = _first(_HOST_REGISTER, lines)
    if hit:
        i, m = hit
        return StartupCause(HOST_REGISTER, _register_detail(m, log_text), i + 1, lines[i].strip())
    hit = _first(_REGISTER_MESSAGE_BROKEN, lines)
    if hit:
        i, _ = hit
        detail = {"rc": None, "error": None, "message_broken": True}
        return StartupCause(HOST_REGISTER, detail, i + 1, lines[i].strip())
    hit = _first(_CUDA_FAULT, lines)
    if hit:
        i, _ = hit
        return StartupCause(CUDA_FAULT, {}, i + 1, lines[i].strip())
    hit = _first(_OOM, lines)
    if hit:
        i, _ = hit
        return StartupCause(OUT_OF_MEMORY, {}, i + 1, lines[i].strip())
    hit = _first(_ASSERTION, lines)
    if hit:
        i, m = hit
        message = m.group(1).strip()
        if not message and i + 1 < len(lines):
            message = lines[i + 1].strip()
        return StartupCause(ASSERTION, {"message": message}, i + 1, lines[i].strip())
    # A traceback's final "SomethingError: message" line, the last one in the log.
    for i in range(len(lines) - 1, -1, -1):
        m = _ERROR_LINE.match(lines[i])
        if m and not lines[i].lstrip().startswith("File "):
            return StartupCause(UNKNOWN, {"error": m.group(1), "message": m.group(2).strip()}, i + 1, lines[i].strip())
    return None


def _register_detail(m: re.Match, log_text: str) -> dict:
    """A failed cudaHostRegister: rc, CUDA's error text and, for the chunked form, where it failed
    and how many whole chunks were registered (and rolled back) before it."""
    fields = {k: int(v) for k, v in _REGISTER_FIELDS.findall(m.group(3))}
    detail: dict = {"rc": int(m.group(1)), "error": m.group(2).strip(), **fields}
    if "offset" in fields and fields.get("chunk_limit"):
        detail["chunks_rolled_back"] = fields["offset"] // fields["chunk_limit"]
    detail["unregister_failures"] = len(_UNREGISTER_FAILED.findall(log_text))
    return detail


@dataclass(frozen=True)
class HostPool:
    kind: str  # "kv", "mamba", ... ("kv" for the older single-line form)
    tokens: int | None  # KV: tokens; mamba: request slots (sglang's "tokens" of that pool)
    gb: float | None  # None when only the slots were logged (seed 000's fork)
    source: str = "log"  # where `tokens` came from: "log" or "derived" (GB / bytes per slot)
    setup_s: float | None = None  # from this line to its rank's next line (allocate, touch, register)

    def to_json(self) -> dict:
        return {"kind": self.kind, "tokens": self.tokens, "gb": self.gb, "source": self.source, "setup_s": self.setup_s}


@dataclass(frozen=True)
class PoolSizes:
    max_total_num_tokens: int | None
    host_pools: tuple[HostPool, ...]
    mamba_device_slots: int | None = None
    refused: HostPool | None = None  # the pool sglang refused for host memory (its request)

    @property
    def mamba_host_slots(self) -> int | None:
        m = [p.tokens for p in self.host_pools if p.kind == "mamba"]
        return m[0] if m else None

    @property
    def host_pool_tokens(self) -> int | None:
        kv = [p.tokens for p in self.host_pools if p.kind in ("kv", "") and p.tokens is not None]
        return kv[0] if kv else None

    @property
    def host_pool_gb(self) -> float | None:
        gbs = [p.gb for p in self.host_pools if p.gb is not None]
        return round(sum(gbs), 4) if gbs else None

    def to_json(self) -> dict:
        return {
            "max_total_num_tokens": self.max_total_num_tokens,
            "host_pool_tokens": self.host_pool_tokens,
            "host_pool_gb": self.host_pool_gb,
            "host_pools": [p.to_json() for p in self.host_pools],
            "mamba_device_slots": self.mamba_device_slots,
            "mamba_host_slots": self.mamba_host_slots,
            "refused_pool": None if self.refused is None else self.refused.to_json(),
        }


# "[2026-11-30 03:38:43 TP1] ..." -> time and rank
_STAMP = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)(?:\s+(TP\d+|DP\d+\S*))?\]")
# device mamba slots: "Mamba Cache is allocated. max_mamba_cache_size: 9945, ..." (sglang, simulator)
_MAMBA_DEVICE = re.compile(r"Mamba Cache is allocated\.\s*max_mamba_cache_size:\s*(\d+)")
# seed 000's fork, its pre-launch check: "device[shape=(33, 24, 128, 128) slots=33]" and
# "host[shape=(65, 48, 1, 24, 128, 128) slots=65 stride0=37748736B]"
_FORK_SLOTS = re.compile(r"\b(device|host)\[shape=\([^)]*\)\s+slots=(\d+)")
# sglang PR #39436 (--hicache-mamba-size-gb; not in 0.5.17) boot line: "host mamba slots 565 cover ..."
_MAMBA_HOST_BOOT = re.compile(r"host mamba slots (\d+)\b")
_GB_ROUNDING = 0.005  # sglang prints GB with two decimals


def derive_slots(gb: float, bytes_per_slot: int | None) -> int | None:
    """The whole number of slots a logged ``X.XX GB`` pool holds at ``bytes_per_slot`` each, when
    the two-decimal rounding leaves exactly one candidate; None otherwise."""
    if not bytes_per_slot or bytes_per_slot <= 0:
        return None
    lo = max(0.0, (gb - _GB_ROUNDING) * 1e9 / bytes_per_slot)
    hi = (gb + _GB_ROUNDING) * 1e9 / bytes_per_slot
    first, last = int(-(-lo // 1)), int(hi // 1)
    return first if first == last else None


def _setup_seconds(lines: list[str], i: int) -> float | None:
    """Seconds from line ``i`` to the next stamped line of the same rank (1 s resolution)."""
    m = _STAMP.match(lines[i])
    if not m:
        return None
    t0, rank = datetime.fromisoformat(m.group(1)), m.group(2)
    for line in lines[i + 1 :]:
        n = _STAMP.match(line)
        if n and n.group(2) == rank:
            return (datetime.fromisoformat(n.group(1)) - t0).total_seconds()
    return None


def parse_pools(
    log_text: str, *, mamba_bytes_per_slot: int | None = None, kv_bytes_per_token: int | None = None
) -> PoolSizes:
    """Pool sizes the server logged: the GPU pool, each host pool (both sglang log formats), the
    mamba device and host slots, and the pool a host-memory refusal asked for.

    With TP, every rank logs its pools; the first occurrence of each kind is kept (the pools of
    the ranks are equal). sglang logs the mamba host pool in GB only: its slots come from a line
    that says them (seed 000's fork, sglang PR #39436's boot line), else are derived from the GB
    and ``mamba_bytes_per_slot`` (the model's config; ``source: "derived"``) when the rounding
    allows one answer.
    """
    lines = log_text.splitlines()
    max_total = None
    m = _MAX_TOTAL.search(log_text)
    if m:
        max_total = int(m.group(1))
    pools: dict[str, HostPool] = {}
    for i, line in enumerate(lines):
        m = _HOST_POOL_NEW.search(line)
        if m:
            kind = (m.group(1) or "kv").lower()
            if kind not in pools:
                pools[kind] = HostPool(kind, int(m.group(2)), float(m.group(3)), "log", _setup_seconds(lines, i))
            continue
        m = _HOST_POOL_OLD.search(line)
        if m and "kv" not in pools:
            pools["kv"] = HostPool("kv", None, float(m.group(1)), "log", _setup_seconds(lines, i))
            continue
        m = _MAMBA_HOST_OLD.search(line)
        if m and "mamba" not in pools:
            gb = float(m.group(1))
            slots = derive_slots(gb, mamba_bytes_per_slot)
            pools["mamba"] = HostPool(
                "mamba", slots, gb, "derived" if slots is not None else "log", _setup_seconds(lines, i)
            )
    said = {k: int(v) for k, v in reversed(_FORK_SLOTS.findall(log_text))}  # first occurrence wins
    boot = _MAMBA_HOST_BOOT.search(log_text)
    host_said = said.get("host") if "host" in said else (int(boot.group(1)) if boot else None)
    if host_said is not None:
        p = pools.get("mamba")
        pools["mamba"] = HostPool("mamba", host_said, p.gb if p else None, "log", p.setup_s if p else None)
    dev = _MAMBA_DEVICE.search(log_text)
    mamba_device = said.get("device") if "device" in said else (int(dev.group(1)) if dev else None)
    refused = None
    hit = _first(_HOST_MEMORY, lines)
    if hit:
        i, m = hit
        requested = float(m.group(1))
        # sglang allocates the KV pool first: a refusal after a KV pool line is the mamba pool's
        kind = "mamba" if any(_HOST_POOL_NEW.search(x) or _HOST_POOL_OLD.search(x) for x in lines[:i]) else "kv"
        per_unit = mamba_bytes_per_slot if kind == "mamba" else kv_bytes_per_token
        units = derive_slots(requested, per_unit)
        if host_said is not None and kind == "mamba":
            units = host_said
        refused = HostPool(kind, units, requested, "derived" if units is not None else "log")
    return PoolSizes(max_total, tuple(pools.values()), mamba_device, refused)


# sglang 0.5.17 HiRadixCache.load_back, when the device has no room for a host hit even after eviction
_DECLINED_LOAD_BACK = re.compile(r"load_back: FAILED to load (\d+) tokens for node \d+ even after eviction")


def declined_load_backs(log_text: str) -> list[int]:
    """The token counts of the load-backs sglang declined for want of device room (its warning
    line; the other declines — under 10 tokens, over the quota — log nothing)."""
    return [int(m.group(1)) for m in _DECLINED_LOAD_BACK.finditer(log_text)]


def is_ready_line_present(log_text: str) -> bool:
    return READY_LINE in log_text


def excerpt(log_text: str, line_number: int | None, context: int = 5, max_lines: int = 40) -> dict:
    """Lines around ``line_number`` (1-based), or the log's tail when there is no match."""
    lines = log_text.splitlines()
    if line_number is None:
        start = max(0, len(lines) - max_lines)
        end = len(lines)
    else:
        start = max(0, line_number - 1 - context)
        end = min(len(lines), line_number + context)
    return {"first_line": start + 1, "lines": lines[start:end], "match_line": line_number}

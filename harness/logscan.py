"""Read sglang server logs: why a startup failed, and the pool sizes it announced.

Pure functions over log text. The signatures come from sglang's own messages (see
docs in shared/sglang-facts.md and the seeds): CUDA faults are asynchronous, so the matching line
can be anywhere in the log; out-of-memory is matched as ``out of memory`` / ``oom-kill`` and
never as a bare ``oom`` (which matches ``bootstrap_room=None``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

READY_LINE = "The server is fired up and ready to roll!"

# Causes a variant can fail with (status.json "cause").
HOST_MEMORY = "host_memory"
CUDA_FAULT = "cuda_fault"
OUT_OF_MEMORY = "out_of_memory"
ASSERTION = "assertion"
EXITED_BEFORE_READY = "exited_before_ready"
TIMEOUT = "timeout"
SERVER_DIED = "server_died"
SERVER_HUNG = "server_hung"  # alive but no longer serving (harness/serving_window.py)
UNKNOWN = "unknown"

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
_OOM = re.compile(r"out of memory|oom-kill|OutOfMemoryError", re.IGNORECASE)
_ASSERTION = re.compile(r"\bAssertionError\b:?\s*(.*)")
_ERROR_LINE = re.compile(r"^\s*(?:[\w.]+\.)?(\w+(?:Error|Exception))\b:?\s*(.*)$")

_MAX_TOTAL = re.compile(r"max_total_num_tokens\s*=\s*(\d+)")
_HOST_POOL_NEW = re.compile(r"(?:Allocating\s+(\w+)\s+)?hierarchical KV host pool:\s*(\d+)\s*tokens,\s*([\d.]+)\s*GB")
_HOST_POOL_OLD = re.compile(r"Allocating\s+([\d.]+)\s*GB host memory for hierarchical KV cache")
# sglang 0.5.x mamba host pool: "Allocating 2.55 GB host memory for hierarchical Mamba cache (layout=...)"
_MAMBA_HOST_OLD = re.compile(r"Allocating\s+([\d.]+)\s*GB host memory for hierarchical Mamba cache")


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


@dataclass(frozen=True)
class HostPool:
    kind: str  # "kv", "mamba", ... ("kv" for the older single-line form)
    tokens: int | None
    gb: float


@dataclass(frozen=True)
class PoolSizes:
    max_total_num_tokens: int | None
    host_pools: tuple[HostPool, ...]

    @property
    def host_pool_tokens(self) -> int | None:
        kv = [p.tokens for p in self.host_pools if p.kind in ("kv", "") and p.tokens is not None]
        return kv[0] if kv else None

    @property
    def host_pool_gb(self) -> float | None:
        return round(sum(p.gb for p in self.host_pools), 4) if self.host_pools else None

    def to_json(self) -> dict:
        return {
            "max_total_num_tokens": self.max_total_num_tokens,
            "host_pool_tokens": self.host_pool_tokens,
            "host_pool_gb": self.host_pool_gb,
            "host_pools": [{"kind": p.kind, "tokens": p.tokens, "gb": p.gb} for p in self.host_pools],
        }


def parse_pools(log_text: str) -> PoolSizes:
    """Pool sizes the server logged: the GPU pool and each host pool (both sglang log formats).

    With TP, every rank logs its pools; the first occurrence of each kind is kept (the pools of
    the ranks are equal).
    """
    max_total = None
    m = _MAX_TOTAL.search(log_text)
    if m:
        max_total = int(m.group(1))
    pools: dict[str, HostPool] = {}
    for m in _HOST_POOL_NEW.finditer(log_text):
        kind = (m.group(1) or "kv").lower()
        pools.setdefault(kind, HostPool(kind, int(m.group(2)), float(m.group(3))))
    if "kv" not in pools:
        for m in _HOST_POOL_OLD.finditer(log_text):
            pools.setdefault("kv", HostPool("kv", None, float(m.group(1))))
    if "mamba" not in pools:
        for m in _MAMBA_HOST_OLD.finditer(log_text):
            pools.setdefault("mamba", HostPool("mamba", None, float(m.group(1))))
    return PoolSizes(max_total, tuple(pools.values()))


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

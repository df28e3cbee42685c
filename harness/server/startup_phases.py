"""Where a server start goes, from sglang's own log stamps and the harness's clocks. Pure.

sglang stamps every line ``[YYYY-mm-dd HH:MM:SS]`` (``[... TP0]`` from a scheduler), local time,
whole seconds. A start passes these landmarks, in this order (sglang 0.5.17; the simulator
prints the same lines, docs/simulator.md):

==================  =========================================================================
phase               from ... to the next landmark found
==================  =========================================================================
process_start       the harness spawned the server (its process's create time) ... imports,
                    server args, the scheduler processes, torch distributed
weight_load         ``Load weight begin``
memory_profiling    ``Load weight end``: the GPU memory left, the KV pool sized and allocated
                    (``KV Cache is allocated``, ``Memory pool end``)
cuda_graph          ``Capture cuda graph begin`` (and the scheduler's setup after its end)
host_pool           the first HiCache host-pool line (``Allocating ... host memory for
                    hierarchical ...`` / ``... hierarchical KV host pool: N tokens``): the host
                    pools' allocation and their ``cudaHostRegister`` (pinning; seed 002's
                    chunked registration) -- until the first stamped line after the last one
warm_up             ``max_total_num_tokens=`` without HiCache, else the line after the host
                    pools: tokenizer, HTTP server, the warm-up request
ready_detect        ``The server is fired up and ready to roll!`` ... the harness saw it ready
==================  =========================================================================

The phases add up to the harness's ``ready_s`` up to the stamps' resolution (1 s at each end:
phases are differences of whole-second stamps; a negative difference is 0). A landmark a log
does not have (no graphs with ``--disable-cuda-graph``, no host pool without HiCache) gives no
phase: its time goes to the phase before. sglang's own figures where it prints them are kept
beside (``reported``: ``Capture cuda graph end. Time elapsed: X s``, ``Load weight end.
elapsed=X s``). With TP every rank logs; each landmark's first stamp counts (the host pools'
end: the last).

Across nights, ``harness history`` plots each phase (``startup.<phase>_s``) with its change
points, and ``harness compare`` judges ``host_pool`` (`harness.compare.startup`): allocating and
pinning the host pool is what HiCache adds to a start, and a slower registration is a regression.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping
from typing import Any

from harness.server.logscan import HOST_POOL_LINES, READY_LINE

PROCESS_START = "process_start"
WEIGHT_LOAD = "weight_load"
MEMORY_PROFILING = "memory_profiling"
CUDA_GRAPH = "cuda_graph"
HOST_POOL = "host_pool"
WARM_UP = "warm_up"
READY_DETECT = "ready_detect"
PHASES = (PROCESS_START, WEIGHT_LOAD, MEMORY_PROFILING, CUDA_GRAPH, HOST_POOL, WARM_UP, READY_DETECT)

STAMP_RESOLUTION_S = 1.0  # sglang's datefmt "%Y-%m-%d %H:%M:%S"
HISTORY_PREFIX = "startup."  # history's series: startup.<phase>_s (lower is better)

# "[2026-11-30 03:38:43 TP1] ..." (an optional fraction, should a build print one)
_STAMP = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)([.,]\d+)?(?:\s[^\]]*)?\]")
_WEIGHT_BEGIN = re.compile(r"Load weight begin")
_WEIGHT_END = re.compile(r"Load weight end\.")
_GRAPH_BEGIN = re.compile(r"Capture (?:cuda graph|\w[\w ]* CUDA graph) begin")
_MAX_TOTAL = re.compile(r"max_total_num_tokens=\d+")
_READY = re.compile(re.escape(READY_LINE))
_GRAPH_ELAPSED = re.compile(
    r"Capture (?:cuda graph|\w[\w ]* CUDA graph) end\.\s*(?:Time elapsed:|elapsed=)\s*([\d.]+)\s*s"
)
_WEIGHT_ELAPSED = re.compile(r"Load weight end\.\s*elapsed=([\d.]+)\s*s")


def _stamp(line: str) -> float | None:
    m = _STAMP.match(line)
    if not m:
        return None
    t = time.mktime(time.strptime(m.group(1), "%Y-%m-%d %H:%M:%S"))  # local time, as sglang prints it
    return t + (float("0" + m.group(2).replace(",", ".")) if m.group(2) else 0.0)


def split_startup(log_text: str, spawned_at: float | None, ready_at: float | None) -> dict[str, Any]:
    """The phases of one start (see the module docstring) from its log and two wall-clock times
    of the harness (``time.time()``): when the server process was created and when the harness
    saw it ready (either None: the phases that need it are left out). ``missing``: the landmarks
    this log does not have."""
    lines = log_text.splitlines()
    stamps = [_stamp(line) for line in lines]
    first: dict[str, float] = {}

    def mark(name: str, pattern: re.Pattern) -> None:
        for line, t in zip(lines, stamps):
            if t is not None and pattern.search(line):
                first[name] = t
                return

    mark(WEIGHT_LOAD, _WEIGHT_BEGIN)
    mark(MEMORY_PROFILING, _WEIGHT_END)
    mark(CUDA_GRAPH, _GRAPH_BEGIN)
    pool_lines = [i for i, line in enumerate(lines) if stamps[i] is not None and HOST_POOL_LINES.search(line)]
    if pool_lines:
        first[HOST_POOL] = stamps[pool_lines[0]]
        after = next((stamps[j] for j in range(pool_lines[-1] + 1, len(lines)) if stamps[j] is not None), None)
        if after is not None:
            first[WARM_UP] = after
    else:
        mark(WARM_UP, _MAX_TOTAL)
    mark(READY_DETECT, _READY)
    marks: list[tuple[str, float]] = []
    if spawned_at is not None:
        marks.append((PROCESS_START, float(spawned_at)))
    marks += [(p, first[p]) for p in PHASES if p in first]
    if ready_at is not None and READY_DETECT in first:
        marks.append(("end", float(ready_at)))
    # in sglang's order; a landmark out of order (or within a stamp's second) gives 0, never less
    phases = {name: round(max(0.0, t1 - t0), 3) for (name, t0), (_, t1) in zip(marks, marks[1:])}
    reported: dict[str, float] = {}
    m = _GRAPH_ELAPSED.search(log_text)
    if m:
        reported[CUDA_GRAPH] = float(m.group(1))
    m = _WEIGHT_ELAPSED.search(log_text)
    if m:
        reported[WEIGHT_LOAD] = float(m.group(1))
    return {
        "phases": {p: phases[p] for p in PHASES if p in phases},
        "resolution_s": STAMP_RESOLUTION_S,
        "reported": reported,
        "missing": [p for p in PHASES[1:-1] if p not in first],
    }


def history_values(startup: Mapping | None) -> dict[str, float]:
    """{``startup.<phase>_s``: seconds} of one variant's status.json ``startup`` (``harness history``)."""
    phases = (startup or {}).get("phases") or {}
    return {f"{HISTORY_PREFIX}{p}_s": float(v) for p, v in phases.items() if isinstance(v, (int, float))}


def summary_line(startup: Mapping | None) -> str:
    """One line: ``process_start 12 s, weight_load 40 s, ...`` (empty without phases)."""
    phases = (startup or {}).get("phases") or {}
    return ", ".join(f"{p} {v:g} s" for p, v in phases.items())

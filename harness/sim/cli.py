"""Command line of the simulated server: sglang's launch flags plus the ``--sim-*`` knobs.

One job: turn argv into a typed :class:`SimArgs`, rejecting what sglang would reject.
sglang parses its flags with argparse, so an unknown flag is an argparse error and exit 2;
the harness relies on that (a typo in a scenario must fail the same way with either backend),
hence ``allow_abbrev=False`` and no catch-all.  Flags the simulator does not model are still
accepted and echoed in ``/get_server_info`` so a scenario written for the real server runs
unchanged.  ``main(argv)`` is the entry point for ``python -m harness.sim`` and ``harness sim``:
it parses, then hands the SimArgs to ``server.run``.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import shlex
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Sequence

from harness.core.sglang_defaults import SGLANG_DEFAULT_HICACHE_RATIO
from harness.sim.args import (
    DEFAULT_H2D_GBS,
    DEFAULT_STEP_MS_PER_REQUEST,
    DEFAULT_STORAGE_GB,
    DEFAULT_STORAGE_READ_GBS,
    DEFAULT_STORAGE_WRITE_GBS,
    SOURCE_ENV,
    SimArgs,
)
from harness.sim.faults import Fault, FaultArg, FaultError, parse_fault

HICACHE_LAYOUTS = ["layer_first", "page_first", "page_first_direct", "page_first_kv_split", "page_head"]
WRITE_POLICIES = ["write_through", "write_back", "write_through_selective"]
IO_BACKENDS = ["kernel", "direct"]
PREFETCH_POLICIES = ["best_effort", "wait_complete", "timeout"]
KV_CACHE_DTYPES = [
    "auto",
    "bf16",
    "bfloat16",
    "fp16",
    "float16",
    "fp8_e4m3",
    "fp8_e5m2",
    "fp4_e2m1",
    "int8",
    "int4",
    "int2",
]


# Flags of real sglang builds that the simulator accepts without modelling them, each with why it is
# here: a scenario written for such a build runs on the simulator unchanged instead of failing with
# argparse's exit 2, and the run says which of its flags changed nothing (the startup log,
# /get_server_info "unmodelled_flags", the run manifest and the console). Each takes one value.
UNMODELLED_FLAGS: dict[str, str] = {
    "--ple-offload-backend": (
        "sglang PR #50318 (seed 003): where Qwen's per-layer-embedding table lives (file: an mmap the "
        "GPU reads through HMM page faults); the simulator has no PLE table and takes no page faults"
    ),
}
HOST_SPLITS = ["each", "proportional"]


def unmodelled_flags(argv: Sequence[str]) -> dict[str, str]:
    """The declared unmodelled flags an argv gives, with their values (``--flag v`` or ``--flag=v``)."""
    found: dict[str, str] = {}
    for i, item in enumerate(argv):
        flag, eq, value = str(item).partition("=")
        if flag in UNMODELLED_FLAGS:
            found[flag] = value if eq else (str(argv[i + 1]) if i + 1 < len(argv) else "")
    return found


def _fault(text: str) -> tuple[Fault, FaultArg | None]:
    try:
        return parse_fault(text)
    except FaultError as exc:  # argparse prints it and exits 2, as for any malformed flag
        raise argparse.ArgumentTypeError(str(exc)) from exc


def _json_object(text: str) -> dict:
    """--hicache-storage-backend-extra-config: a JSON object (sglang json.loads it)."""
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not JSON: {exc}") from exc
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError("must be a JSON object")
    return value


def _positive(kind: type) -> Any:
    def conv(text: str) -> Any:
        value = kind(text)
        if value <= 0:
            raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
        return value

    return conv


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m harness.sim",
        description="SIMULATED sglang server (no GPU): sglang's launch flags and HTTP API, "
        "a page-granular two-tier prefix cache and a cost model.",
        allow_abbrev=False,
    )
    a = p.add_argument
    # --- model / server
    a("--model-path", "--model", dest="model_path", required=True)
    a("--tokenizer-path", default=None)
    a("--host", default="127.0.0.1")
    a("--port", type=int, default=30000)
    a("--tp-size", "--tp", "--tensor-parallel-size", dest="tp_size", type=_positive(int), default=1)
    a("--dp-size", "--dp", dest="dp_size", type=_positive(int), default=1)
    a("--pp-size", dest="pp_size", type=_positive(int), default=1)
    a("--served-model-name", default=None)
    a("--trust-remote-code", action="store_true")
    a("--skip-tokenizer-init", action="store_true")
    a("--load-format", default="auto")
    a("--dtype", default="auto")
    a("--kv-cache-dtype", choices=KV_CACHE_DTYPES, default="auto")
    a("--context-length", type=_positive(int), default=None)
    a("--random-seed", type=int, default=None)
    a("--log-level", default="info")
    a("--log-level-http", default=None)
    a("--log-requests", action="store_true")
    a("--enable-metrics", action="store_true")
    a("--enable-request-time-stats-logging", action="store_true")
    a("--enable-cache-report", action="store_true")
    a("--enable-deterministic-inference", action="store_true")
    a("--incremental-streaming-output", action="store_true")
    a("--stream-interval", type=_positive(int), default=1)
    a("--device", default="cuda")
    a("--base-gpu-id", type=int, default=0)
    a("--nnodes", type=_positive(int), default=1)
    a("--node-rank", type=int, default=0)
    a("--watchdog-timeout", type=float, default=300)
    a("--api-key", default=None)
    # --- memory and scheduling
    a("--mem-fraction-static", type=float, default=None)
    a("--max-total-tokens", type=_positive(int), default=None)
    a("--max-running-requests", type=_positive(int), default=None)
    a("--max-prefill-tokens", type=_positive(int), default=16384)
    a("--chunked-prefill-size", type=int, default=None)
    a("--page-size", type=_positive(int), default=None)
    a("--schedule-policy", default="fcfs")
    a("--schedule-conservativeness", type=float, default=1.0)
    a("--max-mamba-cache-size", type=_positive(int), default=None)
    a("--mamba-ssm-dtype", default=None)
    a("--disable-radix-cache", action="store_true")
    a("--disable-overlap-schedule", action="store_true")
    a("--disable-cuda-graph", action="store_true")
    a("--disable-custom-all-reduce", action="store_true")
    a("--enable-mixed-chunk", action="store_true")
    a("--cuda-graph-max-bs", type=int, default=None)
    a("--cuda-graph-max-bs-decode", type=int, default=None)
    a("--attention-backend", default=None)
    a("--prefill-attention-backend", default=None)
    a("--decode-attention-backend", default=None)
    a("--sampling-backend", default=None)
    a("--grammar-backend", default=None)
    a("--enable-torch-compile", action="store_true")
    # --- HiCache
    a("--enable-hierarchical-cache", "--enable-hicache", dest="enable_hierarchical_cache", action="store_true")
    a("--hicache-ratio", type=_positive(float), default=SGLANG_DEFAULT_HICACHE_RATIO)
    a("--hicache-size", type=float, default=0)
    a("--hicache-mem-layout", choices=HICACHE_LAYOUTS, default="page_first")
    a("--hicache-write-policy", choices=WRITE_POLICIES, default="write_through")
    a("--hicache-io-backend", choices=IO_BACKENDS, default="kernel")
    a("--hicache-storage-backend", default=None)
    a("--hicache-storage-prefetch-policy", choices=PREFETCH_POLICIES, default="best_effort")
    a("--hicache-storage-backend-extra-config", type=_json_object, default=None)
    for flag in UNMODELLED_FLAGS:
        a(flag, dest="unmodelled" + flag.replace("-", "_"), default=None, metavar="VALUE", help=argparse.SUPPRESS)
    # --- simulator-only knobs (documented in docs/simulator.md)
    a(
        "--sim-time-scale",
        type=float,
        default=1.0,
        help="multiplies every simulated duration (0.02 = 50x faster than the cost model)",
    )
    a(
        "--sim-host-mem-scale",
        type=float,
        default=0.0625,
        help="fraction of each host pool really allocated and touched, so MemAvailable moves",
    )
    a(
        "--sim-mem-available-gib",
        type=float,
        default=None,
        help="pretend MemAvailable is this many GiB for sglang's host-memory rule",
    )
    a(
        "--sim-host-split",
        choices=HOST_SPLITS,
        default="each",
        help="hybrid models with --hicache-size: give the KV and the mamba host pool each the whole size "
        "(each) or split it in proportion to their device pools' bytes, as sglang 0.5.17 does (proportional)",
    )
    # a simulated host (harness.sim.host): its /proc files in $HARNESS_SIM_HOST_DIR
    a("--sim-host-mem-total-gib", type=_positive(float), default=None, help="model a host of this MemTotal")
    a("--sim-host-page-cache-gib", type=float, default=0.0, help="the simulated host's page cache before launch")
    a("--sim-host-swap-gib", type=float, default=0.0, help="the simulated host's swap")
    a("--sim-host-load-dip-gib", type=float, default=0.0, help="MemAvailable's drop while weights load")
    a("--sim-host-cgroup-limit-gib", type=_positive(float), default=None, help="the container's memory limit")
    a("--sim-host-reserve-gib", type=float, default=10.0, help="the build's host-memory reserve (sglang: 10 GiB)")
    a(
        "--sim-storage-persist",
        action="store_true",
        help="keep the file backend's storage tier in its directory, as sglang's HiCacheFile does (survives a restart)",
    )
    a("--sim-startup-s", type=float, default=0.2, help="simulated weight-loading time (seconds)")
    a("--sim-capture-s", type=float, default=0.0, help="simulated CUDA-graph capture time (seconds)")
    a(
        "--sim-register-s-per-gb",
        type=float,
        default=0.0,
        metavar="S",
        help="seconds the host pool's cudaHostRegister (pinning) takes per GB, every rank's pool",
    )
    a("--sim-warmup-s", type=float, default=0.0, help="simulated time before the warm-up request (seconds)")
    a(
        "--sim-step-ms-per-request",
        type=float,
        default=DEFAULT_STEP_MS_PER_REQUEST,
        metavar="MS",
        help="each running request adds MS to a decode step (batch-size-dependent step time)",
    )
    a("--sim-storage-gb", type=_positive(float), default=DEFAULT_STORAGE_GB, help="storage tier capacity (GB of KV)")
    a(
        "--sim-storage-read-gbs",
        type=_positive(float),
        default=DEFAULT_STORAGE_READ_GBS,
        help="storage -> host prefetch bandwidth, GB/s",
    )
    a(
        "--sim-storage-write-gbs",
        type=_positive(float),
        default=DEFAULT_STORAGE_WRITE_GBS,
        help="host -> storage backup bandwidth, GB/s",
    )
    a(
        "--sim-h2d-gbs",
        type=_positive(float),
        default=DEFAULT_H2D_GBS,
        help="the pretend host's pinned host -> device bandwidth, GB/s (a host hit's load-back)",
    )
    a(
        "--sim-fault",
        action="append",
        type=_fault,
        default=[],
        metavar="NAME[=ARG]",
        help="fault switch, repeatable (docs/simulator.md): " + ", ".join(f.usage for f in Fault),
    )
    return p


SIM_DESTS = (
    "sim_time_scale",
    "sim_host_mem_scale",
    "sim_mem_available_gib",
    "sim_startup_s",
    "sim_capture_s",
    "sim_register_s_per_gb",
    "sim_warmup_s",
    "sim_fault",
    "sim_step_ms_per_request",
    "sim_storage_gb",
    "sim_storage_read_gbs",
    "sim_storage_write_gbs",
    "sim_h2d_gbs",
    "sim_host_split",
    "sim_host_mem_total_gib",
    "sim_host_page_cache_gib",
    "sim_host_swap_gib",
    "sim_host_load_dip_gib",
    "sim_host_cgroup_limit_gib",
    "sim_host_reserve_gib",
    "sim_storage_persist",
)


def parse_args(argv: Sequence[str] | None) -> SimArgs:
    """Parse argv (argparse exits 2 on unknown or malformed flags, as sglang does)."""
    ns = vars(build_parser().parse_args(argv))
    sim = {k: ns.pop(k) for k in SIM_DESTS}
    unmodelled = {flag: ns.pop("unmodelled" + flag.replace("-", "_")) for flag in UNMODELLED_FLAGS}
    faults: dict[Fault, FaultArg | None] = {}
    for fault, arg in sim["sim_fault"]:
        faults.setdefault(fault, arg)  # a fault given twice: the first one counts
    return SimArgs(
        sglang=ns,
        time_scale=max(0.0, sim["sim_time_scale"]),
        host_mem_scale=min(1.0, max(0.0, sim["sim_host_mem_scale"])),
        mem_available_gib=sim["sim_mem_available_gib"],
        startup_s=max(0.0, sim["sim_startup_s"]),
        capture_s=max(0.0, sim["sim_capture_s"]),
        register_s_per_gb=max(0.0, sim["sim_register_s_per_gb"]),
        warmup_s=max(0.0, sim["sim_warmup_s"]),
        faults=faults,
        step_ms_per_request=max(0.0, sim["sim_step_ms_per_request"]),
        storage_gb=sim["sim_storage_gb"],
        storage_read_gbs=sim["sim_storage_read_gbs"],
        storage_write_gbs=sim["sim_storage_write_gbs"],
        h2d_gbs=sim["sim_h2d_gbs"],
        host_split=sim["sim_host_split"],
        host_mem_total_gib=sim["sim_host_mem_total_gib"],
        host_page_cache_gib=max(0.0, sim["sim_host_page_cache_gib"]),
        host_swap_gib=max(0.0, sim["sim_host_swap_gib"]),
        host_load_dip_gib=max(0.0, sim["sim_host_load_dip_gib"]),
        host_cgroup_limit_gib=sim["sim_host_cgroup_limit_gib"],
        host_reserve_gib=max(0.0, sim["sim_host_reserve_gib"]),
        storage_persist=sim["sim_storage_persist"],
        unmodelled={flag: value for flag, value in unmodelled.items() if value is not None},
    )


# The simulated *build*: more ``--sim-*`` flags from the environment, after the command line (a
# flag given twice: the last value counts; faults add up). A scenario configures the server (its
# config hash covers the command line); the code under test is not in it -- for real sglang that is
# the checkout on PYTHONPATH. This variable plays that part for the simulator: a "slower build" or
# a "bug" that a comparison should flag as a regression, not as a changed configuration.
# benchmarks/verdict_power.py uses it; /get_server_info reports the values in effect.
BUILD_ENV = "HARNESS_SIM_BUILD"


def build_flags(environ: Mapping[str, str]) -> list[str]:
    """The ``--sim-*`` flags of ``$HARNESS_SIM_BUILD``; anything else there is an argparse error."""
    flags = shlex.split(environ.get(BUILD_ENV, ""))
    bad = [f for f in flags if f.startswith("-") and not f.startswith("--sim-")]
    if bad:
        build_parser().error(f"{BUILD_ENV} may hold only --sim-* flags, got {' '.join(bad)}")
    return flags


# The name a sim build's checkout assigns its flags to, in its sglang/__init__.py.
SOURCE_BUILD_NAME = "HARNESS_SIM_BUILD"
_SOURCE_INIT_MAX_BYTES = 1 << 20


def source_build_flags(environ: Mapping[str, str]) -> list[str]:
    """The ``--sim-*`` flags the checkout at ``$HARNESS_SIM_SOURCE`` declares: a string literal
    assigned to ``HARNESS_SIM_BUILD`` in its ``sglang/__init__.py`` (read with ``ast``, never
    imported); none when the variable is unset, the file has no such assignment or cannot be read.
    Anything but a ``--sim-*`` flag there is an argparse error, like ``$HARNESS_SIM_BUILD``'s."""
    folder = environ.get(SOURCE_ENV)
    if not folder:
        return []
    init = Path(folder) / "sglang" / "__init__.py"
    try:
        with open(init, "rb") as fh:
            tree = ast.parse(fh.read(_SOURCE_INIT_MAX_BYTES))
    except (OSError, SyntaxError, ValueError):
        return []
    value = None
    for node in tree.body:
        if (
            isinstance(node, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == SOURCE_BUILD_NAME for t in node.targets)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
        ):
            value = node.value.value  # the last assignment counts, as on import
    if value is None:
        return []
    return build_flags({BUILD_ENV: value})


def main(argv: Sequence[str] | None = None) -> int:
    """Run the simulated server; returns the process exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv + source_build_flags(os.environ) + build_flags(os.environ))
    from harness.sim.server import run  # late import: --help and flag errors stay fast

    return run(args)

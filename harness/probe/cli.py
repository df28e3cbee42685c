"""`harness probe` (also `python -m harness.probe`): run the platform probes, print a short
summary, optionally write the result as JSON."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any, Mapping

from harness.probe.run import BANDWIDTH_KINDS, GIB, MIB, ProbeOptions, run_probes
from harness.store.results import write_text_atomic


def _fmt(v: float | None, spec: str = ".1f") -> str:
    return "n/a" if v is None else format(v, spec)


def _kw_text(r: Mapping[str, Any] | None) -> str:
    if not r:
        return "not run"
    if r.get("ok"):
        return "ok"
    return f"FAILED ({r.get('error')})"


def summary(res: Mapping[str, Any]) -> str:
    """A short human summary of a run_probes result."""
    lines = [
        f"kernel {res.get('kernel_release')}  WSL2: {'yes' if res.get('wsl') else 'no'}",
    ]
    disk = res.get("disk")
    if disk:
        lines.append(
            f"disk {disk.get('path')}: write {_fmt(disk.get('write_gbs'), '.2f')} GB/s, read "
            f"{_fmt(disk.get('read_gbs'), '.2f')} GB/s ({disk.get('method')}, {disk.get('nbytes', 0) / MIB:.0f} MiB)"
            if disk.get("ok")
            else f"disk {disk.get('path')}: FAILED ({disk.get('error')})"
        )
    if not res.get("gpu_present"):
        lines.append(f"GPU: none ({res.get('reason')})")
        if res.get("torch_version"):
            lines.append(f"torch {res.get('torch_version')}")
        return "\n".join(lines)
    lines.append(
        f"torch {res.get('torch_version')}, CUDA runtime {res.get('cuda_runtime')}, "
        f"driver API {res.get('driver_version')} (NVIDIA driver {res.get('nvidia_driver') or '?'}), "
        f"cupy {res.get('cupy_version') or 'absent'}"
    )
    for d in res.get("devices") or []:
        lines.append(
            f"GPU {d.get('index')}: {d.get('name')}, {d.get('total_mem_gib')} GiB; "
            f"pageable access {d.get('pageable_memory_access')}, uses host page tables "
            f"{d.get('pageable_memory_access_uses_host_page_tables')} -> {d.get('hmm_or_ats')}; "
            f"host pointer for registered mem {d.get('can_use_host_pointer_for_registered_mem')}"
        )
    kw = res.get("host_register_kernel_write") or {}
    if kw:
        lines.append(
            "kernel write to cudaHostRegister memory: " + ", ".join(f"flags {k} {_kw_text(v)}" for k, v in kw.items())
        )
    if res.get("host_alloc_kernel_write") is not None:
        lines.append(f"kernel write to cudaHostAlloc memory: {_kw_text(res.get('host_alloc_kernel_write'))}")
    bw = res.get("bandwidth_gbs") or {}
    opts = res.get("options") or {}
    if any(v is not None for v in bw.values()) or res.get("bandwidth"):
        nb = opts.get("nbytes")
        head = f"bandwidth GB/s ({nb / GIB:.2f} GiB, median of {opts.get('repeats')}):" if nb else "bandwidth GB/s:"
        lines.append(
            head
            + " "
            + " | ".join(f"{k} H2D {_fmt(bw.get(f'{k}_h2d'))} D2H {_fmt(bw.get(f'{k}_d2h'))}" for k in BANDWIDTH_KINDS)
        )
    reg = res.get("register_seconds")
    if reg:
        if reg.get("ok"):
            lines.append(
                f"cudaHostRegister of {reg.get('size_gib')} GiB: {_fmt(reg.get('seconds'), '.3f')} s"
                + (" (capped by MemAvailable)" if reg.get("capped") else "")
            )
        else:
            lines.append(f"cudaHostRegister time: FAILED ({reg.get('error')})")
    chunks = res.get("register_chunks")
    if chunks:
        v = chunks.get("value") or {}
        if chunks.get("ok"):
            lines.append(
                "cudaHostRegister by chunk size: "
                + " | ".join(
                    f"{p['chunk_gib']:g} GiB x{p['chunks']}: {_fmt(p['register_seconds'], '.3f')} s"
                    for p in v.get("plans") or []
                )
                + f"; rollback of {(v.get('rollback') or {}).get('rolled_back_chunks')} chunks "
                f"{_fmt((v.get('rollback') or {}).get('seconds'), '.3f')} s"
            )
        else:
            lines.append(f"cudaHostRegister by chunk size: FAILED ({chunks.get('error')})")
    faults = res.get("gpu_page_faults") or {}
    if faults:
        lines.append(f"GPU page faults: {faults.get('count') if faults.get('exposed') else faults.get('reason')}")
    lines.append("all probes ok" if res.get("ok") else f"{len(res.get('errors') or [])} probe(s) failed")
    return "\n".join(lines)


def write_json(path: str | os.PathLike, obj: Any) -> None:
    """Atomic JSON write (the project's one writer: temp file, fsync, os.replace)."""
    write_text_atomic(Path(path), json.dumps(obj, indent=2, default=str) + "\n")


def _size(text: str) -> int:
    """'1073741824', '1GiB', '256MiB', '512M', '2G' -> bytes."""
    t = text.strip().lower().replace(" ", "")
    units = {
        "gib": GIB,
        "g": GIB,
        "gb": 10**9,
        "mib": MIB,
        "m": MIB,
        "mb": 10**6,
        "kib": 1024,
        "k": 1024,
        "kb": 1000,
        "b": 1,
    }
    for suffix in sorted(units, key=len, reverse=True):
        if t.endswith(suffix):
            num = t[: -len(suffix)]
            break
    else:
        suffix, num = "b", t
    try:
        value = int(float(num) * units[suffix])
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a size: {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"size must be positive: {text!r}")
    return value


def _gib_list(text: str) -> tuple[float, ...]:
    """'1,16,256' -> (1.0, 16.0, 256.0); each > 0."""
    try:
        values = tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of GiB: {text!r}") from None
    if not values or any(v <= 0 for v in values):
        raise argparse.ArgumentTypeError(f"chunk sizes must be positive: {text!r}")
    return values


def build_parser(prog: str = "harness probe") -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog=prog, description="Probe what this host's GPU can do with host memory.")
    ap.add_argument("--json", metavar="PATH", help="write the result as JSON here")
    ap.add_argument(
        "--bytes",
        type=_size,
        default=None,
        help="bandwidth buffer size, e.g. 1GiB or 268435456 (default 1 GiB; --quick 256 MiB)",
    )
    ap.add_argument(
        "--register-gib",
        type=float,
        default=None,
        help="buffer registered for the timing (default 8; --quick 1); capped at half of MemAvailable",
    )
    ap.add_argument(
        "--register-chunks-gib",
        type=_gib_list,
        default=None,
        metavar="G,G,..",
        help="chunk sizes for the chunked cudaHostRegister timing (seed 002; default 1,16,256)",
    )
    ap.add_argument("--repeats", type=int, default=None, help="timed copies per direction (default 5; --quick 3)")
    ap.add_argument("--quick", action="store_true", help="smaller buffers and fewer repeats")
    ap.add_argument("--timeout", type=float, default=180.0, help="hard limit per probe subprocess, seconds")
    ap.add_argument("--device", type=int, default=0, help="CUDA device index to probe")
    ap.add_argument(
        "--storage-dir",
        default=None,
        help="directory whose disk the disk-bandwidth probe measures (the storage tier's; default: temp dir)",
    )
    ap.add_argument(
        "--disk-bytes", type=_size, default=None, help="disk probe file size (default 256MiB; --quick 64MiB)"
    )
    ap.add_argument("-q", "--quiet", action="store_true", help="no progress lines on stderr")
    return ap


def main(argv: list[str] | None = None) -> int:
    """`harness probe`: run the probes, print a summary, optionally write JSON. Exit 0 when the
    probe ran (even without a GPU or with failed checks: those are findings), 2 on bad usage,
    1 when the JSON cannot be written."""
    args = build_parser().parse_args(argv)
    opts = ProbeOptions(
        nbytes=args.bytes,
        register_gib=args.register_gib,
        repeats=args.repeats,
        quick=args.quick,
        timeout_s=args.timeout,
        device=args.device,
        verbose=not args.quiet,
        storage_dir=args.storage_dir,
        disk_bytes=args.disk_bytes,
        **({"register_chunks_gib": args.register_chunks_gib} if args.register_chunks_gib else {}),
    )
    res = run_probes(opts)
    print(summary(res))
    if args.json:
        try:
            write_json(args.json, res)
        except OSError as e:
            print(f"error: cannot write {args.json}: {e}", file=sys.stderr)
            return 1
        print(f"wrote {args.json}")
    return 0

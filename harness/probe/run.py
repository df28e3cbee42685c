"""Run the platform probes and assemble one JSON result: what this host's GPU can do with host
memory.

`run_probes(options)` records WSL or not, the driver/CUDA versions, per-device HMM/ATS
attributes (seed 003), whether a GPU kernel can store to cudaHostRegister-ed memory with each
flag 0..3 and to cudaHostAlloc memory (seed 000), copy bandwidth for pinned, registered and
pageable buffers, how long registering a large buffer takes, and the sequential bandwidth of the
disk under the storage tier's directory (`harness.probe.disk`, in this process, GPU or not). Every GPU probe runs in its
own subprocess (`harness.probe.worker`) under a hard timeout, so one failure, hang or poisoned
CUDA context cannot stop the others. Without torch or CUDA the result says so
(`gpu_present: false`, `reason`).
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import importlib.util
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Mapping

from harness.host import procfs
from harness.host.fingerprint import is_wsl
from harness.probe.disk import disk_bandwidth

SCHEMA_VERSION = 1
REGISTER_FLAGS = (0, 1, 2, 3)  # Default, Portable, Mapped, Portable|Mapped
BANDWIDTH_KINDS = ("pinned", "registered", "pageable")
REASON_NO_TORCH = "no GPU: torch not installed"
REASON_NO_CUDA = "torch.cuda.is_available() is False"
GIB = 1 << 30
MIB = 1 << 20


@dataclasses.dataclass
class ProbeOptions:
    """What to measure. `quick` only changes the defaults of fields left as None."""

    nbytes: int | None = None  # bandwidth buffer (default 1 GiB; quick 256 MiB)
    register_gib: float | None = None  # register-time buffer (default 8; quick 1)
    repeats: int | None = None  # timed copies per direction (default 5; quick 3)
    quick: bool = False
    timeout_s: float = 180.0  # hard limit per probe subprocess
    device: int = 0
    kwrite_bytes: int = 1 * MIB
    register_mem_fraction: float = 0.5  # cap: this fraction of MemAvailable
    register_chunks_gib: tuple[float, ...] = (1.0, 16.0, 256.0)  # seed 002: chunk sizes timed
    verbose: bool = False  # progress lines on stderr
    storage_dir: str | None = None  # the disk probe's directory (default: the temp directory)
    disk_bytes: int | None = None  # the disk probe's file (default 256 MiB; quick 64 MiB; 0: no disk probe)

    def resolved(self) -> "ProbeOptions":
        q = self.quick
        return dataclasses.replace(
            self,
            nbytes=int(self.nbytes if self.nbytes is not None else (256 * MIB if q else GIB)),
            register_gib=float(self.register_gib if self.register_gib is not None else (1.0 if q else 8.0)),
            repeats=int(self.repeats if self.repeats is not None else (3 if q else 5)),
            disk_bytes=int(self.disk_bytes if self.disk_bytes is not None else (64 * MIB if q else 256 * MIB)),
            storage_dir=self.storage_dir or tempfile.gettempdir(),
        )


# ---------------------------------------------------------------- pure helpers


def classify_pageable_access(pageable: int | None, uses_host_page_tables: int | None) -> str | None:
    """cudaDevAttrPageableMemoryAccess (88) and ...UsesHostPageTables (100) → "HMM"|"ATS"|"none".

    88 = 1 and 100 = 1: ATS (the GPU walks the host page tables, e.g. GB10/Grace);
    88 = 1 and 100 = 0: HMM (the driver faults pages in one by one: slow for scattered reads);
    88 = 0: no pageable access. None when attribute 88 (or 100, if 88 = 1) is unknown.
    """
    if pageable is None:
        return None
    if not pageable:
        return "none"
    if uses_host_page_tables is None:
        return None
    return "ATS" if uses_host_page_tables else "HMM"


def gpu_page_faults(devices: list[dict], reason: str | None = None) -> dict:
    """Seed 003: GPU page faults on pageable host memory, where this platform exposes a count.
    It never does to this probe: counting them needs CUPTI's unified-memory counters (what
    ``nsys --cuda-um-gpu-page-faults`` reads), so the answer is why not, per device class."""
    if reason is not None:
        return {"exposed": False, "count": None, "reason": f"not exposed: {reason}"}
    kinds = {d.get("hmm_or_ats") for d in devices}
    if kinds == {"none"}:
        why = "not applicable: the GPU cannot read pageable host memory (attribute 88 = 0), so it takes no such faults"
    elif kinds == {"ATS"}:
        why = "not applicable: ATS walks the host page tables; pages are not faulted in one at a time"
    else:
        why = (
            "not exposed: the GPU faults pageable pages in one at a time (HMM) but counting them needs CUPTI "
            "unified-memory counters (nsys --cuda-um-gpu-page-faults), which the probe does not read"
        )
    return {"exposed": False, "count": None, "reason": why}


def register_size(requested_gib: float, mem_available_bytes: int | None, fraction: float = 0.5):
    """(bytes, capped): the register-time buffer, at most `fraction` of MemAvailable."""
    want = int(max(0.0, requested_gib) * GIB)
    if mem_available_bytes is None:
        return want, False
    cap = int(max(0, mem_available_bytes) * fraction)
    cap -= cap % (2 * MIB)
    return (cap, True) if want > cap else (want, False)


def torch_installed() -> bool:
    try:
        return importlib.util.find_spec("torch") is not None
    except (ImportError, ValueError):
        return False


# ---------------------------------------------------------------- subprocess runner


def _tail(path: Path, limit: int = 2000) -> str:
    try:
        data = path.read_bytes()[-limit:]
    except OSError:
        return ""
    return data.decode("utf-8", "replace").strip()


def run_worker(name: str, params: Mapping[str, Any], timeout_s: float) -> dict:
    """Run `harness.probe.worker NAME` in a fresh process; always returns a result dict
    {ok, value, error, seconds} (a crash, a timeout or a missing output becomes an error)."""
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="harness-probe-") as tmp:
        out = Path(tmp) / "result.json"
        log = Path(tmp) / "log.txt"
        env = dict(os.environ)
        root = str(Path(__file__).resolve().parents[2])
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
        env.setdefault("PYTHONUNBUFFERED", "1")
        cmd = [sys.executable, "-m", "harness.probe.worker", name, "--out", str(out)]
        cmd += ["--params", json.dumps(dict(params))]
        timed_out = False
        with open(log, "wb") as logf:
            try:
                proc = subprocess.Popen(
                    cmd,
                    stdin=subprocess.DEVNULL,
                    stdout=logf,
                    stderr=subprocess.STDOUT,
                    env=env,
                    start_new_session=True,
                )
            except OSError as e:
                return {
                    "ok": False,
                    "value": None,
                    "error": f"could not start worker: {e}",
                    "seconds": round(time.monotonic() - t0, 3),
                }
            try:
                rc = proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                timed_out = True
                try:  # the worker leads its own session: end it and anything it started
                    os.killpg(proc.pid, signal.SIGKILL)
                except OSError:
                    proc.kill()
                try:
                    rc = proc.wait(timeout=15)
                except subprocess.TimeoutExpired:  # stuck in the driver (D state): leave it
                    rc = None
        seconds = round(time.monotonic() - t0, 3)
        if timed_out:
            return {
                "ok": False,
                "value": None,
                "seconds": seconds,
                "error": f"timeout: no result after {timeout_s:g} s (worker killed)",
                "log_tail": _tail(log),
            }
        try:
            result = json.loads(out.read_text(encoding="utf-8"))
            if not isinstance(result, dict):
                raise ValueError("result is not an object")
        except (OSError, ValueError) as e:
            tail = _tail(log)
            how = f"rc {rc}"
            if rc is not None and rc < 0:
                try:
                    how = f"signal {signal.Signals(-rc).name}"
                except ValueError:
                    how = f"signal {-rc}"
            return {
                "ok": False,
                "value": None,
                "seconds": seconds,
                "error": f"worker died ({how}) without a result ({type(e).__name__})"
                + (f": {tail.splitlines()[-1]}" if tail else ""),
                "log_tail": tail,
            }
        result.setdefault("ok", False)
        result.setdefault("value", None)
        result.setdefault("error", None)
        result["seconds"] = seconds
        return result


# ---------------------------------------------------------------- the probe run


def _empty_result() -> dict:
    uname = platform.uname()
    return {
        "schema_version": SCHEMA_VERSION,
        "ok": False,
        "gpu_present": False,
        "reason": None,
        "wsl": is_wsl(uname.release),
        "kernel_release": uname.release,
        "machine": uname.machine,
        "python": platform.python_version(),
        "torch_version": None,
        "cuda_runtime": None,
        "driver_version": None,
        "nvidia_driver": None,
        "cupy_version": None,
        "devices": [],
        "host_register_kernel_write": None,
        "host_alloc_kernel_write": None,
        "bandwidth_gbs": {f"{k}_{d}": None for k in BANDWIDTH_KINDS for d in ("h2d", "d2h")},
        "bandwidth": None,
        "register_seconds": None,
        "disk": None,
        "register_chunks": None,
        "gpu_page_faults": gpu_page_faults([], "no GPU probed"),
        "errors": [],
        "options": None,
        "created_at": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "elapsed_s": None,
    }


def _coerce_options(options: ProbeOptions | Mapping[str, Any] | None) -> ProbeOptions:
    if options is None:
        return ProbeOptions().resolved()
    if isinstance(options, ProbeOptions):
        return options.resolved()
    known = {f.name for f in dataclasses.fields(ProbeOptions)}
    unknown = set(options) - known
    if unknown:
        raise TypeError(f"unknown probe options: {sorted(unknown)}")
    return ProbeOptions(**dict(options)).resolved()


def run_probes(options: ProbeOptions | Mapping[str, Any] | None = None, *, runner=None) -> dict:
    """Run every probe; return a JSON-serialisable dict (schema in docs/probe.md). Never raises
    on a probe failure: each probe's outcome is {ok, value, error}. `runner(name, params,
    timeout_s)` replaces the subprocess runner (tests)."""
    opts = _coerce_options(options)
    run = runner or run_worker
    t_start = time.monotonic()
    res = _empty_result()
    res["options"] = dataclasses.asdict(opts)

    def log(msg: str) -> None:
        if opts.verbose:
            print(f"[probe] {msg}", file=sys.stderr, flush=True)

    def done() -> dict:
        res["elapsed_s"] = round(time.monotonic() - t_start, 3)
        return res

    if opts.disk_bytes:
        log(f"disk bandwidth under {opts.storage_dir}")
        res["disk"] = disk_bandwidth(opts.storage_dir, opts.disk_bytes)
        if not res["disk"]["ok"]:
            res["errors"].append(f"disk bandwidth: {res['disk']['error']}")

    if runner is None and not torch_installed():
        res["reason"] = REASON_NO_TORCH
        res["gpu_page_faults"] = gpu_page_faults([], REASON_NO_TORCH)
        return done()

    log("environment (torch, CUDA, device attributes)")
    env = run("env", {}, opts.timeout_s)
    if not env.get("ok"):
        res["reason"] = f"no GPU: environment probe failed: {env.get('error')}"
        res["errors"].append(f"env: {env.get('error')}")
        return done()
    ev = env.get("value") or {}
    for key in ("torch_version", "cuda_runtime", "driver_version", "nvidia_driver", "cupy_version"):
        res[key] = ev.get(key)
    if not ev.get("cuda_available"):
        res["reason"] = REASON_NO_CUDA
        return done()
    devices = []
    for d in ev.get("devices") or []:
        d = dict(d)
        d["hmm_or_ats"] = classify_pageable_access(
            d.get("pageable_memory_access"), d.get("pageable_memory_access_uses_host_page_tables")
        )
        devices.append(d)
    res["devices"] = devices
    res["gpu_page_faults"] = gpu_page_faults(devices)
    if not devices:
        res["reason"] = "CUDA is available but no device was listed"
        return done()
    res["gpu_present"] = True
    if not 0 <= opts.device < len(devices):
        res["reason"] = f"device {opts.device} not present ({len(devices)} devices)"
        res["errors"].append(res["reason"])
        return done()

    outcomes: list[dict] = []

    def probe(name: str, params: dict, label: str) -> dict:
        log(label)
        r = run(name, {"device": opts.device, **params}, opts.timeout_s)
        outcomes.append(r)
        if not r.get("ok"):
            res["errors"].append(f"{label}: {r.get('error')}")
        return r

    kw = {}
    for flags in REGISTER_FLAGS:
        kw[str(flags)] = probe(
            "kwrite_register",
            {"flags": flags, "nbytes": opts.kwrite_bytes},
            f"kernel write, cudaHostRegister flags={flags}",
        )
    res["host_register_kernel_write"] = kw
    res["host_alloc_kernel_write"] = probe(
        "kwrite_hostalloc", {"nbytes": opts.kwrite_bytes}, "kernel write, cudaHostAlloc"
    )

    bw = {}
    for kind in BANDWIDTH_KINDS:
        r = probe(
            "bandwidth",
            {"kind": kind, "nbytes": opts.nbytes, "repeats": opts.repeats},
            f"bandwidth, {kind}",
        )
        bw[kind] = r
        v = r.get("value") or {}
        res["bandwidth_gbs"][f"{kind}_h2d"] = v.get("h2d_gbs")
        res["bandwidth_gbs"][f"{kind}_d2h"] = v.get("d2h_gbs")
    res["bandwidth"] = bw

    avail_kib = procfs.read_meminfo_field("MemAvailable")
    avail = avail_kib * 1024 if avail_kib is not None else None
    nbytes, capped = register_size(opts.register_gib, avail, opts.register_mem_fraction)
    reg: dict[str, Any] = {
        "requested_gib": opts.register_gib,
        "size_gib": round(nbytes / GIB, 3),
        "capped": capped,
        "mem_available_gib": round(avail / GIB, 2) if avail is not None else None,
        "seconds": None,
    }
    if nbytes <= 0:
        reg.update(ok=False, value=None, error="no memory to register (MemAvailable too low)")
        res["errors"].append(f"register time: {reg['error']}")
        outcomes.append(reg)
    else:
        r = probe("register_time", {"nbytes": nbytes}, f"cudaHostRegister time, {nbytes / GIB:.2f} GiB")
        reg.update(r)
        reg["seconds"] = (r.get("value") or {}).get("seconds")
    res["register_seconds"] = reg
    if nbytes > 0 and opts.register_chunks_gib:
        res["register_chunks"] = probe(
            "register_chunks",
            {"nbytes": nbytes, "chunk_bytes": [int(g * GIB) for g in opts.register_chunks_gib]},
            f"cudaHostRegister in chunks of {', '.join(f'{g:g}' for g in opts.register_chunks_gib)} GiB",
        )

    res["ok"] = all(o.get("ok") for o in outcomes) and not res["errors"]
    return done()

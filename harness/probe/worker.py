"""The worker of the platform probes: the GPU-side body of each probe, run alone in a fresh process.

`python -m harness.probe.worker NAME --out FILE [--params JSON]` runs one probe and writes
`{"ok": bool, "value": ..., "error": str|None}` to FILE. `harness.probe.run` starts one process per
probe because an illegal memory access poisons the CUDA context for the rest of the process
(seed 000): each kernel-write probe, one per cudaHostRegister flag, must get its own context.

torch, cupy and numpy are imported inside the functions: importing this module is cheap.
"""

from __future__ import annotations

import argparse
import json
import mmap
import os
import statistics
import sys
import time
import traceback
from typing import Any, Callable

from harness.core.errors import Broken
from harness.host import nvml

# cudaDeviceAttr / CUdevice_attribute numbers (identical in the runtime and the driver API).
ATTR_PAGEABLE_MEMORY_ACCESS = 88
ATTR_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM = 91
ATTR_PAGEABLE_MEMORY_ACCESS_USES_HOST_PAGE_TABLES = 100

PAGE = mmap.PAGESIZE
PATTERN_MULT = 2654435761  # Knuth's multiplicative hash: every word of the buffer differs
UNTOUCHED = 0xDEADBEEF  # what the host writes before the kernel runs

_FILL_SRC = r"""
extern "C" __global__ void harness_fill_pattern(unsigned long long dst_addr,
                                                unsigned long long n,
                                                unsigned int seed) {
    unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        unsigned int* dst = (unsigned int*)dst_addr;
        dst[i] = ((unsigned int)(i * 2654435761ull)) ^ seed;
    }
}
"""


class ProbeFailure(Broken):
    """A probe step failed; `stage` names the step (register, launch, sync, verify, ...)."""

    def __init__(self, stage: str, message: str):
        super().__init__(f"{stage}: {message}")
        self.stage = stage


# ---------------------------------------------------------------- small helpers


def format_cuda_version(v: int | None) -> str | None:
    """13000 -> "13.0", 12040 -> "12.4" (cudaDriverGetVersion / cudaRuntimeGetVersion ints)."""
    if v is None:
        return None
    v = int(v)
    return f"{v // 1000}.{(v % 1000) // 10}"


def expected_pattern(n_words: int, seed: int):
    """The uint32 words `harness_fill_pattern` writes (numpy array)."""
    import numpy as np

    i = np.arange(n_words, dtype=np.uint64)
    words = (i * np.uint64(PATTERN_MULT)) & np.uint64(0xFFFFFFFF)
    return words.astype(np.uint32) ^ np.uint32(seed)


def _anon_buffer(nbytes: int):
    """Page-aligned anonymous mapping (the way an allocator hands memory to cudaHostRegister)."""
    import numpy as np

    mm = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    return mm, np.frombuffer(mm, dtype=np.uint8)


def _libcuda():
    import ctypes

    for name in ("libcuda.so.1", "libcuda.so"):
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    raise OSError("libcuda.so.1 not found")


def _attr_via_libcuda(attr: int, device: int) -> int:
    import ctypes

    lib = _libcuda()
    rc = lib.cuInit(0)
    if rc != 0:
        raise RuntimeError(f"cuInit rc={rc}")
    dev = ctypes.c_int()
    rc = lib.cuDeviceGet(ctypes.byref(dev), int(device))
    if rc != 0:
        raise RuntimeError(f"cuDeviceGet({device}) rc={rc}")
    val = ctypes.c_int()
    rc = lib.cuDeviceGetAttribute(ctypes.byref(val), int(attr), dev)
    if rc != 0:
        raise RuntimeError(f"cuDeviceGetAttribute({attr}) rc={rc}")
    return int(val.value)


def device_attribute(attr: int, device: int) -> tuple[int | None, str | None, str | None]:
    """(value, source, error): cupy's cudaDeviceGetAttribute, else the driver API by ctypes."""
    errors = []
    try:
        import cupy

        return int(cupy.cuda.runtime.deviceGetAttribute(attr, device)), "cupy", None
    except Exception as e:  # noqa: BLE001 - any failure falls through to the next source
        errors.append(f"cupy: {type(e).__name__}: {e}")
    try:
        return _attr_via_libcuda(attr, device), "libcuda", None
    except Exception as e:  # noqa: BLE001
        errors.append(f"libcuda: {type(e).__name__}: {e}")
    return None, None, "; ".join(errors)


def cuda_driver_version() -> int | None:
    """cudaDriverGetVersion (13000 = CUDA 13.0): cupy, else the driver API by ctypes."""
    try:
        import cupy

        return int(cupy.cuda.runtime.driverGetVersion())
    except Exception:  # noqa: BLE001
        pass
    try:
        import ctypes

        v = ctypes.c_int()
        if _libcuda().cuDriverGetVersion(ctypes.byref(v)) == 0:
            return int(v.value)
    except Exception:  # noqa: BLE001
        pass
    return None


def _rc_int(rc: Any) -> int:
    return int(getattr(rc, "value", rc))


def host_register(ptr: int, nbytes: int, flags: int) -> str:
    """cudaHostRegister through torch's cudart (sglang's path), else cupy. Returns the API used."""
    try:
        import torch

        cudart = torch.cuda.cudart()
    except Exception:  # noqa: BLE001
        cudart = None
    if cudart is not None:
        rc = cudart.cudaHostRegister(ptr, nbytes, flags)
        if _rc_int(rc) != 0:
            try:
                msg = cudart.cudaGetErrorString(rc)  # takes the enum, not an int (seed 000)
            except Exception:  # noqa: BLE001
                msg = "?"
            raise ProbeFailure("register", f"cudaHostRegister(flags={flags}) returned {_rc_int(rc)} ({msg})")
        return "torch.cuda.cudart"
    import cupy

    try:
        cupy.cuda.runtime.hostRegister(ptr, nbytes, flags)
    except Exception as e:  # noqa: BLE001
        raise ProbeFailure("register", f"cudaHostRegister(flags={flags}): {e}") from e
    return "cupy"


def host_unregister(ptr: int, api: str) -> None:
    if api == "torch.cuda.cudart":
        import torch

        torch.cuda.cudart().cudaHostUnregister(ptr)
    else:
        import cupy

        cupy.cuda.runtime.hostUnregister(ptr)


def _device_pointer_info(ptr: int) -> dict:
    """cudaPointerGetAttributes for the record: which memory type the driver sees, and whether
    the device address equals the host address (UVA). The kernel is given the host address,
    as sglang's kernels are, whatever this says."""
    try:
        import cupy

        attrs = cupy.cuda.runtime.pointerGetAttributes(ptr)
        dptr = int(attrs.devicePointer)
        return {
            "device_pointer_equals_host": dptr == ptr if dptr else None,
            "memory_type": getattr(attrs, "memoryType", None),
            "pointer_attributes_error": None,
        }
    except Exception as e:  # noqa: BLE001
        return {
            "device_pointer_equals_host": None,
            "memory_type": None,
            "pointer_attributes_error": f"{type(e).__name__}: {e}",
        }


def _kernel_write(ptr: int, host_words, device: int, seed: int) -> dict:
    """Launch a kernel that stores a pattern through `ptr` (a host address, as sglang's mamba
    backup kernel does), synchronize, and compare on the host."""
    import numpy as np

    n = int(host_words.size)
    host_words[:] = np.uint32(UNTOUCHED)
    try:
        import cupy
    except ImportError:
        cupy = None
    if cupy is not None:
        method = "cupy.RawKernel"
        with cupy.cuda.Device(device):
            try:
                kernel = cupy.RawKernel(_FILL_SRC, "harness_fill_pattern")
                threads = 256
                blocks = (n + threads - 1) // threads
                kernel((blocks,), (threads,), (np.uint64(ptr), np.uint64(n), np.uint32(seed)))
            except Exception as e:  # noqa: BLE001
                raise ProbeFailure("launch", f"{type(e).__name__}: {e}") from e
            try:
                cupy.cuda.runtime.deviceSynchronize()
            except Exception as e:  # noqa: BLE001
                raise ProbeFailure("sync", f"{type(e).__name__}: {e}") from e
    else:
        # No cupy: let torch launch an elementwise kernel whose output tensor *is* the host
        # memory, seen through __cuda_array_interface__ (torch maps the pointer to its device).
        import torch

        method = "torch elementwise (no cupy)"
        try:
            cai = {"shape": (n,), "typestr": "<i4", "data": (ptr, False), "version": 2}
            holder = type("_HostView", (), {"__cuda_array_interface__": cai})()
            out = torch.as_tensor(holder, device=f"cuda:{device}")
            src = torch.from_numpy(expected_pattern(n, seed).view(np.int32)).to(f"cuda:{device}")
            torch.mul(src, 1, out=out)  # a kernel store, not a cudaMemcpy
        except Exception as e:  # noqa: BLE001
            raise ProbeFailure("launch", f"{type(e).__name__}: {e}") from e
        try:
            torch.cuda.synchronize(device)
        except Exception as e:  # noqa: BLE001
            raise ProbeFailure("sync", f"{type(e).__name__}: {e}") from e
    want = expected_pattern(n, seed)
    bad = int(np.count_nonzero(host_words != want))
    untouched = int(np.count_nonzero(host_words == np.uint32(UNTOUCHED)))
    if bad:
        raise ProbeFailure("verify", f"{bad} of {n} words differ from the pattern ({untouched} untouched)")
    return {"method": method, "words": n}


# ---------------------------------------------------------------- probes


def probe_env(params: dict) -> dict:
    """torch/CUDA versions and per-device attributes (HMM vs ATS, seed 003)."""
    import torch

    out: dict[str, Any] = {
        "torch_version": torch.__version__,
        "cuda_runtime": torch.version.cuda,
        "cuda_available": bool(torch.cuda.is_available()),
        "device_count": 0,
        "driver_version": None,
        "nvidia_driver": None,
        "cupy_version": None,
        "devices": [],
    }
    try:
        import cupy

        out["cupy_version"] = cupy.__version__
    except Exception:  # noqa: BLE001
        pass
    if not out["cuda_available"]:
        return out
    out["device_count"] = int(torch.cuda.device_count())
    out["driver_version"] = format_cuda_version(cuda_driver_version())
    out["nvidia_driver"] = nvml.driver_version()
    for i in range(out["device_count"]):
        props = torch.cuda.get_device_properties(i)
        dev: dict[str, Any] = {
            "index": i,
            "name": props.name,
            "total_mem_gib": round(props.total_memory / 2**30, 2),
            "compute_capability": f"{props.major}.{props.minor}",
        }
        errors = []
        for key, attr in (
            ("pageable_memory_access", ATTR_PAGEABLE_MEMORY_ACCESS),
            (
                "pageable_memory_access_uses_host_page_tables",
                ATTR_PAGEABLE_MEMORY_ACCESS_USES_HOST_PAGE_TABLES,
            ),
            ("can_use_host_pointer_for_registered_mem", ATTR_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM),
        ):
            value, source, err = device_attribute(attr, i)
            dev[key] = value
            dev.setdefault("attribute_source", source)
            if err:
                errors.append(f"{key}: {err}")
        dev["attribute_error"] = "; ".join(errors) or None
        out["devices"].append(dev)
    return out


def probe_kwrite_register(params: dict) -> dict:
    """Seed 000's repro: allocator memory + cudaHostRegister(flags), a kernel stores to it."""
    flags = int(params["flags"])
    nbytes = int(params.get("nbytes", 1 << 20))
    device = int(params.get("device", 0))
    _require_cuda(device)
    mm, buf = _anon_buffer(nbytes)
    words = buf.view("uint32")
    words[:] = 0  # fault the pages in before registering
    ptr = int(buf.ctypes.data)
    api = host_register(ptr, nbytes, flags)
    info: dict[str, Any] = {"flags": flags, "bytes": nbytes, "register_api": api}
    info.update(_device_pointer_info(ptr))
    try:
        info.update(_kernel_write(ptr, words, device, seed=0x5EED0000 | flags))
    finally:
        try:
            host_unregister(ptr, api)
        except Exception:  # noqa: BLE001 - a poisoned context cannot unregister; exit soon anyway
            pass
    return info


def probe_kwrite_hostalloc(params: dict) -> dict:
    """The control: cudaHostAlloc memory (torch.empty(pin_memory=True)), a kernel stores to it."""
    import numpy as np

    nbytes = int(params.get("nbytes", 1 << 20))
    device = int(params.get("device", 0))
    _require_cuda(device)
    try:
        import torch

        t = torch.empty(nbytes // 4, dtype=torch.int32, pin_memory=True)
        words = t.numpy().view(np.uint32)
        ptr, alloc = int(t.data_ptr()), "torch.empty(pin_memory=True)"
    except ImportError:
        import cupy

        mem = cupy.cuda.alloc_pinned_memory(nbytes)
        words = np.frombuffer(mem, dtype=np.uint32, count=nbytes // 4)
        ptr, alloc = int(mem.ptr), "cupy.cuda.alloc_pinned_memory"
    info: dict[str, Any] = {"bytes": nbytes, "allocator": alloc}
    info.update(_device_pointer_info(ptr))
    info.update(_kernel_write(ptr, words, device, seed=0xA110C000))
    return info


def _require_cuda(device: int) -> None:
    try:
        import torch

        if not torch.cuda.is_available():
            raise ProbeFailure("init", "torch.cuda.is_available() is False")
        torch.cuda.set_device(device)
        torch.empty(1, device=f"cuda:{device}")  # create the context outside any timing
    except ImportError:
        import cupy

        cupy.cuda.Device(device).use()
        cupy.cuda.runtime.free(cupy.cuda.runtime.malloc(1))


def _time_copies(dst, src, repeats: int) -> list[float]:
    """Seconds per copy (CUDA events), after one warm-up copy."""
    import torch

    non_blocking = src.is_pinned() or dst.is_pinned()
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    dst.copy_(src, non_blocking=non_blocking)
    torch.cuda.synchronize()
    out = []
    for _ in range(repeats):
        start.record()
        dst.copy_(src, non_blocking=non_blocking)
        end.record()
        end.synchronize()
        out.append(start.elapsed_time(end) / 1e3)
    return out


def probe_bandwidth(params: dict) -> dict:
    """H2D and D2H copy bandwidth (GB/s, 1e9 bytes/s, median) for one kind of host buffer."""
    import torch

    kind = params["kind"]
    nbytes = int(params.get("nbytes", 1 << 30))
    repeats = max(1, int(params.get("repeats", 5)))
    device = int(params.get("device", 0))
    flags = int(params.get("register_flags", 0))
    _require_cuda(device)
    dev = torch.empty(nbytes, dtype=torch.uint8, device=f"cuda:{device}")
    dev.fill_(1)
    registered = None
    if kind == "pinned":
        host = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
    elif kind == "registered":
        mm, buf = _anon_buffer(nbytes)
        host = torch.from_numpy(buf)
        host.fill_(0)
        registered = host_register(int(host.data_ptr()), nbytes, flags)
    elif kind == "pageable":
        host = torch.empty(nbytes, dtype=torch.uint8)
        host.fill_(0)
    else:
        raise ProbeFailure("params", f"unknown kind {kind!r}")
    try:
        h2d = _time_copies(dev, host, repeats)
        d2h = _time_copies(host, dev, repeats)
        is_pinned = bool(host.is_pinned())
    finally:
        if registered:
            try:
                host_unregister(int(host.data_ptr()), registered)
            except Exception:  # noqa: BLE001
                pass
    h2d_gbs = [nbytes / s / 1e9 for s in h2d if s > 0]
    d2h_gbs = [nbytes / s / 1e9 for s in d2h if s > 0]
    return {
        "kind": kind,
        "bytes": nbytes,
        "repeats": repeats,
        "is_pinned": is_pinned,
        "h2d_gbs": statistics.median(h2d_gbs) if h2d_gbs else None,
        "d2h_gbs": statistics.median(d2h_gbs) if d2h_gbs else None,
        "h2d_samples_gbs": [round(x, 3) for x in h2d_gbs],
        "d2h_samples_gbs": [round(x, 3) for x in d2h_gbs],
    }


def probe_register_time(params: dict) -> dict:
    """Wall time of cudaHostRegister (and Unregister) on a large, already faulted-in buffer."""
    nbytes = int(params["nbytes"])
    device = int(params.get("device", 0))
    flags = int(params.get("flags", 0))
    _require_cuda(device)
    mm, buf = _anon_buffer(nbytes)
    t0 = time.perf_counter()
    buf[::PAGE] = 1  # fault every page in, so the timing is the pinning, not first touch
    touch_s = time.perf_counter() - t0
    ptr = int(buf.ctypes.data)
    t0 = time.perf_counter()
    api = host_register(ptr, nbytes, flags)
    reg_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    host_unregister(ptr, api)
    unreg_s = time.perf_counter() - t0
    return {
        "bytes": nbytes,
        "size_gib": round(nbytes / 2**30, 3),
        "flags": flags,
        "seconds": reg_s,
        "unregister_seconds": unreg_s,
        "touch_seconds": touch_s,
        "register_api": api,
    }


def chunk_plan(total: int, chunk_limit: int, granularity: int) -> list[tuple[int, int]]:
    """sglang PR #36798's chunks: (offset, size) of at most ``chunk_limit`` bytes rounded down to a
    multiple of ``granularity`` (a copy page never spans two registrations). Pure."""
    chunk = max(granularity, chunk_limit // granularity * granularity)
    return [(off, min(chunk, total - off)) for off in range(0, total, chunk)]


def probe_register_chunks(params: dict) -> dict:
    """Seed 002: register one faulted-in buffer in chunks of each size (PR #36798's loop), timing
    the registration and the unregistration of each plan; then the rollback: a chunk registered
    twice fails (cudaErrorHostMemoryAlreadyRegistered) and the chunks before it are unregistered
    in reverse order, timed."""
    nbytes = int(params["nbytes"])
    device = int(params.get("device", 0))
    granularity = int(params.get("granularity", 2 * 1024**2))
    _require_cuda(device)
    mm, buf = _anon_buffer(nbytes)
    buf[::PAGE] = 1
    base = int(buf.ctypes.data)
    plans = []
    for chunk_bytes in params["chunk_bytes"]:
        chunks = chunk_plan(nbytes, int(chunk_bytes), granularity)
        t0 = time.perf_counter()
        api = ""
        for off, size in chunks:
            api = host_register(base + off, size, 0)
        reg_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        for off, _ in reversed(chunks):
            host_unregister(base + off, api)
        plans.append(
            {
                "chunk_gib": round(int(chunk_bytes) / 2**30, 3),
                "chunks": len(chunks),
                "register_seconds": reg_s,
                "unregister_seconds": time.perf_counter() - t0,
            }
        )
    # the rollback: chunk 3 (or the last) is the first one registered again, so it fails
    chunks = chunk_plan(nbytes, max(granularity, nbytes // 4), granularity)
    fail_at = min(2, len(chunks) - 1)
    registered, failure, api = [], None, ""
    for i, (off, size) in enumerate(chunks):
        try:
            api = host_register(base + (chunks[0][0] if i == fail_at and i > 0 else off), size, 0)
        except ProbeFailure as e:
            failure = {"chunk": i + 1, "error": str(e)}
            break
        registered.append(off)
    t0 = time.perf_counter()
    for off in reversed(registered):
        host_unregister(base + off, api)
    rollback = {"failed": failure, "rolled_back_chunks": len(registered), "seconds": time.perf_counter() - t0}
    return {"bytes": nbytes, "granularity": granularity, "plans": plans, "rollback": rollback}


def probe_selftest(params: dict) -> dict:
    """No GPU: lets the tests exercise the subprocess isolation (ok, raise, abort, sleep)."""
    mode = params.get("mode", "ok")
    if mode == "raise":
        raise ProbeFailure("selftest", "asked to fail")
    if mode == "abort":
        os.abort()
    if mode == "sleep":
        time.sleep(float(params.get("seconds", 60)))
    return {"mode": mode, "pid": os.getpid()}


PROBES: dict[str, Callable[[dict], dict]] = {
    "env": probe_env,
    "kwrite_register": probe_kwrite_register,
    "kwrite_hostalloc": probe_kwrite_hostalloc,
    "bandwidth": probe_bandwidth,
    "register_time": probe_register_time,
    "register_chunks": probe_register_chunks,
    "selftest": probe_selftest,
}


def run_one(name: str, params: dict) -> dict:
    """Run one probe in this process; never raises."""
    try:
        value = PROBES[name](params)
        return {"ok": True, "value": value, "error": None}
    except ProbeFailure as e:
        return {"ok": False, "value": None, "error": str(e), "stage": e.stage}
    except BaseException as e:  # noqa: BLE001 - the result must always be written
        tb = traceback.format_exc(limit=3)
        return {"ok": False, "value": None, "error": f"{type(e).__name__}: {e}", "traceback": tb}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m harness.probe.worker")
    ap.add_argument("name", choices=sorted(PROBES))
    ap.add_argument("--out", required=True)
    ap.add_argument("--params", default="{}")
    args = ap.parse_args(argv)
    result = run_one(args.name, json.loads(args.params))
    tmp = args.out + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(result, f, default=str)
    os.replace(tmp, args.out)
    sys.stdout.flush()
    # os._exit: skip interpreter teardown, which can hang or crash in a poisoned CUDA context.
    os._exit(0)


if __name__ == "__main__":
    main()

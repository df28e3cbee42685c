"""The one reader of NVML (nvidia-ml-py): per-GPU memory used and utilisation, the GPU inventory
for the host fingerprint, and the NVIDIA driver version. No GPU, no driver or no library → no
readings, never an error."""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass

log = logging.getLogger(__name__)

_init_lock = threading.Lock()
_init_count = 0


def _open():
    """pynvml, initialised; reference-counted so several users may hold NVML at once. Raises
    when there is no library, driver or device."""
    global _init_count
    import pynvml  # nvidia-ml-py

    with _init_lock:
        pynvml.nvmlInit()
        _init_count += 1
    return pynvml


def _close(nv) -> None:
    global _init_count
    with _init_lock:
        if _init_count > 0:
            _init_count -= 1
            if _init_count == 0:
                try:
                    nv.nvmlShutdown()
                except Exception:
                    pass


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


@dataclass(frozen=True)
class GpuReading:
    index: int
    mem_used_mib: float
    util_pct: float | None  # None when the driver does not report utilisation

    def to_dict(self) -> dict:
        return {"index": self.index, "mem_used_mib": self.mem_used_mib, "util_pct": self.util_pct}


class GpuReader:
    """Opens NVML once; `read()` returns one reading per visible GPU, or None when NVML is
    unavailable. `close()` is idempotent."""

    def __init__(self) -> None:
        self._nvml = None
        self._handles: list = []
        try:
            self._nvml = _open()
            count = self._nvml.nvmlDeviceGetCount()
            self._handles = [self._nvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        except Exception as e:  # no library, no driver, no device: not an error for the harness
            log.debug("NVML unavailable: %s", e)
            self.close()

    @property
    def available(self) -> bool:
        return self._nvml is not None and bool(self._handles)

    def read(self) -> list[GpuReading] | None:
        if not self.available:
            return None
        nv = self._nvml
        out: list[GpuReading] = []
        for i, h in enumerate(self._handles):
            try:
                mem = nv.nvmlDeviceGetMemoryInfo(h)
                used_mib = mem.used / (1024 * 1024)
            except Exception as e:
                log.debug("NVML memory read failed for GPU %d: %s", i, e)
                continue
            try:
                util: float | None = float(nv.nvmlDeviceGetUtilizationRates(h).gpu)
            except Exception:
                util = None
            out.append(GpuReading(index=i, mem_used_mib=round(used_mib, 1), util_pct=util))
        return out

    def close(self) -> None:
        if self._nvml is None:
            return
        _close(self._nvml)
        self._nvml = None
        self._handles = []


def read_gpu_mem_used_mib() -> dict[int, float] | None:
    """{GPU index: memory used, MiB} now; None when there is no GPU."""
    reader = GpuReader()
    try:
        readings = reader.read()
    finally:
        reader.close()
    if not readings:
        return None
    return {g.index: g.mem_used_mib for g in readings}


def gpu_inventory() -> list[dict]:
    """[{index, name, memory_total_mib, driver}] per GPU; an empty list where there is no NVIDIA
    GPU, driver or library, or a read fails."""
    try:
        nv = _open()
    except Exception:  # noqa: BLE001 - no library / no driver / no GPU
        return []
    try:
        driver = _text(nv.nvmlSystemGetDriverVersion())
        gpus = []
        for i in range(nv.nvmlDeviceGetCount()):
            h = nv.nvmlDeviceGetHandleByIndex(i)
            mem = nv.nvmlDeviceGetMemoryInfo(h)
            gpus.append({
                "index": i,
                "name": _text(nv.nvmlDeviceGetName(h)),
                "memory_total_mib": int(mem.total // 2**20),
                "driver": driver,
            })
        return gpus
    except Exception:  # noqa: BLE001
        return []
    finally:
        _close(nv)


def driver_version() -> str | None:
    """The NVIDIA driver version ("580.95.05"); None without NVML."""
    try:
        nv = _open()
    except Exception:  # noqa: BLE001
        return None
    try:
        return _text(nv.nvmlSystemGetDriverVersion())
    except Exception:  # noqa: BLE001
        return None
    finally:
        _close(nv)

"""Per-GPU memory used and utilisation through NVML; absent GPU or NVML → no readings, no error."""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass

log = logging.getLogger(__name__)

_init_lock = threading.Lock()
_init_count = 0


@dataclass(frozen=True)
class GpuReading:
    index: int
    mem_used_mib: float
    util_pct: float | None  # None when the driver does not report utilisation

    def to_dict(self) -> dict:
        return {"index": self.index, "mem_used_mib": self.mem_used_mib, "util_pct": self.util_pct}


class GpuReader:
    """Opens NVML once (reference-counted, so several readers may coexist); `read()` returns one
    reading per visible GPU, or None when NVML is unavailable. `close()` is idempotent."""

    def __init__(self) -> None:
        self._nvml = None
        self._handles: list = []
        global _init_count
        try:
            import pynvml  # nvidia-ml-py

            with _init_lock:
                pynvml.nvmlInit()
                _init_count += 1
                self._nvml = pynvml
            count = pynvml.nvmlDeviceGetCount()
            self._handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
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
        global _init_count
        if self._nvml is None:
            return
        with _init_lock:
            if _init_count > 0:
                _init_count -= 1
                if _init_count == 0:
                    try:
                        self._nvml.nvmlShutdown()
                    except Exception:
                        pass
        self._nvml = None
        self._handles = []

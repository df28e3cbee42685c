"""Cooldown between variants (reliability P9): before a server launches, take a baseline of
MemAvailable and per-GPU memory used; after it stopped, wait (bounded) until both are back near
that baseline, and say whether they came back."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

from harness.host import nvml, procfs


@dataclass(frozen=True)
class Baseline:
    """Host and GPU memory before a server launch."""

    mem_available_kib: int
    gpu_mem_used_mib: dict[int, float] | None  # None: no GPU (GPU checks skipped)
    wall_time: float

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        if self.gpu_mem_used_mib is not None:
            d["gpu_mem_used_mib"] = {str(k): v for k, v in self.gpu_mem_used_mib.items()}
        return d


def take_baseline(
    read_mem_available: Callable[[], int] = procfs.read_mem_available_kib,
    read_gpu: Callable[[], dict[int, float] | None] = nvml.read_gpu_mem_used_mib,
) -> Baseline:
    """Capture pre-launch MemAvailable and per-GPU memory used."""
    return Baseline(mem_available_kib=int(read_mem_available()), gpu_mem_used_mib=read_gpu(), wall_time=time.time())


@dataclass(frozen=True)
class CooldownResult:
    clean: bool
    waited_s: float
    mem_available_kib_baseline: int
    mem_available_kib_now: int
    mem_shortfall_kib: int  # baseline - now (negative: more available than before)
    gpu_mem_used_mib_baseline: dict[int, float] | None
    gpu_mem_used_mib_now: dict[int, float] | None
    reason: str
    polls: int = 0
    tolerance_kib: int = 0
    gpu_tolerance_mib: float = 0.0
    still_high_gpus: list[int] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        for key in ("gpu_mem_used_mib_baseline", "gpu_mem_used_mib_now"):
            if d[key] is not None:
                d[key] = {str(k): v for k, v in d[key].items()}
        return d

    def to_json(self) -> dict[str, Any]:  # what results.write_json_atomic stores
        return self.to_dict()

    def get(self, key: str, default: Any = None) -> Any:
        """Record-style read (`result.get("clean")`) for callers that treat results as dicts."""
        return getattr(self, key, default)


def wait(
    baseline: Baseline,
    timeout_s: float = 120.0,
    mem_tolerance_gib: float = 1.0,
    *,
    gpu_tolerance_mib: float | None = None,
    poll_s: float = 0.1,  # a memory read: polling faster only ends the wait sooner
    read_mem_available: Callable[[], int] = procfs.read_mem_available_kib,
    read_gpu: Callable[[], dict[int, float] | None] = nvml.read_gpu_mem_used_mib,
    sleep: Callable[[float], None] = time.sleep,
    check_host: bool = True,
) -> CooldownResult:
    """After a server stopped: poll until MemAvailable is back within `mem_tolerance_gib` of the
    baseline and every GPU's memory used is back within `gpu_tolerance_mib` (default: the same
    tolerance in MiB) — or `timeout_s` passes. GPU checks are skipped when the baseline had no
    GPU. Never raises on a slow release; returns clean=False with the numbers. ``check_host``
    False: MemAvailable is the host's, shared with variants running side by side
    (`harness.run.lanes`): only the GPUs are waited for."""
    tol_kib = int(mem_tolerance_gib * 1024 * 1024)
    gpu_tol = float(mem_tolerance_gib * 1024 if gpu_tolerance_mib is None else gpu_tolerance_mib)
    check_gpu = baseline.gpu_mem_used_mib is not None
    t0 = time.monotonic()
    polls = 0
    while True:
        polls += 1
        mem_now = int(read_mem_available())
        gpu_now = read_gpu() if check_gpu else None
        shortfall = baseline.mem_available_kib - mem_now
        mem_ok = shortfall <= tol_kib or not check_host
        high: list[int] = []
        if check_gpu:
            for idx, before in (baseline.gpu_mem_used_mib or {}).items():
                now = (gpu_now or {}).get(idx)
                if now is None or now - before > gpu_tol:
                    high.append(idx)
        waited = time.monotonic() - t0
        if (mem_ok and not high) or waited >= timeout_s:
            break
        sleep(min(poll_s, max(timeout_s - waited, 0.0)))
    clean = mem_ok and not high
    if clean:
        reason = f"clean after {waited:.1f} s"
        if not check_host:
            reason += " (GPUs only: host memory is shared with the variants running side by side)"
    else:
        parts = []
        if not mem_ok:
            parts.append(
                f"MemAvailable {shortfall / 1024**2:.2f} GiB below the pre-launch value "
                f"(tolerance {mem_tolerance_gib:g} GiB)"
            )
        for idx in high:
            before = (baseline.gpu_mem_used_mib or {}).get(idx)
            now = (gpu_now or {}).get(idx)
            parts.append(f"GPU {idx} memory used {now} MiB vs {before} MiB before launch (tolerance {gpu_tol:g} MiB)")
        reason = f"not clean after {waited:.1f} s: " + "; ".join(parts)
    return CooldownResult(
        clean=clean,
        waited_s=round(waited, 3),
        mem_available_kib_baseline=baseline.mem_available_kib,
        mem_available_kib_now=mem_now,
        mem_shortfall_kib=shortfall,
        gpu_mem_used_mib_baseline=baseline.gpu_mem_used_mib,
        gpu_mem_used_mib_now=gpu_now,
        reason=reason,
        polls=polls,
        tolerance_kib=tol_kib,
        gpu_tolerance_mib=gpu_tol,
        still_high_gpus=high,
    )

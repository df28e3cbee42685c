"""The one reader of NVML (nvidia-ml-py): per-GPU memory used and utilisation, which GPUs a
server can see (``CUDA_VISIBLE_DEVICES`` mapped to NVML indices) and which ones its processes
actually run on, the GPU inventory for the host fingerprint, and the NVIDIA driver version. No
GPU, no driver or no library → no readings, never an error."""

from __future__ import annotations

import logging
import os
import re
import threading
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
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


# ----------------------------------------------------------------------------- which GPUs


def parse_cuda_visible_devices(value: str | None) -> list[str] | None:
    """``CUDA_VISIBLE_DEVICES`` → its entries as written (stripped); None when it is unset (every
    GPU is visible). Set but empty means no GPU at all (``[""]``, an invalid first entry)."""
    if value is None:
        return None
    return [part.strip() for part in value.split(",")]


def resolve_visible(
    entries: Sequence[str], uuids: Sequence[str | None], mig_parent: Callable[[str], int | None] | None = None
) -> tuple[list[int], str | None]:
    """CUDA's reading of ``CUDA_VISIBLE_DEVICES`` entries → NVML indices in CUDA's order, and the
    first entry CUDA would stop at (None when every entry resolved).

    An entry is an index (``1``), a GPU UUID or a unique prefix of one (``GPU-8932f937``), or a
    MIG UUID (``MIG-...``: its parent GPU, through ``mig_parent``). As in CUDA, an invalid entry
    (out of range, ambiguous or unknown UUID, a repeated device, ``-1``, empty) hides itself and
    everything after it. An integer is taken as the NVML index: CUDA numbers devices in PCI bus
    order when ``CUDA_DEVICE_ORDER=PCI_BUS_ID``, and on a host of identical GPUs either way.
    """
    out: list[int] = []
    for entry in entries:
        idx: int | None = None
        if re.fullmatch(r"\d+", entry):
            i = int(entry)
            idx = i if i < len(uuids) else None
        elif entry[:4].upper() == "GPU-":
            hits = [i for i, u in enumerate(uuids) if u and u.lower().startswith(entry.lower())]
            idx = hits[0] if len(hits) == 1 else None
        elif entry[:4].upper() == "MIG-" and mig_parent is not None:
            idx = mig_parent(entry)
        if idx is None or idx in out:
            return out, entry
        out.append(idx)
    return out, None


def _flag_int(argv: Sequence[str], names: Collection[str], default: int) -> int:
    """The integer value of the last ``--flag V`` / ``--flag=V`` among ``names``; ``default``."""
    value = default
    for i, arg in enumerate(argv):
        name, eq, inline = arg.partition("=")
        if name not in names:
            continue
        raw = inline if eq else (argv[i + 1] if i + 1 < len(argv) else None)
        try:
            value = int(raw) if raw is not None else value
        except ValueError:
            pass
    return value


def sglang_gpu_positions(argv: Sequence[str]) -> tuple[list[int], str]:
    """Which of its visible GPUs an sglang server launched with ``argv`` takes (positions in its
    CUDA order): ``--base-gpu-id`` (0) and then every ``--gpu-id-step`` (1), for ``--tp-size`` ×
    ``--pp-size`` GPUs (× ``--dp-size`` without ``--enable-dp-attention``; ÷ ``--nnodes``).
    Returns the positions and a note saying how."""
    base = _flag_int(argv, ("--base-gpu-id",), 0)
    step = max(1, _flag_int(argv, ("--gpu-id-step",), 1))
    tp = max(1, _flag_int(argv, ("--tp-size", "--tp"), 1))
    pp = max(1, _flag_int(argv, ("--pp-size", "--pp"), 1))
    dp = max(1, _flag_int(argv, ("--dp-size", "--dp"), 1))
    nnodes = max(1, _flag_int(argv, ("--nnodes",), 1))
    per_dp = 1 if "--enable-dp-attention" in argv else dp
    count = max(1, tp * pp * per_dp // nnodes)
    note = f"{count} GPU(s) from position {base}" + (f", step {step}" if step != 1 else "")
    return [base + i * step for i in range(count)], note


@dataclass(frozen=True)
class GpuSelection:
    """The GPUs one server uses, as NVML indices, and how they were chosen (recorded with the
    samples: ``how`` is one sentence, ``method`` one of ``cuda_visible_devices``, ``all``,
    ``processes``, ``none``)."""

    indices: tuple[int, ...]
    method: str
    how: str
    cuda_visible_devices: str | None = None
    uuids: tuple[str | None, ...] = ()

    def to_dict(self) -> dict:
        return {
            "indices": list(self.indices),
            "method": self.method,
            "how": self.how,
            "cuda_visible_devices": self.cuda_visible_devices,
            "uuids": list(self.uuids),
        }


def select_gpus(
    uuids: Sequence[str | None],
    env: Mapping[str, str] | None = None,
    argv: Sequence[str] | None = None,
    mig_parent: Callable[[str], int | None] | None = None,
) -> GpuSelection:
    """The GPUs a server started with ``env`` (its whole environment; default this process's)
    and ``argv`` will use, out of the host's GPUs (``uuids``, by NVML index).

    ``CUDA_VISIBLE_DEVICES`` decides what the server can see (unset: every GPU); ``argv`` (when
    given, an sglang command line) says which of those it takes (:func:`sglang_gpu_positions`);
    positions beyond what it can see fall back to every visible GPU."""
    env = os.environ if env is None else env
    raw = env.get("CUDA_VISIBLE_DEVICES")
    entries = parse_cuda_visible_devices(raw)
    if entries is None:
        visible, stop = list(range(len(uuids))), None
        how = f"all {len(uuids)} GPU(s): CUDA_VISIBLE_DEVICES is not set"
        method = "all"
    else:
        visible, stop = resolve_visible(entries, uuids, mig_parent)
        how = f"CUDA_VISIBLE_DEVICES={raw} → NVML {visible}"
        if stop is not None:
            how += f" (CUDA stops at the invalid entry {stop!r})"
        method = "cuda_visible_devices"
    chosen = visible
    if argv is not None and visible:
        positions, note = sglang_gpu_positions(argv)
        if all(p < len(visible) for p in positions):
            chosen = [visible[p] for p in positions]
            if chosen != visible:
                how += f"; the server takes {note} → NVML {chosen}"
        else:
            how += f"; the server asks for {note} but sees {len(visible)}: all visible kept"
    if not chosen:
        method = "none"
    return GpuSelection(tuple(chosen), method, how, raw, tuple(uuids[i] for i in chosen))


# ----------------------------------------------------------------------------- reading


@dataclass(frozen=True)
class GpuReading:
    index: int
    mem_used_mib: float
    util_pct: float | None  # None when the driver does not report utilisation
    # GPU memory of the server's own processes on this GPU (NVML's running compute processes);
    # None when not asked for, or NVML would not list them (permissions, another PID namespace).
    server_mem_mib: float | None = None
    # NVML's total energy counter since the driver loaded (nvmlDeviceGetTotalEnergyConsumption,
    # mJ; Volta and later); None where the GPU or driver does not report it
    energy_mj: int | None = None

    def to_dict(self) -> dict:
        d = {"index": self.index, "mem_used_mib": self.mem_used_mib, "util_pct": self.util_pct}
        if self.server_mem_mib is not None:
            d["server_mem_mib"] = self.server_mem_mib
        if self.energy_mj is not None:
            d["energy_mj"] = self.energy_mj
        return d


_NOT_AVAILABLE = (1 << 64) - 1  # NVML_VALUE_NOT_AVAILABLE for usedGpuMemory


class GpuReader:
    """Opens NVML once; `read()` returns one reading per GPU asked for (default every GPU), or
    None when NVML is unavailable. `close()` is idempotent."""

    def __init__(self) -> None:
        self._nvml = None
        self._handles: list = []
        self._uuids: list[str | None] = []
        try:
            self._nvml = _open()
            count = self._nvml.nvmlDeviceGetCount()
            self._handles = [self._nvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        except Exception as e:  # no library, no driver, no device: not an error for the harness
            log.debug("NVML unavailable: %s", e)
            self.close()
            return
        for h in self._handles:
            try:
                self._uuids.append(_text(self._nvml.nvmlDeviceGetUUID(h)))
            except Exception:  # noqa: BLE001 - an old driver: indices still work
                self._uuids.append(None)

    @property
    def available(self) -> bool:
        return self._nvml is not None and bool(self._handles)

    @property
    def count(self) -> int:
        return len(self._handles)

    @property
    def uuids(self) -> list[str | None]:
        """Each GPU's UUID (``GPU-…``), by NVML index; None where NVML would not say."""
        return list(self._uuids)

    def mig_parent(self, mig_uuid: str) -> int | None:
        """NVML index of the GPU a MIG device (by UUID) belongs to; None when unknown."""
        if not self.available:
            return None
        nv = self._nvml
        try:
            mig = nv.nvmlDeviceGetHandleByUUID(mig_uuid)
            return int(nv.nvmlDeviceGetIndex(nv.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(mig)))
        except Exception:  # noqa: BLE001
            return None

    def select(self, env: Mapping[str, str] | None = None, argv: Sequence[str] | None = None) -> GpuSelection:
        """:func:`select_gpus` on this host's GPUs."""
        return select_gpus(self._uuids, env, argv, self.mig_parent)

    def process_memory(self, pids: Collection[int], indices: Iterable[int] | None = None) -> dict[int, float] | None:
        """{NVML index: MiB} of the GPUs (default every GPU) on which any of ``pids`` has a
        compute process, with the memory those processes use there (0.0 where NVML does not
        report it). None when NVML would not list processes on any GPU."""
        if not self.available:
            return None
        nv = self._nvml
        wanted = set(pids)
        out: dict[int, float] = {}
        listed = False
        for i in range(len(self._handles)) if indices is None else indices:
            if not 0 <= i < len(self._handles):
                continue
            try:
                procs = nv.nvmlDeviceGetComputeRunningProcesses(self._handles[i])
            except Exception as e:  # noqa: BLE001 - not supported / no permission
                log.debug("NVML process list failed for GPU %d: %s", i, e)
                continue
            listed = True
            mib = None
            for p in procs or ():
                if getattr(p, "pid", None) in wanted:
                    used = getattr(p, "usedGpuMemory", None)
                    used_mib = used / (1024 * 1024) if isinstance(used, int) and used != _NOT_AVAILABLE else 0.0
                    mib = (mib or 0.0) + used_mib
            if mib is not None:
                out[i] = round(mib, 1)
        return out if listed else None

    def read(
        self, indices: Iterable[int] | None = None, server_mem: Mapping[int, float] | None = None
    ) -> list[GpuReading] | None:
        """Memory used and utilisation of the GPUs ``indices`` (NVML indices, default all).
        ``server_mem`` ({index: MiB} from :meth:`process_memory`) fills ``server_mem_mib``: 0.0 on a
        listed GPU where the server has no process, None when ``server_mem`` is None."""
        if not self.available:
            return None
        nv = self._nvml
        out: list[GpuReading] = []
        for i in range(len(self._handles)) if indices is None else indices:
            if not 0 <= i < len(self._handles):
                continue
            h = self._handles[i]
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
            try:
                energy: int | None = int(nv.nvmlDeviceGetTotalEnergyConsumption(h))
            except Exception:
                energy = None
            own = None if server_mem is None else float(server_mem.get(i, 0.0))
            out.append(
                GpuReading(
                    index=i, mem_used_mib=round(used_mib, 1), util_pct=util, server_mem_mib=own, energy_mj=energy
                )
            )
        return out

    def close(self) -> None:
        if self._nvml is None:
            return
        _close(self._nvml)
        self._nvml = None
        self._handles = []


def read_gpu_mem_used_mib(env: Mapping[str, str] | None = None) -> dict[int, float] | None:
    """{NVML index: memory used, MiB} now, of the GPUs this process's ``CUDA_VISIBLE_DEVICES``
    (or ``env``'s) lets a server see — every GPU when it is unset — so that two harness runs on
    two GPUs of one host (``CUDA_VISIBLE_DEVICES=0`` / ``=1``) do not see each other's servers in
    their cooldown. None when there is no GPU."""
    reader = GpuReader()
    try:
        if not reader.available:
            return None
        readings = reader.read(reader.select(env).indices)
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
            gpus.append(
                {
                    "index": i,
                    "name": _text(nv.nvmlDeviceGetName(h)),
                    "memory_total_mib": int(mem.total // 2**20),
                    "driver": driver,
                }
            )
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

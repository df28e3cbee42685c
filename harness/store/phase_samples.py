"""A summary's ``sampling`` section as typed, read-only objects: `SamplingSummary` → per phase
`PhaseSamples` (with its `StorageIO` and `GpuSelection`), what `harness.analysis.samples` wrote.

Parsed once, with the summary it belongs to (`harness.store.summary`, whose file the migration
hook has already brought up to today's version). Lenient on purpose, as the report always was: a
figure an older sampler did not record, or one that is not a number, reads as None (a mapping as
{}), never a crash; numbers keep their stored type (an int stays an int, so the report prints it
as before). ``raw`` keeps a phase's stored object for the one reader that names a figure by its
stored key (a scenario check's ``sampling.<phase>.<key>``, `harness.analysis.expectations`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

Json = Mapping[str, Any]

STORAGE_OPS = ("prefetch", "backup")  # sglang's per-operation storage bandwidth histograms


def _num(v: Any) -> float | None:
    return v if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _obj(v: Any) -> Json:
    return v if isinstance(v, Mapping) else {}


def _numbers(v: Any) -> Mapping[str, float]:
    return {str(k): x for k, x in _obj(v).items() if _num(x) is not None}


@dataclass(frozen=True)
class StorageIO:
    """A phase's storage-tier (L3) figures (`harness.analysis.samples.storage_io`)."""

    prefetched_tokens: float | None
    backuped_tokens: float | None
    ops: Mapping[str, float]  # {"prefetch" | "backup": operations}
    gbs: Mapping[str, float | None]  # {"prefetch" | "backup": mean GB/s over its operations}

    @classmethod
    def from_json(cls, data: Any) -> StorageIO | None:
        if not isinstance(data, Mapping):
            return None
        return cls(
            prefetched_tokens=_num(data.get("prefetched_tokens")),
            backuped_tokens=_num(data.get("backuped_tokens")),
            ops={op: _num(data.get(f"{op}_ops")) or 0.0 for op in STORAGE_OPS},
            gbs={op: _num(data.get(f"{op}_gbs")) for op in STORAGE_OPS},
        )


@dataclass(frozen=True)
class GpuSelection:
    """How the sampler chose the GPUs it read (the last ``gpu_selection`` record of the phase)."""

    how: str | None

    @classmethod
    def from_json(cls, data: Any) -> GpuSelection | None:
        if not data:
            return None
        how = data.get("how") if isinstance(data, Mapping) else None
        return cls(str(how) if how else None)


@dataclass(frozen=True)
class PhaseSamples:
    """One phase's system figures (`harness.analysis.samples.summarize_samples`); kib, KB/s, MiB."""

    n_samples: int | None
    duration_s: float | None
    min_mem_available_kib: float | None
    min_cached_kib: float | None
    max_mlocked_kib: float | None
    mean_pswpin_kib_s: float | None
    max_pswpin_kib_s: float | None
    max_server_rss_kib: float | None
    max_storage_dir_kib: float | None  # the storage tier's directory
    peak_gpu_mem_used_mib: Mapping[str, float]  # {GPU index: MiB}
    gpus_sampled: tuple[str, ...]  # () in a run recorded before the field
    gpu_selection: GpuSelection | None
    counter_deltas: Mapping[str, float]  # {series: increase over the phase}
    storage: StorageIO | None  # None without storage series
    energy_j: float | None  # `harness.analysis.samples.phase_energy`: NVML's, else the simulator's
    energy_source: str | None  # "nvml" | "simulated"
    raw: Json  # the phase's stored object

    def value(self, key: str) -> Any:
        """A figure by its stored key (None when absent): what a scenario check names."""
        return self.raw.get(key)

    @classmethod
    def from_json(cls, data: Any) -> PhaseSamples:
        d = _obj(data)
        sampled = d.get("gpus_sampled")
        return cls(
            n_samples=_num(d.get("n_samples")),
            duration_s=_num(d.get("duration_s")),
            min_mem_available_kib=_num(d.get("min_mem_available_kib")),
            min_cached_kib=_num(d.get("min_cached_kib")),
            max_mlocked_kib=_num(d.get("max_mlocked_kib")),
            mean_pswpin_kib_s=_num(d.get("mean_pswpin_kib_s")),
            max_pswpin_kib_s=_num(d.get("max_pswpin_kib_s")),
            max_server_rss_kib=_num(d.get("max_server_rss_kib")),
            max_storage_dir_kib=_num(d.get("max_storage_dir_kib")),
            peak_gpu_mem_used_mib=_numbers(d.get("peak_gpu_mem_used_mib")),
            gpus_sampled=tuple(str(i) for i in sampled) if isinstance(sampled, list) else (),
            gpu_selection=GpuSelection.from_json(d.get("gpu_selection")),
            counter_deltas=_numbers(d.get("counter_deltas")),
            storage=StorageIO.from_json(d.get("storage")),
            energy_j=_num(d.get("energy_j")),
            energy_source=d.get("energy_source") if isinstance(d.get("energy_source"), str) else None,
            raw=d,
        )


@dataclass(frozen=True)
class SamplingSummary:
    """A variant's ``sampling`` section: its phases in order, and whose host they read."""

    phases: Mapping[str, PhaseSamples]
    host: str | None  # an external server: the host its samples are of
    server_host_sampled: bool | None  # False: a remote server, these are this machine's figures

    @classmethod
    def from_json(cls, data: Any) -> SamplingSummary:
        d = _obj(data)
        host = d.get("host")
        sampled = d.get("server_host_sampled")
        return cls(
            phases={str(ph): PhaseSamples.from_json(p) for ph, p in _obj(d.get("phases")).items()},
            host=host if host else None,
            server_host_sampled=sampled if isinstance(sampled, bool) else None,
        )

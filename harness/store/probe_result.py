"""The platform probe's result as a run stored it (the manifest's ``probe``, or a run folder's
``probe.json``; written by `harness.probe.run`): `ProbeResult`, frozen, parsed once for its
readers (the report's platform rows and load-back / storage fractions, compare's night changes).

Lenient as its readers always were: a probe an older harness did not run is None (a mapping {});
stored values keep their type. ``raw`` is the stored object.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from harness.store.stored_fields import from_keys

Json = Mapping[str, Any]


def _obj(v: Any) -> Json:
    return v if isinstance(v, Mapping) else {}


@dataclass(frozen=True)
class ProbeDevice:
    index: Any
    name: Any
    pageable_memory_access: Any
    uses_host_page_tables: Any
    hmm_or_ats: Any


@dataclass(frozen=True)
class ProbeResult:
    wsl: Any
    torch_version: Any
    cuda_runtime: Any
    driver: Any  # ``nvidia_driver``, else ``driver_version``
    devices: tuple[ProbeDevice, ...]
    host_register_ok: Mapping[str, bool]  # {cudaHostRegister flags: a kernel's write through it worked}
    host_alloc_ok: bool | None  # None: not probed
    bandwidth_gbs: Mapping[str, Any]  # {pinned_h2d, ...: GB/s}, in the stored order
    disk_read_gbs: Any
    disk_write_gbs: Any
    reason: Any
    raw: Json

    @classmethod
    def from_json(cls, data: Any) -> ProbeResult | None:
        if not data or not isinstance(data, Mapping):
            return None
        disk = _obj(data.get("disk"))
        alloc = data.get("host_alloc_kernel_write")
        return from_keys(
            cls,
            data,
            driver=data.get("nvidia_driver") or data.get("driver_version"),
            devices=tuple(
                ProbeDevice(
                    d.get("index"),
                    d.get("name"),
                    d.get("pageable_memory_access"),
                    d.get("pageable_memory_access_uses_host_page_tables"),
                    d.get("hmm_or_ats"),
                )
                for d in data.get("devices") or ()
            ),
            host_register_ok={
                str(k): bool(_obj(v).get("ok")) for k, v in _obj(data.get("host_register_kernel_write")).items()
            },
            host_alloc_ok=bool(_obj(alloc).get("ok")) if alloc else None,
            bandwidth_gbs=_obj(data.get("bandwidth_gbs")),
            disk_read_gbs=disk.get("read_gbs"),
            disk_write_gbs=disk.get("write_gbs"),
            raw=data,
        )

"""The safe-ratio boundary: the highest ``hicache.ratio`` (or ``size_gb``) that starts, and the
highest that leaves the host its page cache, from a variant's preflight record (pure, but for
`host_figures`, which reads the host).

Two cliffs, seed 000's (32 GB host, TP2): ratio 2 was refused at load time; forced, it started and
swapped at idle (pinned 10.3 GB, MemAvailable 3.7 GB, page cache 589 MB), where ratio 1 did not.

- **Starts**: sglang's rule (`harness.run.hostpool.check_budget`: the KV pool, then the mamba pool,
  within ``(MemAvailable at weight-load time - reserve) / ranks on the host``), and the container's
  memory limit (`harness.host.cgroup`): sglang reads the host's MemAvailable, not the cgroup's, so
  a pool every rank pins that exceeds the cgroup's headroom passes sglang's check and is OOM-killed
  while it allocates. MemAvailable at load time = MemAvailable now - ``load_dip`` (what the loader
  takes while weights load; seed 000's box fell to 565 MB).
- **Keeps the page cache**: pinned pages cannot be reclaimed or swapped, so the kernel makes room
  for them from the page cache and then from other processes' memory (swap-out, then swap-in at
  idle). Every rank's pool must leave ``MemAvailable now - pinned >= floor``, the floor being the
  page cache the host needs (``preflight.page_cache_floor_gib``; default the page cache it holds
  before launch, Cached - Shmem); inside a cgroup the same within its headroom.

Each limit is the highest value on the grid of ``step`` (the knob's unit) that passes; the value a
step above is where it fails, with the reason (the cliff). The pool at a ratio is
`harness.run.hostpool.predict_host_pool`'s, rebuilt from the record's byte sizes, so alignment,
the mamba pool and the ``--hicache-size`` split are the preflight's own.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Callable, Literal, Mapping

from harness.host import cgroup, procfs
from harness.run.gpu_pool import GIB, pool_args_from_server_args
from harness.run.hostpool import GB, check_budget, predict_host_pool, preflight_variant

if TYPE_CHECKING:
    from harness.scenario.models import Scenario, Variant

Knob = Literal["ratio", "size_gb"]
MAX_STEPS = 1 << 16  # the search never looks past 65536 steps (ratio 16384 at 0.25)


@dataclass(frozen=True)
class HostFigures:
    """What the host offers, read before launch (kiB / bytes)."""

    mem_available_kib: int  # now, idle
    load_dip_kib: int  # MemAvailable's drop while weights load
    page_cache_kib: int | None  # Cached - Shmem now
    cgroup_limit_bytes: int | None
    cgroup_usage_bytes: int | None
    source: str

    @property
    def at_load_kib(self) -> int:
        return max(0, self.mem_available_kib - self.load_dip_kib)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Limit:
    """The highest value that passes (None: not even one step does) and why the next one fails."""

    value: float | None
    next_value: float
    binding: str  # "sglang" | "cgroup" | "page_cache" | "none"
    reason: str
    pinned_gb_at_value: float | None  # every rank's pool at `value`, GB


@dataclass(frozen=True)
class RatioBoundary:
    knob: Knob
    step: float
    ranks_on_host: int
    floor_gib: float
    floor_source: str
    starts: Limit
    keeps_page_cache: Limit
    host: HostFigures

    @property
    def safe(self) -> float | None:
        vals = [v for v in (self.starts.value, self.keeps_page_cache.value) if v is not None]
        return min(vals) if len(vals) == 2 else None

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["safe"] = self.safe
        return d


def _unit(knob: str) -> str:
    return "ratio" if knob == "ratio" else "size_gb"


def boundary_line(name: str, b: Mapping[str, Any] | None) -> str | None:
    """One console line: ``boundary: V: starts up to ratio 1.75 (2.00: <why>); keeps the page cache
    up to 1.25 (1.50: <why>)``."""
    if not b:
        return None
    unit = _unit(b["knob"])

    def part(lim: Mapping[str, Any], what: str) -> str:
        value = lim.get("value")
        head = f"{what} up to {unit} {value:g}" if value is not None else f"{what} at no {unit} of step {b['step']:g}"
        return f"{head} ({lim['next_value']:g}: {lim['reason']})"

    return f"boundary: {name}: {part(b['starts'], 'starts')}; {part(b['keeps_page_cache'], 'keeps the page cache')}"


class _Shape:
    """`hostpool.ShapeLike` from a prediction's recorded byte sizes."""

    def __init__(self, kv_bytes_per_token: int, mamba_bytes_per_slot: int, hybrid: bool) -> None:
        self._kv, self._mamba, self.is_hybrid = kv_bytes_per_token, mamba_bytes_per_slot, hybrid

    def kv_bytes_per_token(self, tp_size: int = 1, kv_dtype_bytes: float | None = None) -> int:
        return self._kv

    def mamba_bytes_per_slot(self, tp_size: int = 1) -> int:
        return self._mamba


def _highest(passes: Callable[[float], str | None], step: float) -> tuple[float | None, float, str]:
    """The highest k*step (k >= 1) for which ``passes`` returns None (a monotone test: once a value
    fails, every higher one does), the value after it and its failure reason."""
    if (why := passes(step)) is not None:
        return None, step, why
    lo, hi = 1, 2
    while hi < MAX_STEPS and passes(hi * step) is None:
        lo, hi = hi, hi * 2
    if hi >= MAX_STEPS and passes(hi * step) is None:
        return round(hi * step, 6), round((hi + 1) * step, 6), "no limit found"
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if passes(mid * step) is None:
            lo = mid
        else:
            hi = mid
    nxt = round((lo + 1) * step, 6)
    return round(lo * step, 6), nxt, passes(nxt) or ""


def boundary(
    record: Mapping[str, Any],
    host: HostFigures,
    *,
    step: float,
    floor_gib: float | None = None,
    mamba_size_gb: float | None = None,
) -> RatioBoundary | None:
    """The boundary of a variant from its preflight record (`hostpool.preflight_variant`); None when
    HiCache is off or the pool is not predictable yet (the device pool unknown)."""
    pred = record.get("prediction") or {}
    if not pred or not pred.get("hicache_enabled") or not pred.get("known"):
        return None
    knob: Knob = "size_gb" if pred.get("source") == "size_gb" else "ratio"
    ranks = max(1, int(record.get("ranks_on_host") or 1))
    reserve = float(record.get("reserve_gib") or 0.0)
    shape = _Shape(
        int(pred["kv_bytes_per_token"]),
        int(pred.get("mamba_bytes_per_slot") or 0),
        bool(pred.get("mamba_host_slots") is not None),
    )
    floor_source = "preflight.page_cache_floor_gib"
    if floor_gib is None:
        floor_gib = (host.page_cache_kib or 0) / 1024**2
        floor_source = f"the page cache before launch ({host.source})"
    floor = int(floor_gib * GIB)
    headroom = host.cgroup_limit_bytes - (host.cgroup_usage_bytes or 0) if host.cgroup_limit_bytes is not None else None

    def predict(x: float):
        return predict_host_pool(
            shape,
            {knob: x},
            pred.get("device_pool_tokens"),
            int(pred.get("tp_size") or 1),
            page_size=int(pred.get("page_size") or 1),
            mamba_device_slots=pred.get("mamba_device_slots"),
            size_split="proportional" if pred.get("size_split") == "proportional" else "each",
            mamba_size_gb=mamba_size_gb,
        )

    def pinned(x: float) -> int:
        return ranks * int(predict(x).total_bytes_per_rank or 0)

    def starts(x: float) -> str | None:
        res = check_budget(predict(x), host.at_load_kib, reserve, ranks)
        if res.fits is False:
            return f"sglang refuses it: {res.reason.removeprefix('does not fit: ')}"
        if headroom is not None and pinned(x) > headroom:
            return (
                f"{pinned(x) / GB:.2f} GB pinned by {ranks} rank{'s' if ranks != 1 else ''} exceeds the "
                f"container's {headroom / GB:.2f} GB headroom (cgroup limit - usage): OOM-killed while it "
                f"allocates (sglang reads the host's MemAvailable, not the cgroup's)"
            )
        return None

    def keeps(x: float) -> str | None:
        p = pinned(x)
        left = host.mem_available_kib * 1024 - p
        if left < floor:
            return (
                f"{p / GB:.2f} GB pinned leaves {max(0, left) / GB:.2f} GB of MemAvailable, under the "
                f"{floor / GB:.2f} GB page-cache floor: page cache pushed out, swap-in at idle"
            )
        if headroom is not None and headroom - p < floor:
            return (
                f"{p / GB:.2f} GB pinned leaves {max(0, headroom - p) / GB:.2f} GB of the container's headroom, "
                f"under the {floor / GB:.2f} GB page-cache floor"
            )
        return None

    def limit(test: Callable[[float], str | None], default_binding: str) -> Limit:
        value, nxt, why = _highest(test, step)
        binding = "none" if why == "no limit found" else ("cgroup" if "container" in why else default_binding)
        return Limit(
            value=value,
            next_value=nxt,
            binding=binding,
            reason=why,
            pinned_gb_at_value=round(pinned(value) / GB, 3) if value is not None else None,
        )

    return RatioBoundary(
        knob=knob,
        step=step,
        ranks_on_host=ranks,
        floor_gib=round(floor_gib, 3),
        floor_source=floor_source,
        starts=limit(starts, "sglang"),
        keeps_page_cache=limit(keeps, "page_cache"),
        host=host,
    )


def host_figures(scenario: Scenario, record: Mapping[str, Any]) -> HostFigures:
    """The host's figures for a variant's boundary: the simulated host's (``server.sim.host``) for
    the simulator, else /proc/meminfo and the cgroup. MemAvailable is the one the preflight record
    read (before the load dip)."""
    dip_gib = scenario.preflight.load_dip_gib
    sim = scenario.server.sim
    sim_host = sim.host if sim is not None else None
    if scenario.server.backend == "sim" and sim_host is not None:
        dip = dip_gib if dip_gib is not None else sim_host.load_dip_gib
        limit = int(sim_host.cgroup_limit_gib * GIB) if sim_host.cgroup_limit_gib is not None else None
        return HostFigures(
            mem_available_kib=int(record.get("mem_available_idle_kib") or record["mem_available_kib"]),
            load_dip_kib=int(dip * 1024**2),
            page_cache_kib=int(sim_host.page_cache_gib * 1024**2),
            cgroup_limit_bytes=limit,
            cgroup_usage_bytes=0 if limit is not None else None,
            source="server.sim.host",
        )
    try:
        mi = procfs.read_meminfo(fields=("Cached", "Shmem"))
        page_cache = max(0, mi.get("Cached", 0) - mi.get("Shmem", 0)) if "Cached" in mi else None
    except OSError:
        page_cache = None
    cg = cgroup.read_memory_limit()
    return HostFigures(
        mem_available_kib=int(record.get("mem_available_idle_kib") or record["mem_available_kib"]),
        load_dip_kib=int((dip_gib or 0.0) * 1024**2),
        page_cache_kib=page_cache,
        cgroup_limit_bytes=cg.limit_bytes if cg is not None else None,
        cgroup_usage_bytes=cg.usage_bytes if cg is not None else None,
        source="/proc/meminfo" + (f", cgroup v{cg.version} {cg.path}" if cg is not None else ""),
    )


def for_record(scenario: Scenario, variant: Variant, record: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The boundary (JSON-ready) for a variant's preflight record, None when there is none."""
    if not record or variant.hicache is None:
        return None
    pre = scenario.preflight
    b = boundary(
        record,
        host_figures(scenario, record),
        step=pre.boundary_step,
        floor_gib=pre.page_cache_floor_gib,
        mamba_size_gb=pool_args_from_server_args(dict(variant.args)).mamba_size_gb,
    )
    return b.to_dict() if b is not None else None


def boundary_lines(scenario: Scenario, variants: list) -> list[str]:
    """The safe-ratio boundary of each HiCache variant, one line each (``--dry-run``, ``validate``):
    predicted before launch, so a device pool sglang sizes itself is the preflight's prediction."""
    lines = []
    for v in variants:
        if v.backend == "external" or v.hicache is None:
            continue
        record = preflight_variant(scenario, v)
        b = for_record(scenario, v, record)
        if b is not None:
            lines.append(boundary_line(v.name, b) or "")
        elif record is not None:
            lines.append(f"boundary: {v.name}: not predicted: {record.get('reason')}")
    return lines

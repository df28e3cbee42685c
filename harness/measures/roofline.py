"""Pure: the floor a host or storage hit could reach, and how far above it each one landed.

A request served from the host tier has to bring its hit's KV bytes over PCIe and compute the
rest of its prompt; nothing can make it faster than

    floor = host tokens x KV bytes/token / pinned H2D
          + storage tokens x KV bytes/token x (1 / storage read + 1 / pinned H2D)
          + uncached suffix tokens / the variant's own cold prefill rate

(a storage hit is read into the host pool, then loaded to the GPU; device-tier tokens cost
nothing here). The KV bytes per token are the preflight's, from the model's ``config.json``
(`harness.core.model_config`: per TP rank, as each rank loads its own share over its own link); the
bandwidths are what ``harness probe`` measured on this host (``probe.bandwidth_gbs.pinned_h2d``,
``probe.disk.read_gbs``) or, on the simulator, the bandwidths of the host it pretends to be
(its ``/get_server_info`` ``sim`` block: its cost model's platform H2D and storage read, over its
time scale). The cold rate is the median prompt tokens / TTFT of the same workload's requests
that got nothing cached (else of the variant's).

The floor leaves out fixed per-request costs (scheduling, the first decode step, HTTP), so a short
prompt reads well above 1 even when healthy; a layout whose load-back runs at a few per cent of the
link (sglang 0.5.17's page_first + direct, silently page_first_direct: 1.46 GB/s of 55.4) reads
tens of times above it.

`phase_roofline` gives, for one phase that got host or storage hits: the floor, the achieved
TTFT (a concurrent pass: its first-token wall, last first token - first send), the queueing in it
where the server reported it (``queue_ms``: sglang's ``meta_info.queue_time``, `unit_queue_s`;
``queue_reported`` hit requests had one), achieved / floor,
and what recomputing the same prompts would take at the cold rate (``vs_recompute`` > 1: the
hit was slower than computing it again). `worse_than_off` compares a HiCache variant's hit
phases with its own recompute and with HiCache OFF's same phase: what the verdict warns of.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from harness.measures import metrics as M
from harness.store.records import RequestRecord
from harness.store.summary import PhaseSummary, Summary

# A hit slower than recompute (or than OFF's same phase) by more than both of these is "worse than
# off": 5 % (noise between two servers) and 50 ms (a loaded client's and server's scheduling noise
# on a short prompt; the H200 page_first + direct case was 1,600 ms over its recompute).
WORSE_MARGIN = 0.05
WORSE_MIN_MS = 50.0


@dataclass(frozen=True)
class Platform:
    """What a hit's floor is made of: KV bytes per token per rank and the links' bandwidths."""

    kv_bytes_per_token: float | None
    h2d_gbs: float | None
    h2d_source: str | None = None  # "probe pinned H2D" | "simulated host"
    storage_read_gbs: float | None = None
    storage_source: str | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _pos(v: Any) -> float | None:
    if v is None or isinstance(v, bool):
        return None
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) and f > 0 else None


def platform_for(
    probe: Mapping[str, Any] | None, preflight: Mapping[str, Any] | None, server_info: Mapping[str, Any] | None
) -> Platform:
    """The platform of one variant: KV bytes per token from its preflight's prediction (else the
    server's own ``kv_bytes_per_token``), bandwidths from the run's probe, else from a simulated
    server's declared host. Missing figures stay None (no floor then, never a guess)."""
    pred = (preflight or {}).get("prediction") or {}
    info = server_info or {}
    bpt = _pos(pred.get("kv_bytes_per_token")) or _pos(info.get("kv_bytes_per_token"))
    h2d = _pos(((probe or {}).get("bandwidth_gbs") or {}).get("pinned_h2d"))
    h2d_source = "probe pinned H2D" if h2d else None
    disk = _pos(((probe or {}).get("disk") or {}).get("read_gbs"))
    disk_source = "probe disk read" if disk else None
    sim = info.get("sim") if info.get("simulated") else None
    if isinstance(sim, Mapping):
        if h2d is None and _pos(sim.get("platform_h2d_gbs")):
            h2d, h2d_source = _pos(sim.get("platform_h2d_gbs")), "simulated host"
        if disk is None and _pos(sim.get("platform_storage_read_gbs")):
            disk, disk_source = _pos(sim.get("platform_storage_read_gbs")), "simulated host"
    return Platform(bpt, h2d, h2d_source, disk, disk_source)


def _ttft_s(r: RequestRecord) -> float | None:
    if r.first_token_ns is None:
        return None
    return (r.first_token_ns - r.sent_ns) / 1e9


def _measured(records: Iterable[RequestRecord]) -> list[RequestRecord]:
    return [r for r in records if not r.warmup and r.error is None and r.first_token_ns is not None]


def cold_prefill_rate(records: Iterable[RequestRecord]) -> float | None:
    """Median prefill rate (tokens/s) of the measured requests that got nothing cached (the server
    said 0 cached tokens): prompt tokens / TTFT one by one, and a concurrent pass (a concurrency
    group) whose requests all got nothing as one unit, its prompt tokens / its first-token wall
    (its requests queue behind each other: one by one they would read slow). None when none."""
    rates = []
    groups: dict[str, list[RequestRecord]] = {}
    for r in _measured(records):
        if r.concurrency_group is not None:
            groups.setdefault(r.concurrency_group, []).append(r)
            continue
        t, n = _ttft_s(r), M.prompt_token_count(r)
        if r.cached_tokens == 0 and t and t > 0 and n:
            rates.append(n / t)
    for rs in groups.values():
        if all(r.cached_tokens == 0 for r in rs):
            wall = (max(r.first_token_ns for r in rs) - min(r.sent_ns for r in rs)) / 1e9  # type: ignore[type-var]
            n = sum(M.prompt_token_count(r) or 0 for r in rs)
            if wall > 0 and n:
                rates.append(n / wall)
    return statistics.median(rates) if rates else None


def _tokens(r: RequestRecord) -> tuple[int, int, int]:
    """(host, storage, uncached) tokens of one request."""
    n = M.prompt_token_count(r) or 0
    host, storage = r.cached_host or 0, r.cached_storage or 0
    return host, storage, max(0, n - (r.cached_tokens or 0))


def request_floor_s(r: RequestRecord, platform: Platform, cold_rate: float | None) -> float | None:
    """The fastest this request's prefill could be (see the module docstring); None without the
    figures it needs."""
    host, storage, suffix = _tokens(r)
    bpt, h2d, sr = platform.kv_bytes_per_token, platform.h2d_gbs, platform.storage_read_gbs
    if (host or storage) and (bpt is None or h2d is None):
        return None
    if storage and sr is None:
        return None
    if suffix and cold_rate is None:
        return None
    s = 0.0
    if host or storage:
        s += (host + storage) * bpt / (h2d * 1e9)  # type: ignore[operator]
    if storage:
        s += storage * bpt / (sr * 1e9)  # type: ignore[operator]
    if suffix:
        s += suffix / cold_rate  # type: ignore[operator]
    return s


def _median(xs: Sequence[float]) -> float | None:
    return statistics.median(xs) if xs else None


def _ms(x: float | None) -> float | None:
    return None if x is None else x * 1e3


def unit_queue_s(unit: Sequence[RequestRecord]) -> float | None:
    """The queueing inside one unit's achieved time, from sglang's ``meta_info.queue_time``: a
    request's own; a concurrent pass's, that of the request whose first token came last (the one
    that ends the pass's first-token wall). None when that request's server sent none."""
    last = max((r for r in unit if r.first_token_ns is not None), key=lambda r: r.first_token_ns or 0, default=None)
    return None if last is None else last.queue_time_s


def phase_roofline(
    records: Sequence[RequestRecord], platform: Platform | None, cold_rate: float | None, cold_source: str
) -> dict[str, Any] | None:
    """The roofline of one phase's records (None when no measured request got a host or storage
    hit). Sequential requests are judged one by one (medians); a phase of concurrent passes
    (concurrency groups) by each pass's first-token wall against the sum of its requests' floors."""
    rs = _measured(records)
    hit = [r for r in rs if (r.cached_host or 0) + (r.cached_storage or 0) > 0]
    if not hit:
        return None
    platform = platform or Platform(None, None)
    tier = "storage" if any((r.cached_storage or 0) > 0 for r in hit) else "host"
    host_tokens = sum(r.cached_host or 0 for r in hit)
    storage_tokens = sum(r.cached_storage or 0 for r in hit)
    bpt = platform.kv_bytes_per_token
    groups: dict[str, list[RequestRecord]] = {}
    for r in rs:
        if r.concurrency_group is not None:
            groups.setdefault(r.concurrency_group, []).append(r)
    achieved: list[float] = []
    queued: list[float] = []
    floors: list[float] = []
    ratios: list[float] = []
    recompute: list[float] = []
    units = list(groups.values()) if groups else [[r] for r in hit]
    for unit in units:
        first = [r.first_token_ns for r in unit if r.first_token_ns is not None]
        a = (max(first) - min(r.sent_ns for r in unit)) / 1e9
        q = unit_queue_s(unit)
        if q is not None:
            queued.append(q)
        f_parts = [request_floor_s(r, platform, cold_rate) for r in unit]
        achieved.append(a)
        if all(f is not None for f in f_parts):
            f = sum(f_parts)  # type: ignore[arg-type]
            floors.append(f)
            if f > 0:
                ratios.append(a / f)
        if cold_rate:
            recompute.append(sum((M.prompt_token_count(r) or 0) for r in unit) / cold_rate)
    a50, f50, c50 = _median(achieved), _median(floors), _median(recompute)
    # sglang 0.5.17 reports a declined load-back's host hit all the same (host = host_hit_length)
    # while cached_tokens counts only what it reused: the breakdown's excess was recomputed
    recomputed = [
        max(0, (r.cached_device or 0) + (r.cached_host or 0) + (r.cached_storage or 0) - (r.cached_tokens or 0))
        for r in hit
    ]
    return {
        "tier": tier,
        "concurrent": bool(groups),
        "n": len(units),
        "hit_requests": len(hit),
        "host_tokens": host_tokens,
        "storage_tokens": storage_tokens,
        "kv_bytes": (host_tokens + storage_tokens) * bpt if bpt else None,
        "achieved_ms": _ms(a50),
        "queue_ms": _ms(_median(queued)),
        "queue_reported": sum(1 for r in hit if r.queue_time_s is not None),
        "floor_ms": _ms(f50),
        "ratio": _median(ratios),
        "recompute_ms": _ms(c50),
        "vs_recompute": (a50 / c50) if a50 is not None and c50 else None,
        "recomputed_tokens": sum(recomputed),
        "recomputed_requests": sum(1 for x in recomputed if x > 0),
        "cold_tok_s": cold_rate,
        "cold_source": cold_source if cold_rate else None,
        **{k: v for k, v in platform.to_json().items() if k != "kv_bytes_per_token"},
        "kv_bytes_per_token": bpt,
    }


def workload_rooflines(
    by_phase: Mapping[str, Sequence[RequestRecord]],
    platform: Platform | None,
    variant_cold_rate: float | None,
    filler: Iterable[str] = (),
) -> dict[str, dict[str, Any]]:
    """{phase: its roofline} of one workload's phases that got host or storage hits (filler left
    out), with the workload's own cold rate (its uncached non-filler requests; else the variant's)."""
    skip = set(filler)
    # filler (eviction traffic) is never a figure's reference: its prefills evict as they go
    own = cold_prefill_rate(r for p, rs in by_phase.items() if p not in skip for r in rs)
    rate, source = (own, "this workload's uncached requests") if own else (variant_cold_rate, "the variant's")
    out = {}
    for phase, rs in by_phase.items():
        if phase in skip:
            continue
        roof = phase_roofline(rs, platform, rate, source)
        if roof is not None:
            out[phase] = roof
    return out


# -- worse than off ------------------------------------------------------------------------------


@dataclass(frozen=True)
class WorseThanOff:
    """A hit phase of a HiCache variant that was slower than recompute: its own, or OFF's."""

    variant: str
    workload: str
    phase: str
    tier: str
    achieved_ms: float
    against: str  # "own recompute" | the OFF variant's name
    against_ms: float
    floor_ms: float | None

    @property
    def text(self) -> str:
        what = "its own recompute" if self.against == "own recompute" else f"HiCache off ({self.against})"
        floor = f"; floor {self.floor_ms:,.1f} ms" if self.floor_ms else ""
        return (
            f"worse than off: {self.workload}/{self.phase} ({self.tier} hits) took {self.achieved_ms:,.1f} ms, "
            f"{self.achieved_ms / self.against_ms:.2f}x {what} {self.against_ms:,.1f} ms{floor}"
        )

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "text": self.text}


def _comparable_ms(phase: PhaseSummary) -> float | None:
    """What a phase is compared with OFF's by: its pass wall p50 (concurrent passes), else TTFT p50."""
    for name in ("pass_wall_s", "ttft_ms"):
        p50 = phase.stat(name)
        if p50 is not None:
            return float(p50) * (1e3 if name == "pass_wall_s" else 1.0)
    return None


def _worse(mine_ms: float, against_ms: float) -> bool:
    return mine_ms > against_ms * (1 + WORSE_MARGIN) and mine_ms - against_ms > WORSE_MIN_MS


def worse_than_off(summaries: Mapping[str, Summary | None], off: str | None) -> list[WorseThanOff]:
    """Every hit phase (one with a ``roofline``: it got host or storage hits) of a variant other than
    ``off`` that was slower than its own recompute (achieved over recompute by more than
    ``WORSE_MARGIN`` and ``WORSE_MIN_MS``), or than the OFF variant's same phase (pass wall, else
    TTFT p50, by as much)."""
    out: list[WorseThanOff] = []
    off_summary = summaries.get(off) if off else None
    for name, summary in summaries.items():
        if name == off or summary is None:
            continue
        for wl, w in (summary.workloads or {}).items():
            for phase, p in w.phases.items():
                roof = p.roofline
                if not roof:
                    continue
                tier, floor = str(roof.get("tier") or "host"), roof.get("floor_ms")
                mine, rec = roof.get("achieved_ms"), roof.get("recompute_ms")
                if mine is not None and rec and _worse(mine, rec):
                    out.append(WorseThanOff(name, wl, phase, tier, mine, "own recompute", rec, floor))
                    continue
                op = off_summary.phases(wl).get(phase) if off_summary is not None else None
                mine, theirs = _comparable_ms(p), (_comparable_ms(op) if op else None)
                if mine is not None and theirs and _worse(mine, theirs):
                    out.append(WorseThanOff(name, wl, phase, tier, mine, str(off), theirs, floor))
    return out

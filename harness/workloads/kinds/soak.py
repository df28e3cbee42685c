"""soak: a steady mix of the other kinds' workloads, slice after slice, for a duration; then a slope
test on every memory series the sampler keeps: LEAK / STABLE / INCONCLUSIVE per series.

``mix`` is a list of workload entries of the other kinds (cold_prefill, repeat_prefill, decode,
multi_turn, ... with their own keys); every ``slice_s`` seconds, ``ceil(duration_s / slice_s)``
times, each member runs once in order, with never-seen prompts of its own each slice (a
repeat_prefill's repeats hit its own slice's prompts), and the slice then waits for its end (a
slice whose mix overran starts the next one at once: the soak then lasts longer than
``duration_s``, its slices as many as planned). Each slice is
one sampler phase (``<soak>/slice007``); the records are the soak's, phase ``<member>/<its
phase>`` (``decode/decode``, ``cold_prefill/cold``), so its summary has every member's figures
pooled over the slices.

The series (`SERIES`: unit, which way is bad, how a slice is reduced to one point) are read from
the variant's samples (`harness.run.sampler`): the server's RSS, the host's mlocked memory
(pinned pages registered with mlock; CUDA's pinned host pool counts only where the driver mlocks
it), MemAvailable, the page-cache floor (each slice's minimum of ``Cached``), the swap-in rate,
the variant's GPU memory, the HiCache host pool's occupancy (sglang's
``hicache_host_used_tokens`` / ``hicache_host_total_tokens`` gauges, where the server exports
them) and the storage tier's directory size. The first ``settle_slices`` slices are left out
(pools filling, caches warming); the rest are judged by `harness.measures.slope.judge_trend`
against ``tolerance_per_h`` in each series' unit per hour. A series the variant did not sample
(no GPU, no HiCache, no storage directory) is NOT_MEASURED. ``series`` picks which are judged.

Findings (`harness.analysis.verdict` reads them): a LEAK fails the variant (exit 1), an
INCONCLUSIVE series makes it INCONCLUSIVE (exit 4) unless something failed; STABLE and
NOT_MEASURED change nothing.
"""

from __future__ import annotations

import asyncio
import functools
import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Literal, Union

from pydantic import Field, TypeAdapter, WrapValidator, model_validator

from harness.measures.slope import DEFAULT_LEVEL, INCONCLUSIVE, LEAK, MIN_POINTS, judge_trend
from harness.spec.numbers import count, ranged
from harness.spec.values import ScenarioModel, field_error
from harness.workloads.config import WorkloadConfig
from harness.workloads.context import WorkloadContext, WorkloadScope, phase_label
from harness.workloads.estimating import EstimateContext, WorkEstimate, est
from harness.workloads.kind import WorkloadKind

NOT_MEASURED = "NOT_MEASURED"
SLICE_PREFIX = "slice"


@dataclass(frozen=True)
class Series:
    """One series a soak judges: its unit, which way is a leak, how a slice becomes one point
    (``reduce`` over the slice's readings), and how one sample is read (None: not in it)."""

    name: str
    unit: str
    rising_is_bad: bool
    reduce: Literal["median", "min", "max", "mean"]
    read: Callable[[Mapping[str, Any]], float | None]
    what: str


def _kib_as_mib(key: str) -> Callable[[Mapping[str, Any]], float | None]:
    def read(s: Mapping[str, Any]) -> float | None:
        v = s.get(key)
        return None if v is None else float(v) / 1024.0

    return read


def _gpu_mib(s: Mapping[str, Any]) -> float | None:
    used = [g.get("mem_used_mib") for g in s.get("gpus") or []]
    used = [float(u) for u in used if u is not None]
    return sum(used) if used else None


def _gauge_sum(counters: Mapping[str, float], name: str) -> float | None:
    found = [v for k, v in counters.items() if k.split("{", 1)[0] == name]
    return sum(found) if found else None


def _host_pool_pct(s: Mapping[str, Any]) -> float | None:
    c = s.get("counters") or {}
    used = _gauge_sum(c, "sglang:hicache_host_used_tokens")
    total = _gauge_sum(c, "sglang:hicache_host_total_tokens")
    if used is None or not total:
        return None
    return 100.0 * used / total


def _rate(key: str) -> Callable[[Mapping[str, Any]], float | None]:
    def read(s: Mapping[str, Any]) -> float | None:
        v = s.get(key)
        return None if v is None else float(v)

    return read


SERIES: tuple[Series, ...] = (
    Series("server_rss", "MiB", True, "median", _kib_as_mib("server_rss_kib"), "the server's RSS (its process tree)"),
    Series("mlocked", "MiB", True, "median", _kib_as_mib("mlocked_kib"), "the host's mlocked (pinned) memory"),
    Series("mem_available", "MiB", False, "median", _kib_as_mib("mem_available_kib"), "the host's MemAvailable"),
    Series("page_cache_floor", "MiB", False, "min", _kib_as_mib("cached_kib"), "the page cache's floor (slice min)"),
    Series("swap_in", "KiB/s", True, "mean", _rate("pswpin_kib_s"), "the host's swap-in rate"),
    Series("gpu_memory", "MiB", True, "median", _gpu_mib, "the variant's GPUs' memory used"),
    Series("host_pool", "%", True, "median", _host_pool_pct, "the HiCache host pool's occupancy"),
    Series("storage_dir", "MiB", True, "max", _kib_as_mib("storage_dir_kib"), "the storage tier's directory size"),
)
SERIES_BY_NAME = {s.name: s for s in SERIES}
SeriesName = Literal[
    "server_rss", "mlocked", "mem_available", "page_cache_floor", "swap_in", "gpu_memory", "host_pool", "storage_dir"
]


MibPerH = ranged(float, 1e-6, 1e9, "MiB per hour")


class Tolerances(ScenarioModel):
    """The drift per hour, in each series' bad direction and unit, that a soak accepts."""

    server_rss_mib: MibPerH = 256.0
    mlocked_mib: MibPerH = 256.0
    mem_available_mib: MibPerH = 512.0
    page_cache_floor_mib: MibPerH = 1024.0
    swap_in_kib_s: ranged(float, 1e-6, 1e9, "KiB/s per hour") = 1.0
    gpu_memory_mib: MibPerH = 256.0
    host_pool_pct: ranged(float, 1e-6, 1e6, "% of the pool per hour") = 5.0  # type: ignore[valid-type]
    storage_dir_mib: MibPerH = 1024.0

    def of(self, series: Series) -> float:
        unit = {"MiB": "mib", "KiB/s": "kib_s", "%": "pct"}[series.unit]
        return float(getattr(self, f"{series.name}_{unit}"))


@functools.cache
def _mix_adapter() -> TypeAdapter:
    from harness.workloads import kinds

    others = tuple(k.config for k in kinds().values() if k.config is not Soak)
    return TypeAdapter(list[Annotated[Union[others], Field(discriminator="kind")]])  # type: ignore[valid-type]


def _mix_members(value: Any, handler: Any) -> Any:
    """The mix's entries validated as the other kinds' configs (a soak in a soak is refused; the
    adapter is built on first use: the kinds' union cannot exist while this module is being
    imported by `harness.workloads.kinds`)."""
    return handler(_mix_adapter().validate_python(value))


class Soak(WorkloadConfig):
    """Slices of a steady mix of the other kinds' workloads for ``duration_s``; slope tests on the
    samples (module docstring)."""

    kind: Literal["soak"]
    duration_s: ranged(float, 1.0, 7 * 86400.0, "s") = 600.0  # type: ignore[valid-type]
    slice_s: ranged(float, 0.5, 3600.0, "s") = 30.0  # type: ignore[valid-type]
    mix: Annotated[list[Any], WrapValidator(_mix_members)] = Field(min_length=1)
    settle_slices: count("slices", lo=0) = 2
    min_slices: ranged(int, 3, 100000, "slices") = MIN_POINTS  # type: ignore[valid-type]
    series: list[SeriesName] | None = None  # None: every series
    tolerance_per_h: Tolerances = Tolerances()
    level: ranged(float, 0.5, 0.999, "confidence level (fraction)") = DEFAULT_LEVEL  # type: ignore[valid-type]

    @model_validator(mode="after")
    def _check(self):
        if self.slice_s > self.duration_s:
            raise field_error(f"slice_s ({self.slice_s:g}) is longer than duration_s ({self.duration_s:g})")
        names = [m.name for m in self.mix]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise field_error(f"mix members need distinct names, {dup[0]!r} is used twice")
        timed = [m.name for m in self.mix if m.timeout_s is not None]
        if timed:
            raise field_error(f"mix member {timed[0]!r} has a timeout_s: a soak's members share the soak's own")
        return self

    @property
    def n_slices(self) -> int:
        return max(1, math.ceil(self.duration_s / self.slice_s - 1e-9))

    def judged(self) -> tuple[Series, ...]:
        return SERIES if self.series is None else tuple(SERIES_BY_NAME[n] for n in dict.fromkeys(self.series))

    def longest_request_tokens(self, pool_tokens: int) -> int:
        return max(m.longest_request_tokens(pool_tokens) for m in self.mix)


def slice_label(k: int) -> str:
    return f"{SLICE_PREFIX}{k:03d}"


async def run(ctx: WorkloadContext, cfg: Soak) -> None:
    from harness.workloads import kinds

    declared = kinds()
    w = WorkloadScope(ctx, cfg)
    loop = asyncio.get_running_loop()
    start = loop.time()
    record, set_phase = ctx.record, ctx.set_phase
    try:
        for k in range(cfg.n_slices):
            label = phase_label(w.name, slice_label(k))
            set_phase(label)
            for m in cfg.mix:
                ctx.record = _relabelled(record, w.name, m.name)
                ctx.set_phase = lambda name, detail=None, _l=label: set_phase(_l, name)
                if m.flush_before:
                    await ctx.client.flush_cache()
                await declared[m.kind].run(ctx, m.model_copy(update={"name": f"{m.name}@{k}"}))
                ctx.record, ctx.set_phase = record, set_phase
            wait = start + (k + 1) * cfg.slice_s - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
    finally:
        ctx.record, ctx.set_phase = record, set_phase


def _relabelled(record: Callable[[Any], None], soak: str, member: str) -> Callable[[Any], None]:
    def relabel(rec: Any) -> None:
        rec.workload = soak
        rec.phase = f"{member}/{rec.phase}"
        if rec.concurrency_group:
            rec.concurrency_group = f"{soak}/{rec.concurrency_group}"
        record(rec)

    return relabel


def _reduce(values: list[float], how: str) -> float:
    if how == "median":
        return float(statistics.median(values))
    return float({"min": min, "max": max, "mean": statistics.fmean}[how](values))


def slice_points(cfg: Soak, samples: Sequence[Mapping[str, Any]], series: Series) -> tuple[list[float], list[float]]:
    """(t seconds from the soak's first sample, value) per slice after the settling ones: the
    median time of the slice's samples and ``series.reduce`` over the samples that have it."""
    prefix = phase_label(cfg.name or "", SLICE_PREFIX)
    by_slice: dict[str, list[Mapping[str, Any]]] = {}
    for s in samples:
        ph = str(s.get("phase") or "")
        if ph.startswith(prefix):
            by_slice.setdefault(ph, []).append(s)
    if not by_slice:
        return [], []
    t0 = min(int(s["t_ns"]) for ss in by_slice.values() for s in ss)
    ts, vs = [], []
    for ph in sorted(by_slice)[cfg.settle_slices :]:
        ss = by_slice[ph]
        vals = [v for v in (series.read(s) for s in ss) if v is not None and math.isfinite(v)]
        if not vals:
            continue
        ts.append(statistics.median((int(s["t_ns"]) - t0) / 1e9 for s in ss))
        vs.append(_reduce(vals, series.reduce))
    return ts, vs


def sample_figures(cfg: Soak, samples: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Per judged series its points, slope per hour, interval and verdict; the findings the
    variant's verdict reads (a LEAK: FAIL; INCONCLUSIVE: INCONCLUSIVE)."""
    out: dict[str, Any] = {}
    findings: list[dict[str, str]] = []
    for series in cfg.judged():
        ts, vs = slice_points(cfg, samples, series)
        tol = cfg.tolerance_per_h.of(series)
        entry: dict[str, Any] = {"unit": series.unit, "what": series.what, "t_s": ts, "values": vs}
        if not vs:
            entry.update(verdict=NOT_MEASURED, reason="not in this variant's samples", tolerance_per_h=tol)
            out[series.name] = entry
            continue
        trend = judge_trend(
            ts, vs, tolerance_per_h=tol, rising_is_bad=series.rising_is_bad, min_points=cfg.min_slices, level=cfg.level
        )
        entry.update(trend.to_json())
        out[series.name] = entry
        if trend.verdict in (LEAK, INCONCLUSIVE):
            slope = "" if trend.slope_per_h is None else f" {_interval(trend, series.unit)}:"
            findings.append(
                {
                    "outcome": "FAIL" if trend.verdict == LEAK else "INCONCLUSIVE",
                    "code": f"soak_{trend.verdict.lower()}",
                    "text": f"{cfg.name}: {series.name} {trend.verdict}{slope} {trend.reason}",
                }
            )
    return {"series": out, "findings": findings, "slices": cfg.n_slices, "settle_slices": cfg.settle_slices}


def _interval(trend: Any, unit: str) -> str:
    return (
        f"{trend.slope_per_h:+.4g} {unit}/h [{trend.lo_per_h:+.4g}, {trend.hi_per_h:+.4g}] ({trend.level:.0%} interval)"
    )


def estimate(w: Soak, c: EstimateContext) -> WorkEstimate:
    """Each member's own estimate, once a slice; the soak lasts at least its slices."""
    from harness.workloads import kinds

    declared = kinds()
    parts = [declared[m.kind].estimate(m, c) for m in w.mix if declared[m.kind].estimate is not None]
    n = w.n_slices

    def total(field: str) -> int | None:
        vals = [getattr(p, field) for p in parts]
        return None if any(v is None for v in vals) else n * sum(vals)

    decode = [p.decode_s for p in parts]
    short = []
    clocked = sum(p.clock_s for p in parts) / max(1, c.repeats)  # a slice's members on their own clocks
    if clocked > w.slice_s:
        short.append(
            f"the mix's clocked members last {clocked:g} s, longer than slice_s ({w.slice_s:g} s): every slice "
            f"overruns and the soak lasts at least {n * clocked:g} s, not {w.duration_s:g}"
        )
    if n - w.settle_slices < w.min_slices:
        short.append(
            f"{n} slices of {w.slice_s:g} s leave {max(0, n - w.settle_slices)} after settle_slices "
            f"({w.settle_slices}), fewer than min_slices ({w.min_slices}): every series will be INCONCLUSIVE"
        )
    return est(
        w.name,
        w.kind,
        n * sum(p.requests for p in parts),
        total("sent_tokens"),
        total("computed_tokens"),
        total("expected_tokens"),
        n * sum(p.output_tokens for p in parts),
        None if any(d is None for d in decode) else n * sum(decode),  # type: ignore[misc]
        [*short, *(x for p in parts for x in p.warnings)],
        clock_s=n * w.slice_s * c.repeats,
        idle_s=n * sum(p.idle_s for p in parts),
        notes=[x for p in parts for x in p.notes],
    )


KIND = WorkloadKind(config=Soak, run=run, estimate=estimate, sample_figures=sample_figures)

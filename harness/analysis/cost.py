"""Pure: what a variant costs per million tokens at its SLO goodput, and the cheapest variant
that meets the SLO ("is HiCache worth it here").

With the scenario's ``cost`` prices, a variant's hour costs its GPUs (``gpu_hour_usd`` each), its
HiCache host pool (``host_ram_gb_hour_usd`` a GB of the pool it pinned) and its storage tier
(``storage_tb_month_usd`` a TB of what the storage directory held at most, a month being 730 h).
Its throughput at the SLO is the goodput of its SLO workload (requests meeting every limit per
second at the best load point, `harness.workloads.slo`) times that workload's mean tokens per
request (prompt + generated). $/Mtok = $/h ÷ (Mtok/h). A variant **meets the SLO** when a load
point of it met the SLO at the percentile (its knee is not none) — or, without a sweep, when its
goodput is above zero. The cheapest variant that meets it is named; none when no variant does.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from harness.store.summary import Summary

HOURS_PER_MONTH = 730.0


@dataclass(frozen=True)
class Prices:
    gpu_hour_usd: float
    host_ram_gb_hour_usd: float = 0.0
    storage_tb_month_usd: float = 0.0


@dataclass(frozen=True)
class VariantCost:
    variant: str
    usd_per_hour: float
    gpu_usd_per_hour: float
    host_usd_per_hour: float
    storage_usd_per_hour: float
    goodput_tok_s: float | None
    usd_per_mtok: float | None
    meets_slo: bool
    slo_workload: str | None


def variant_cost(
    variant: str,
    prices: Prices,
    *,
    gpus: int,
    host_pool_gb: float,
    storage_gb: float,
    goodput_tok_s: float | None,
    meets_slo: bool,
    slo_workload: str | None = None,
) -> VariantCost:
    gpu = gpus * prices.gpu_hour_usd
    host = host_pool_gb * prices.host_ram_gb_hour_usd
    storage = storage_gb / 1000.0 * prices.storage_tb_month_usd / HOURS_PER_MONTH
    per_h = gpu + host + storage
    per_mtok = per_h / (goodput_tok_s * 3600.0 / 1e6) if goodput_tok_s else None
    return VariantCost(variant, per_h, gpu, host, storage, goodput_tok_s, per_mtok, meets_slo, slo_workload)


PRICES_HINT = (
    "add `cost: {gpu_hour_usd: …}` to the scenario (host_ram_gb_hour_usd and storage_tb_month_usd optional) "
    "for $ per million tokens and the cheapest variant meeting the SLO"
)


def gpu_hours_per_mtok(gpus: int, goodput_tok_s: float | None) -> float | None:
    """GPU-hours a million tokens take at the SLO goodput: $/Mtok without the prices (GPUs only)."""
    return gpus / (goodput_tok_s * 3600.0 / 1e6) if goodput_tok_s else None


def unpriced_text(base: str | None, work_gpu_s: Mapping[str, float | None]) -> str:
    """The headline's sentence without prices: each variant's GPU time for the run's workloads (the
    same for every variant) against the baseline's, then what to add for a price."""
    b = work_gpu_s.get(base) if base else None
    parts = [
        f"{n} {v / b:.2f}×"
        for n, v in work_gpu_s.items()
        if n != base and b and v is not None  # type: ignore[operator]
    ]
    said = f"GPU time for the same workloads against {base}: {', '.join(parts)}; " if parts else ""
    return f"no prices given: {said}{PRICES_HINT}"


def slo_goodput(summary: Summary | None) -> tuple[str | None, float | None, bool]:
    """(the SLO workload, its goodput in tokens/s, whether it met the SLO) from a variant's
    summary: the first workload with a ``goodput_rps`` derived figure (module docstring)."""
    for wl, entry in (summary.measured if summary is not None else {}).items():
        derived = entry.derived
        if "goodput_rps" not in derived:
            continue
        rps, per_req = derived.get("goodput_rps"), entry.tokens_per_request
        knees = [derived[k] for k in ("knee_rate", "knee_concurrency") if k in derived]
        met = any(k is not None for k in knees) if knees else bool(rps)
        tok_s = rps * per_req if rps and per_req else None
        return wl, tok_s, bool(met and tok_s)
    return None, None, False


def run_costs(costs: list[VariantCost]) -> dict[str, Any]:
    """The run's cost.json body: every variant's cost and the cheapest that meets the SLO, with
    the headline's sentence."""
    meeting = [c for c in costs if c.meets_slo and c.usd_per_mtok is not None]
    best = min(meeting, key=lambda c: c.usd_per_mtok) if meeting else None  # type: ignore[arg-type, return-value]
    if best is None:
        text = "no variant met the SLO: no cheapest variant" if costs else "no variant to price"
    else:
        others = sorted((c for c in meeting if c is not best), key=lambda c: c.usd_per_mtok)  # type: ignore[arg-type, return-value]
        vs = f" (next: {others[0].variant} ${others[0].usd_per_mtok:.4g})" if others else ""
        text = f"cheapest meeting the SLO: {best.variant} at ${best.usd_per_mtok:.4g} per million tokens{vs}"
    return {
        "variants": {c.variant: asdict(c) for c in costs},
        "cheapest": best.variant if best else None,
        "text": text,
    }

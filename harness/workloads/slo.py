"""Service-level objectives of a workload on a clock: which requests met them, goodput, the knee.

``slo: {ttft_ms: 500, tpot_ms: 50}`` (and/or ``e2e_ms``) on a workload that sends on a clock.
Per load point (phase), from its measured requests (`slo_figures`, pure):

- a request **meets** a limit when its value is at most the limit; an errored request meets none;
  a request with one output token has no TPOT and meets a TPOT limit (as vLLM's goodput counts it);
- ``slo_met_fraction``: the share of requests that meet every limit; ``<metric>_slo_met_fraction``
  the share that meet each one;
- ``goodput_rps``: requests that meet every limit per second of the measured window (vLLM
  ``--goodput``, DistServe);
- ``slo_percentile_met``: the phase's p90 (``slo_percentile``: 50, 90, 95 or 99) of every limited
  metric is within its limit, errored requests counting as infinitely slow.

Over the workload (`SLO_DERIVED`, the kinds' derived figures): ``knee_rate`` / ``knee_concurrency``,
the highest load point of the sweep at which that point and every lower one meet the SLO at the
percentile (None when the lowest already misses: "no rate met it", never 0), compared by
``harness compare`` (which judges a None after a missed lowest point as a knee below it,
`harness.compare.curves.knee_below`); ``goodput_rps``, the best point's goodput, compared; and the fractions pooled
over all points.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import Field, model_validator

from harness.measures import metrics as M
from harness.spec.errors import field_error
from harness.spec.numbers import ranged
from harness.spec.values import ScenarioModel
from harness.store.records import RequestRecord
from harness.workloads.kind import Derived, PhaseSummaries, ReportRow

SLO_METRICS = ("ttft_ms", "tpot_ms", "e2e_ms")
Percentile = Annotated[Literal[50, 90, 95, 99], Field(json_schema_extra={"unit": "percentile"})]
_SLOW = 1e18  # an errored request's latency in a percentile: slower than any limit


Limit = ranged(float, 0.001, 1e9, "ms")  # a latency limit: up to 11 days


class SLO(ScenarioModel):
    """Latency limits a request must meet (ms); at least one."""

    ttft_ms: Limit | None = None
    tpot_ms: Limit | None = None
    e2e_ms: Limit | None = None

    @model_validator(mode="after")
    def _one_limit(self):
        if self.ttft_ms is None and self.tpot_ms is None and self.e2e_ms is None:
            raise field_error("an slo needs at least one of ttft_ms, tpot_ms, e2e_ms")
        return self

    def limits(self) -> dict[str, float]:
        """{metric: limit ms} of the limits set."""
        return {m: float(getattr(self, m)) for m in SLO_METRICS if getattr(self, m) is not None}


class SLOFields(ScenarioModel):
    """The SLO fields of a workload on a clock (mixed into its config)."""

    slo: SLO | None = None
    slo_percentile: Percentile = 90  # the knee: the percentile that must meet every limit


def _value(r: RequestRecord, metric: str) -> float | None:
    """A request's value of an SLO metric; None where it has none (TPOT of one output token)."""
    if r.error is not None:
        return math.inf
    v = M.METRICS[metric].of_record(r)
    if v is None and metric != "tpot_ms":
        return math.inf  # no first token or no end: it met nothing
    return v


def meets(r: RequestRecord, metric: str, limit: float) -> bool:
    """Whether one request meets one limit (see the module docstring)."""
    v = _value(r, metric)
    return v is None or v <= limit


def percentile_met(records: Sequence[RequestRecord], limits: dict[str, float], percentile: float) -> bool | None:
    """Whether the ``percentile`` of every limited metric is within its limit (errored requests
    are infinitely slow; a missing TPOT is 0); None without requests."""
    if not records:
        return None
    for metric, limit in limits.items():
        values = [_value(r, metric) for r in records]
        a = np.asarray([_SLOW if v == math.inf else (0.0 if v is None else v) for v in values], dtype=float)
        if float(np.percentile(a, percentile)) > limit:
            return False
    return True


def slo_figures(
    records: Sequence[RequestRecord], slo: SLO | None, percentile: float, window_s: float | None
) -> dict[str, Any]:
    """SLO attainment of a phase's measured requests (warm-up left out), pure: counts, fractions,
    goodput over ``window_s`` and whether the percentile meets every limit. Empty without an SLO."""
    if slo is None:
        return {}
    measured = [r for r in records if not r.warmup]
    limits = slo.limits()
    n = len(measured)
    out: dict[str, Any] = {"slo_n": n, "slo_percentile": percentile}
    good = [r for r in measured if all(meets(r, m, lim) for m, lim in limits.items())]
    out["slo_good"] = len(good)
    out["slo_met_fraction"] = len(good) / n if n else None
    for m, lim in limits.items():
        k = sum(1 for r in measured if meets(r, m, lim))
        out[f"{m}_slo_met"] = k
        out[f"{m}_slo_met_fraction"] = k / n if n else None
    out["goodput_rps"] = len(good) / window_s if window_s and n else None
    out["slo_percentile_met"] = percentile_met(measured, limits, percentile)
    return out


# ------------------------------------------------------------------------------ over a sweep


def knee(points: Sequence[tuple[float, bool | None]]) -> float | None:
    """The highest value at which it and every lower value met (``True``); None when the lowest
    did not, or nothing was judged. A point not judged (None) ends the walk like a miss."""
    best = None
    for value, met in sorted(points, key=lambda p: p[0]):
        if met is not True:
            break
        best = value
    return best


def _points(phases: PhaseSummaries, axis: str) -> list[dict]:
    return [
        f for p in phases.values() if isinstance(f := (p or {}).get("figures"), dict) and f.get("sweep_axis") == axis
    ]


def knee_of(phases: PhaseSummaries, axis: str) -> float | None:
    """`knee` over the phases of one sweep axis (their figures' ``sweep_value`` and
    ``slo_percentile_met``)."""
    pts = [(f["sweep_value"], f.get("slo_percentile_met")) for f in _points(phases, axis)]
    return knee(pts) if pts and any(f.get("slo_n") is not None for f in _points(phases, axis)) else None


def best_goodput(phases: PhaseSummaries) -> float | None:
    """The highest goodput of a load point."""
    values = [
        f["goodput_rps"]
        for p in phases.values()
        if isinstance(f := (p or {}).get("figures"), dict) and f.get("goodput_rps") is not None
    ]
    return max(values) if values else None


def pooled_fraction(met_key: str) -> Any:
    """A derivation: the share of all measured requests of all points counted under ``met_key``."""

    def compute(phases: PhaseSummaries) -> float | None:
        met = n = 0
        for p in phases.values():
            f = (p or {}).get("figures")
            if isinstance(f, dict) and f.get(met_key) is not None and f.get("slo_n"):
                met += f[met_key]
                n += f["slo_n"]
        return met / n if n else None

    return compute


SLO_DERIVED = (
    Derived(
        "knee_rate",
        "req/s",
        True,
        "highest swept rate at which it and every lower rate meet the SLO at slo_percentile",
        lambda p: knee_of(p, "rate"),
        compared=True,
    ),
    Derived(
        "knee_concurrency",
        "requests",
        True,
        "highest swept concurrency at which it and every lower one meet the SLO at slo_percentile",
        lambda p: knee_of(p, "conc"),
        compared=True,
    ),
    Derived(
        "goodput_rps",
        "req/s",
        True,
        "requests meeting every SLO limit per second of the measured window, the best load point",
        best_goodput,
        compared=True,
    ),
    Derived(
        "slo_met_fraction",
        "fraction",
        True,
        "share of requests meeting every SLO limit, all points",
        pooled_fraction("slo_good"),
    ),
    Derived(
        "ttft_slo_met_fraction",
        "fraction",
        True,
        "share of requests meeting the TTFT limit, all points",
        pooled_fraction("ttft_ms_slo_met"),
    ),
    Derived(
        "tpot_slo_met_fraction",
        "fraction",
        True,
        "share of requests meeting the TPOT limit, all points",
        pooled_fraction("tpot_ms_slo_met"),
    ),
    Derived(
        "e2e_slo_met_fraction",
        "fraction",
        True,
        "share of requests meeting the end-to-end limit, all points",
        pooled_fraction("e2e_ms_slo_met"),
    ),
)
SLO_ROWS = (
    ReportRow(
        "SLO knee, rate ({workload})", "req/s", "knee_rate", True, note="highest rate whose percentile meets the SLO"
    ),
    ReportRow(
        "SLO knee, concurrency ({workload})",
        "",
        "knee_concurrency",
        True,
        note="highest concurrency whose percentile meets the SLO",
    ),
    ReportRow(
        "goodput ({workload})", "req/s", "goodput_rps", True, note="requests meeting the SLO per second, best point"
    ),
    ReportRow("SLO met ({workload})", "", "slo_met_fraction", True, note="share of requests meeting every limit"),
)

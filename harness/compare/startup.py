"""A variant's host-pool setup time compared between two runs (pure): the ``startup`` /
``host_pool`` / ``startup_s`` row.

Allocating and pinning (``cudaHostRegister``) the HiCache host pools is what HiCache adds to a
server start (`harness.server.startup_phases`); a build that registers slower (seed 002's chunked
registration) is a regression even when every request is as fast. A start happens once a run,
so the row has one value a side, and its unit is the log's whole-second stamps. It is decided
on its size, not by a test: a regression (improvement) when the candidate is slower (faster)
by at least the metric's threshold *and* by at least ``MIN_CHANGE_S`` (two stamps' resolution:
each end of the span may be off by up to a second); unchanged otherwise. The other phases
(weight load, graph capture, warm-up) move with caches a night may not have (the H200's first
start with a cold Triton cache: 125.7 s against 68-80 s, docs/gpu.md): they are watched over
the nights by ``harness history`` (``startup.<phase>_s``), not judged on one pair.
"""

from __future__ import annotations

from harness.compare.statistics import relative_change, threshold_for
from harness.server.startup_phases import HOST_POOL, STAMP_RESOLUTION_S
from harness.store.status_view import StartupRecord
from harness.store.variant_status import VariantStatus

WORKLOAD = "startup"
METRIC = "startup_s"
MIN_CHANGE_S = 2 * STAMP_RESOLUTION_S


def _host_pool_s(status: VariantStatus | None) -> float | None:
    startup = StartupRecord.from_json(status.startup) if status is not None else None
    v = startup.phases.get(HOST_POOL) if startup is not None else None
    return float(v) if isinstance(v, (int, float)) else None


def host_pool_row(
    name: str, base_status: VariantStatus | None, cand_status: VariantStatus | None, thresholds
) -> dict | None:
    """The fields of the row (`harness.compare.comparison.MetricRow`) of one variant compared on
    both sides, or None when neither start logged a host pool (HiCache off, or runs from before
    the phases were recorded)."""
    b, c = _host_pool_s(base_status), _host_pool_s(cand_status)
    if b is None and c is None:
        return None
    thr, src = threshold_for(dict(thresholds), WORKLOAD, HOST_POOL, METRIC)
    change = None
    if b is None or c is None:
        state, note = "not_comparable", f"no host-pool phase in the {'baseline' if b is None else 'candidate'}"
    else:
        change = relative_change(b, c) if b > 0 else None
        delta = c - b
        big = abs(delta) >= MIN_CHANGE_S and (change is None or abs(change) >= thr)
        state = ("regression" if delta > 0 else "improved") if big else "unchanged"
        note = (
            f"{b:g} s -> {c:g} s (one start a side; judged on size: {thr * 100:.0f} % and "
            f"{MIN_CHANGE_S:g} s, the log stamps' resolution at both ends)"
        )
    return {
        "variant": name,
        "workload": WORKLOAD,
        "phase": HOST_POOL,
        "metric": METRIC,
        "unit": "s",
        "higher_is_better": False,
        "baseline_p50": b,
        "candidate_p50": c,
        "n_baseline": 0 if b is None else 1,
        "n_candidate": 0 if c is None else 1,
        "change": change,
        "threshold": thr,
        "threshold_source": src,
        "test": "size",
        "p_value": None,
        "state": state,
        "note": note,
        "sample": "start",
    }

"""The soak section's data: per variant and soak workload, each judged series' points, its
Theil–Sen line, slope per hour, interval, tolerance and verdict, read from summary.json's
``from_samples`` (`harness.workloads.kinds` that judge samples; nothing recomputed but the line's
intercept, the median of value − slope × time, for drawing)."""

from __future__ import annotations

import statistics
from typing import Any

VERDICT_CLASS = {"LEAK": "fail", "STABLE": "good", "INCONCLUSIVE": "warn", "NOT_MEASURED": "muted"}


def intercept(t_s: list[float], values: list[float], slope_per_h: float | None) -> float | None:
    """The Theil–Sen line's intercept at t = 0 s: median of value − slope × hours."""
    if slope_per_h is None or not values:
        return None
    return float(statistics.median(v - slope_per_h * t / 3600.0 for t, v in zip(t_s, values)))


def soak_panels(view: Any) -> list[dict[str, Any]]:
    """[{variant, workload, slices, settle_slices, series: [{name, unit, what, verdict, css,
    slope_per_h, lo_per_h, hi_per_h, tolerance_per_h, rising_is_bad, n_points, reason, t_s,
    values, intercept}]}] for every variant whose summary has a workload's ``from_samples``."""
    out = []
    for n in view.names:
        summary = view.summary(n)
        for wl, entry in (summary.measured if summary is not None else {}).items():
            fs = entry.from_samples
            if not isinstance(fs.get("series"), dict):
                continue
            rows = []
            for name, s in fs["series"].items():
                t_s, values = list(s.get("t_s") or []), list(s.get("values") or [])
                verdict = str(s.get("verdict") or "NOT_MEASURED")
                rows.append(
                    {
                        "name": name,
                        "unit": s.get("unit") or "",
                        "what": s.get("what") or "",
                        "verdict": verdict,
                        "css": VERDICT_CLASS.get(verdict, ""),
                        "slope_per_h": s.get("slope_per_h"),
                        "lo_per_h": s.get("lo_per_h"),
                        "hi_per_h": s.get("hi_per_h"),
                        "tolerance_per_h": s.get("tolerance_per_h"),
                        "rising_is_bad": s.get("rising_is_bad", True),
                        "n_points": s.get("n_points", len(values)),
                        "reason": s.get("reason") or "",
                        "t_s": t_s,
                        "values": values,
                        "intercept": intercept(t_s, values, s.get("slope_per_h")),
                    }
                )
            out.append(
                {
                    "variant": n,
                    "workload": wl,
                    "slices": fs.get("slices"),
                    "settle_slices": fs.get("settle_slices"),
                    "series": rows,
                }
            )
    return out

"""Pure: HiCache load-back throughput as a fraction of the probed pinned H2D bandwidth, and the
storage tier's (L3) I/O as a fraction of the probed disk bandwidth.

The report reads this with figures it has stored (summary deltas, the manifest's probe result);
nothing here measures."""

from __future__ import annotations

import math


def load_back_fraction(
    load_back_bytes: float | None, load_back_seconds: float | None, pinned_h2d_gbs: float | None
) -> float | None:
    """HiCache load-back throughput as a fraction of the probed pinned H2D bandwidth.

    (bytes / seconds / 1e9) / pinned_h2d_gbs. None when any input is missing, not finite,
    negative, or when seconds or the bandwidth is zero.
    """
    vals = (load_back_bytes, load_back_seconds, pinned_h2d_gbs)
    if any(v is None or isinstance(v, bool) for v in vals):
        return None
    try:
        b, s, bw = (float(v) for v in vals)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    if not all(math.isfinite(v) for v in (b, s, bw)) or b < 0 or s <= 0 or bw <= 0:
        return None
    return (b / s / 1e9) / bw


def storage_fraction(achieved_gbs: float | None, disk_gbs: float | None) -> float | None:
    """Storage-tier I/O (sglang's prefetch or backup GB/s) as a fraction of the disk's sequential
    bandwidth that ``harness probe`` measured (read for prefetch, write for backup). None when
    either is missing, not finite, negative, or the disk figure is zero."""
    if achieved_gbs is None or disk_gbs is None or isinstance(achieved_gbs, bool) or isinstance(disk_gbs, bool):
        return None
    a, d = float(achieved_gbs), float(disk_gbs)
    if not (math.isfinite(a) and math.isfinite(d)) or a < 0 or d <= 0:
        return None
    return a / d

"""Numbers and variant states as the report writes them (one rule for every table and figure)."""

from __future__ import annotations

import math

from harness.store.status_view import StatusView

KIB_PER_GIB = 1024 * 1024
# a parity verdict's colour: pass, fail, warn, and "cannot tell" (neither green nor red)
VERDICT_CSS = {
    "PASS": "good",
    "FAIL": "bad",
    "WARN": "warn",
    "INCONCLUSIVE": "unknown",
    "NOT_EXERCISED": "unknown",
    "NOT_COMPARABLE": "unknown",
}


def fmt_num(v: float | None, digits: int = 3) -> str:
    """A number in at most ``digits`` significant figures below 10, fewer decimals above; "—"
    for missing or non-finite."""
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "—"
    a = abs(v)
    if a >= 10000:
        return f"{v:,.0f}"
    if a >= 100:
        return f"{v:.0f}"
    if a >= 10:
        return f"{v:.1f}"
    return f"{v:.{digits}g}"


def failure_text(status: StatusView) -> str:
    """A variant's state and cause, e.g. ``startup_failed: host_memory``."""
    state = status.state or "missing"
    return f"{state}: {status.cause}" if status.cause else state

"""The statistics a run stores for one metric of one phase -- summary.json's ``metrics`` entries,
summary.csv's columns, what a check or gate may name after a metric (``ttft_ms_p99``) -- declared
once, in their stored order."""

from __future__ import annotations

PERCENTILES = ("p50", "p90", "p95", "p99")
STAT_KEYS = ("n", "mean", *PERCENTILES, "min", "max")

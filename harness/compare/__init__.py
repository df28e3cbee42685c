"""Compare a candidate run with a baseline run: which metrics regressed, with evidence.

Two run folders → a `Comparison`. The package: `statistics` (decide, significance,
threshold_for: pure), `runs` (reading the two run folders, `find_latest_good`, writing
comparison.json), `comparison` (variant states, metric rows, `Comparison`), `render` (Markdown,
JUnit XML, console text). The ``harness compare`` command is `harness.commands.compare`.

A metric is compared per variant × workload × phase on its per-request values from
requests.jsonl (warm-ups, errored requests and the phases a workload's kind declares filler left
out) — the metrics `harness.metrics` declares ``compared``: ``ttft_ms``, ``tpot_ms``,
``decode_tok_s`` and ``prefill_tok_s`` (this one only in phases whose median prompt is ≥ 1024
tokens and mostly not cached: its ``compared_when``) — and on the wall time of each concurrency
group (``pass_wall_s``, parallel_prefixes passes); and per variant × workload on the derived
figures the workload's kind declares ``compared`` (one value per run). The location is the
median (p50). A change is a **regression** only when both hold:

1. it is worse (by the metric's declared direction) by at least the threshold; the threshold
   comes from the candidate scenario's ``expectations.thresholds`` (keys tried, first match:
   ``<workload>.<phase>.<metric>``, ``<workload>.<metric>``, ``<metric>``, ``<short>_p50`` with
   the unit suffix dropped (``ttft_p50``, ``tpot_p50``, ``pass_wall_p50``), ``<metric>_p50``,
   ``default``; else `DEFAULT_THRESHOLD`);
2. a statistical test says the two samples differ: Mann-Whitney U (two-sided, p < 0.05) when
   both sides have ≥ 6 values; with 3–5 a side, non-overlapping 95 % confidence intervals of
   the means; fewer → ``insufficient_data``.

States of a metric: improved, unchanged, regression, insufficient_data, not_comparable (missing
on one side). States of a variant: compared, introduced_failure (baseline ok, candidate failed:
a regression), failed (candidate failed and so did the baseline), fixed (baseline failed,
candidate ok), not_comparable (variant only on one side), skipped (not run, or failed as its
``expect: startup_failed`` declared). A failure is never a zero: failed variants have no metric
rows at all.

Exit codes of ``harness compare`` (`harness.exit_codes.ExitCode`): 0 pass, 1 regression /
failure / failed expectation, 2 bad input (missing run, wrong schema: the message names the
file), 3 the harness broke.
"""

from harness.compare.comparison import Comparison, MetricRow, VariantRow, compare_runs, variant_state
from harness.compare.render import to_junit, to_markdown
from harness.compare.runs import COMPARISON_FILE, find_latest_good, load_baseline, write_comparison
from harness.compare.statistics import DEFAULT_THRESHOLD, decide, threshold_for

__all__ = ["COMPARISON_FILE", "DEFAULT_THRESHOLD", "Comparison", "MetricRow", "VariantRow", "compare_runs",
           "decide", "find_latest_good", "load_baseline", "threshold_for", "to_junit", "to_markdown",
           "variant_state", "write_comparison"]

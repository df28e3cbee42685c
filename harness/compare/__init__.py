"""Compare a candidate run with a baseline run: which metrics regressed, with evidence, and
whether the comparison can tell at all.

Two run folders → a `Comparison` with an outcome PASS / FAIL / INCONCLUSIVE. The package:
`statistics` (decide, significance, minimum detectable effect, threshold_for: pure), `runs`
(reading and checking the two run folders, choosing the baseline, writing comparison.json),
`comparison` (the stored rows, variant states, the outcome), `rows` (metric rows, parity rows),
`gating` (the gate, the outcome), `two_runs` (`compare_runs`), `render`
(Markdown, JUnit XML, console text). The ``harness compare`` command is
`harness.cli.compare`; docs/reports.md states the rules for people.

What is compared, per variant that ran ok on both sides with the same config hash:

- per workload × phase, the metrics `harness.measures.metrics` declares ``compared`` on their
  per-request values from requests.jsonl (warm-ups, errored requests and the kind's filler
  phases left out) — ``ttft_ms``, ``tpot_ms``, ``decode_tok_s``, ``prefill_tok_s`` (where its
  ``compared_when`` holds) — and ``pass_wall_s`` per concurrency group;
- per workload, the derived figures its kind declares ``compared``, one value per repeat
  (summary.json ``derived_by_repeat``; recomputed from requests.jsonl for an older run);
- quality parity, the candidate's verdict (FAIL fails whatever the baseline had).

A row is a **regression** when it is worse (by the declared direction) by at least the
threshold (the candidate scenario's ``expectations.thresholds``: ``<workload>.<phase>.<metric>``,
``<workload>.<metric>``, ``<metric>``, ``<short>_p50``, ``<metric>_p50``, ``default``; else
`DEFAULT_THRESHOLD`) and significant (`harness.compare.statistics`: Welch's t on logs below 8
values a side, Mann-Whitney U with a bootstrap interval from 8). A row is **inconclusive** when
the data cannot tell: fewer than 2 values a side, beyond the threshold but not significant, or
a minimum detectable effect larger than the threshold.

The outcome: FAIL on an introduced or persisting variant failure, a failed expectation or a
regression in a gating row; else INCONCLUSIVE when there is no baseline, a gated variant was
not compared (config changed, missing in a COMPLETE run, failed in the baseline), a gating row
is inconclusive or not comparable, or a gate names nothing; else PASS. Gating rows are those
the candidate scenario's ``gate:`` names (none: every row).

Exit codes of ``harness compare`` (`harness.core.exit_codes.ExitCode`): 0 PASS, 1 FAIL, 2 bad input
(a missing or damaged file — the message names it — or a baseline of another scenario), 3 the
harness broke, 4 INCONCLUSIVE.
"""

from harness.core.lazy import lazy_getattr

# Public names, loaded on first use: `harness validate` plans repeats with harness.compare.planning
# and must not load the comparison (pandas) or the run store's readers (httpx) to do it.
_HOME = {
    "Comparison": "harness.compare.comparison",
    "MetricRow": "harness.compare.comparison",
    "VariantRow": "harness.compare.comparison",
    "compare_runs": "harness.compare.two_runs",
    "gate_matches": "harness.compare.gating",
    "parity_row": "harness.compare.rows",
    "variant_state": "harness.compare.comparison",
    "to_junit": "harness.compare.render",
    "to_markdown": "harness.compare.render",
    "COMPARISON_FILE": "harness.compare.runs",
    "BaselineChoice": "harness.compare.runs",
    "BaselineMismatch": "harness.compare.runs",
    "choose_latest": "harness.compare.runs",
    "find_latest_good": "harness.compare.runs",
    "load_baseline": "harness.compare.runs",
    "read_run": "harness.compare.runs",
    "write_comparison": "harness.compare.runs",
    "DEFAULT_THRESHOLD": "harness.compare.statistics",
    "decide": "harness.compare.statistics",
    "threshold_for": "harness.compare.statistics",
}
__all__ = sorted(_HOME)


__getattr__ = lazy_getattr(globals(), _HOME)

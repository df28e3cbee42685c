"""Compare a candidate run with a baseline run: which metrics regressed, with evidence, and
whether the comparison can tell at all.

Two run folders → a `Comparison` with an outcome PASS / FAIL / INCONCLUSIVE. The package:
`statistics` (decide, significance, minimum detectable effect, threshold_for: pure), `runs`
(reading and checking the two run folders, choosing the baseline, writing comparison.json),
`comparison` (variant states, metric rows, parity rows, the gate, the outcome), `render`
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

from harness.compare.comparison import (
    Comparison,
    MetricRow,
    VariantRow,
    compare_runs,
    gate_matches,
    parity_row,
    variant_state,
)
from harness.compare.render import to_junit, to_markdown
from harness.compare.runs import (
    COMPARISON_FILE,
    BaselineChoice,
    BaselineMismatch,
    choose_latest,
    find_latest_good,
    load_baseline,
    read_run,
    write_comparison,
)
from harness.compare.statistics import DEFAULT_THRESHOLD, decide, threshold_for

__all__ = [
    "COMPARISON_FILE",
    "DEFAULT_THRESHOLD",
    "BaselineChoice",
    "BaselineMismatch",
    "Comparison",
    "MetricRow",
    "VariantRow",
    "choose_latest",
    "compare_runs",
    "decide",
    "find_latest_good",
    "gate_matches",
    "load_baseline",
    "parity_row",
    "read_run",
    "threshold_for",
    "to_junit",
    "to_markdown",
    "variant_state",
    "write_comparison",
]

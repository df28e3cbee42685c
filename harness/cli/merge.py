"""``harness merge RUN_DIR...``: combine shard runs of one scenario into one run folder; the exit
code is the merged run's verdict's."""

from __future__ import annotations

import sys
from pathlib import Path

from harness.core.exit_codes import ExitCode


def add_parser(sub) -> None:
    s = sub.add_parser("merge", help="combine shard runs of one scenario into one run folder")
    s.add_argument("runs", nargs="+", metavar="RUN_DIR")
    s.add_argument("--results-dir", default="results", help="where the merged run goes (default: results)")
    s.set_defaults(func=cli_main)


def cli_main(args) -> int:
    """Merge shard runs; the exit code is the merged run's verdict's (README), 1 when the merge is
    incomplete."""
    from harness.run.merge import MergeRefused, merge_runs

    try:
        merged = merge_runs([Path(r) for r in args.runs], Path(args.results_dir), sys.argv)
    except MergeRefused as exc:
        print(f"harness merge: {exc}", file=sys.stderr)
        return ExitCode.BAD_INPUT
    plan = merged.plan
    print(
        f"merged: {merged.root} ({len(plan.order)} variants from {len(plan.sources)} runs"
        f"{'' if plan.complete else ', INCOMPLETE'})"
    )
    for d in plan.dropped:
        if d["role"] == "support":
            continue  # a shard's own parity baseline: expected, not news
        print(
            f"  kept {d['variant']} from {d['kept_from']}, dropped the copy in {d['run_id']} ({d['role']}, "
            f"{d['state']})"
        )
    for p in plan.problems:
        print(f"  incomplete: {p}", file=sys.stderr)
    if not plan.complete:
        return ExitCode.FAILED
    if merged.unmet:
        print(f"  variants that missed their expectation: {', '.join(merged.unmet)}", file=sys.stderr)
    if merged.verdict is None:
        return ExitCode.FAILED
    for line in merged.verdict.lines():
        print(line)
    return merged.verdict.exit_code  # the merged night's verdict, as `harness run`'s (INCONCLUSIVE: 4)

"""``harness show RUN [--json]``: the results table of a stored run."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from harness.cli.common import bad
from harness.core.exit_codes import ExitCode


def add_parser(sub) -> None:
    s = sub.add_parser("show", help="print a run's results table (per variant: TTFT, speedup, tier share, parity)")
    s.add_argument("run", help="run folder (results/<scenario>/<run_id>)")
    s.add_argument("--json", action="store_true", help="the table as JSON, for scripts")
    s.set_defaults(func=cli_main)


def cli_main(args) -> int:
    """``harness show RUN [--json]``: the results table of a stored run."""
    from harness.analysis.results_table import results_table, to_text
    from harness.store import results

    try:
        table = results_table(Path(args.run))
    except results.ResultsError as exc:
        return bad(f"show: {exc}")
    if args.json:
        print(json.dumps(table.to_json(), indent=2))
    else:
        sys.stdout.write(to_text(table))
    return ExitCode.OK

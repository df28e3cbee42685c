"""``harness accept RUN [--note TEXT]``: the team accepts a run as a baseline. ``harness compare
--baseline latest`` never takes a night whose own comparison FAILed or was INCONCLUSIVE against a
baseline (a regressed build stays red night after night); an accepted run it takes whatever its verdicts, and a baseline pool never
reaches past it. Writes accepted.json into the run folder (`harness.compare.runs.accept_run`)."""

from __future__ import annotations

import getpass
import sys
from datetime import datetime, timezone
from pathlib import Path

from harness.core.exit_codes import ExitCode
from harness.store import results


def add_parser(sub) -> None:
    s = sub.add_parser("accept", help="accept a run as a baseline (even one whose comparison failed)")
    s.add_argument("run", help="run folder")
    s.add_argument("--note", help="why it is accepted (kept in accepted.json)")
    s.set_defaults(func=cli_main)


def cli_main(args) -> int:
    from harness.compare.runs import accept_run, compared_outcome, read_run  # heavy (pandas): only when it runs

    try:
        run = read_run(Path(args.run))
    except results.ResultsError as exc:
        print(f"harness accept: {exc}", file=sys.stderr)
        return ExitCode.BAD_INPUT
    try:
        by = getpass.getuser()
    except (KeyError, OSError):
        by = "unknown"
    at = datetime.now(timezone.utc).isoformat(timespec="seconds")
    path = accept_run(run, args.note or "", by, at)
    verdict, against = compared_outcome(run)
    was = f" (its comparison with {against}: {verdict})" if verdict else " (never compared)"
    print(f"accepted: {run.run_id}{was}; `harness compare --baseline latest` may take it from now on: {path}")
    return ExitCode.OK

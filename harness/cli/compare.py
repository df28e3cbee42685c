"""``harness compare RUN --baseline RUN|latest [--pool K] [--junit F] [--markdown F]``: compare, write
comparison.json into the candidate's folder, print the Markdown summary (also written to
``--markdown`` and appended to ``$GITHUB_STEP_SUMMARY``), write ``--junit``. Exit code: the
comparison's outcome (0 PASS, 1 FAIL, 4 INCONCLUSIVE); 2 for a missing or damaged file or a
baseline of another scenario (the message names it), 3 when the harness broke."""

from __future__ import annotations

import os
import sys
import traceback
from pathlib import Path

from harness.compare import (
    BaselineMismatch,
    compare_runs,
    load_baseline,
    read_run,
    to_junit,
    to_markdown,
    write_comparison,
)
from harness.compare.render import console_text
from harness.core.exit_codes import ExitCode
from harness.store import results

_EXIT = {"PASS": ExitCode.OK, "FAIL": ExitCode.FAILED, "INCONCLUSIVE": ExitCode.INCONCLUSIVE}


def cli_main(args) -> int:
    try:
        return _compare(args)
    except (results.ResultsError, BaselineMismatch) as exc:
        print(f"harness compare: {exc}", file=sys.stderr)
        return ExitCode.BAD_INPUT
    except Exception as exc:  # noqa: BLE001 - the harness itself broke: say so, exit 3
        traceback.print_exc()
        print(f"harness compare: internal error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return ExitCode.BROKEN


def _compare(args) -> int:
    cand = read_run(Path(args.run))
    pool = int(getattr(args, "pool", 1) or 1)
    if pool < 1:
        raise results.ResultsError(f"--pool {pool}: pool at least one run")
    choice = load_baseline(args.baseline, Path(args.results_dir), cand, pool)
    for line in choice.lines():
        print(f"harness compare: {line}", file=sys.stderr)
    comp = compare_runs(choice.run, cand, choice)
    comparison_file = write_comparison(cand, comp.to_dict())
    md = to_markdown(comp)
    if getattr(args, "junit", None):
        results.write_text_atomic(Path(args.junit), to_junit(comp))
    if getattr(args, "markdown", None):
        results.write_text_atomic(Path(args.markdown), md)
    step = os.environ.get("GITHUB_STEP_SUMMARY")
    if step:
        with open(step, "a", encoding="utf-8") as f:
            f.write(md)
    sys.stdout.write(console_text(md, comparison_file))
    return _EXIT[comp.outcome]

"""``harness compare RUN --baseline RUN|latest [--junit F] [--markdown F]``: compare, write
comparison.json into the candidate's folder, print the Markdown summary (also written to
``--markdown`` and appended to ``$GITHUB_STEP_SUMMARY``), write ``--junit``."""

from __future__ import annotations

import os
import sys
import traceback
from pathlib import Path

from harness import results
from harness.compare import compare_runs, load_baseline, to_junit, to_markdown, write_comparison
from harness.compare.render import console_text
from harness.exit_codes import ExitCode


def cli_main(args) -> int:
    try:
        return _compare(args)
    except results.ResultsError as exc:
        print(f"harness compare: {exc}", file=sys.stderr)
        return ExitCode.BAD_INPUT
    except Exception as exc:  # noqa: BLE001 - the harness itself broke: say so, exit 3
        traceback.print_exc()
        print(f"harness compare: internal error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return ExitCode.BROKEN


def _compare(args) -> int:
    cand = results.load_run(Path(args.run))
    base = load_baseline(args.baseline, Path(args.results_dir), cand)
    if base is None:
        print(f"harness compare: no earlier good run of {cand.scenario_name} under {args.results_dir}; "
              "evaluating expectations only", file=sys.stderr)
    comp = compare_runs(base, cand)
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
    return ExitCode.FAILED if comp.failing else ExitCode.OK

"""``harness compare RUN --baseline RUN|latest [--pool K] [--junit F] [--markdown F]``: compare, write
comparison.json into the candidate's folder, print the Markdown summary (also written to
``--markdown`` and appended to ``$GITHUB_STEP_SUMMARY``), write ``--junit``. Exit code: the
comparison's outcome (0 PASS, 1 FAIL, 4 INCONCLUSIVE); 2 for a missing or damaged file or a
baseline of another scenario (the message names it), 3 when the harness broke."""

from __future__ import annotations

import os
import stat
import sys
import traceback
from pathlib import Path

from harness.core.exit_codes import ExitCode
from harness.core.optional import require_extra
from harness.store import results
from harness.store.targets import file_kind, regular_target

_EXIT = {"PASS": ExitCode.OK, "FAIL": ExitCode.FAILED, "INCONCLUSIVE": ExitCode.INCONCLUSIVE}


def add_parser(sub) -> None:
    s = sub.add_parser("compare", help="compare a run with a baseline run; exit 1 on a regression")
    s.add_argument("run", help="candidate run folder")
    s.add_argument("--baseline", required=True, help="baseline run folder, or 'latest' (last good run)")
    s.add_argument(
        "--results-dir",
        default=None,
        help="where to look for 'latest' (default: the results folder the candidate run is in)",
    )
    s.add_argument("--junit", metavar="FILE", help="write JUnit XML here")
    s.add_argument(
        "--markdown",
        metavar="FILE",
        help="write a Markdown summary here (also appended to $GITHUB_STEP_SUMMARY when set)",
    )
    s.add_argument(
        "--round",
        action="append",
        metavar="RUN",
        help="an extra round of the candidate's night, pooled with it (repeatable; at most the scenario's "
        "verdict.rounds: each look is tested at the alpha spent on it)",
    )
    s.add_argument(
        "--pool",
        type=int,
        default=1,
        metavar="K",
        help="with --baseline latest: pool the K newest eligible runs as the baseline (default 1)",
    )
    s.set_defaults(func=cli_main)


def cli_main(args) -> int:
    require_extra("stats", "harness compare")
    from harness.compare.runs import BaselineMismatch  # heavy (pandas): only when it runs

    try:
        return _compare(args)
    except (results.ResultsError, BaselineMismatch) as exc:
        print(f"harness compare: {exc}", file=sys.stderr)
        return ExitCode.BAD_INPUT
    except Exception as exc:  # noqa: BLE001 - the harness itself broke: say so, exit 3
        traceback.print_exc()
        print(f"harness compare: internal error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return ExitCode.BROKEN


def append_step_summary(path: Path, text: str) -> str | None:
    """Append to a CI step summary (GitHub gives a regular file): opened without following a link
    and without blocking (a FIFO nobody reads would hang compare), written only when it is a
    regular file. None when written, else why not."""
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK
    try:
        fd = os.open(path, flags, 0o666)
    except OSError as exc:  # ELOOP: a link; ENXIO: a FIFO with no reader
        try:
            return f"{file_kind(os.lstat(path).st_mode)}, not a regular file"
        except OSError:
            return exc.strerror or type(exc).__name__
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            return f"{file_kind(mode)}, not a regular file"
        os.set_blocking(fd, True)
        data = text.encode("utf-8")
        while data:
            data = data[os.write(fd, data) :]
        return None
    finally:
        os.close(fd)


def _compare(args) -> int:
    from harness.compare import load_baseline, read_run, to_junit, to_markdown, two_runs, write_comparison
    from harness.compare.render import console_text
    from harness.compare.runs import pool_problem

    junit = regular_target(Path(args.junit), "--junit") if getattr(args, "junit", None) else None
    markdown = regular_target(Path(args.markdown), "--markdown") if getattr(args, "markdown", None) else None
    cand = read_run(Path(args.run))
    pool = int(getattr(args, "pool", 1) or 1)
    if pool_problem(pool):
        raise results.ResultsError(pool_problem(pool))
    # results/<scenario>/<run_id>: a run made with --results-dir X finds its 'latest' under X
    results_dir = Path(args.results_dir) if args.results_dir else Path(args.run).resolve().parent.parent
    choice = load_baseline(args.baseline, results_dir, cand, pool)
    for line in choice.lines():
        print(f"harness compare: {line}", file=sys.stderr)
    rounds = [read_run(Path(r)) for r in getattr(args, "round", None) or ()]
    comp = two_runs.compare_runs(choice.run, cand, choice, rounds)
    comparison_file = write_comparison(cand, comp.to_dict())
    md = to_markdown(comp)
    if junit is not None:  # checked again: it may have been replaced meanwhile
        results.write_text_atomic(regular_target(junit, "--junit"), to_junit(comp))
    if markdown is not None:
        results.write_text_atomic(regular_target(markdown, "--markdown"), md)
    step = os.environ.get("GITHUB_STEP_SUMMARY")
    if step:
        problem = append_step_summary(Path(step), md)
        if problem:
            print(f"harness compare: GITHUB_STEP_SUMMARY {step}: {problem}; not written", file=sys.stderr)
    sys.stdout.write(console_text(md, comparison_file))
    return _EXIT[comp.outcome]

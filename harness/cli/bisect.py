"""``harness bisect SCENARIO --repo PATH --good REF --bad REF [--build NAME] [--build-cmd CMD]
[--set KEY=VALUE] [--dir DIR]`` and ``harness bisect --resume DIR``: the first commit whose build
regresses the scenario's gated rows (`harness.compare.bisect`). Prints a line per step, then the
summary (also ``DIR/summary.md``; the state and result in ``DIR/bisect.json``). Exit code: 1 the
first bad commit found, 4 undecided (a range of skipped or undecided commits, or a bad commit
that could not be decided), 0 the bad commit is not worse than the good one, 2 bad input (refs,
scenario, a good commit that cannot serve as the baseline), 130 interrupted (the resume command
printed)."""

from __future__ import annotations

import shlex
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from harness.core.exit_codes import ExitCode
from harness.core.optional import require_extra

if TYPE_CHECKING:
    from harness.scenario.models import Scenario


def add_parser(sub) -> None:
    s = sub.add_parser(
        "bisect",
        help="find the first commit of a (patched) sglang history whose build regresses the gated rows",
    )
    s.add_argument("scenario", nargs="?", help="scenario YAML file (not with --resume)")
    s.add_argument("--repo", metavar="PATH", help="the git checkout whose history is bisected")
    s.add_argument("--good", metavar="REF", help="a commit whose build is good (the baseline run)")
    s.add_argument("--bad", metavar="REF", help="a later commit whose build regresses (first-parent descendant)")
    s.add_argument(
        "--build",
        metavar="NAME",
        help="the builds: entry whose sglang_source each step replaces (default: the one the gated variants run)",
    )
    s.add_argument(
        "--build-cmd",
        metavar="CMD",
        help="a shell command run in the worktree after each checkout (its failure skips the commit)",
    )
    s.add_argument(
        "--set", action="append", metavar="KEY=VALUE", help="override a scenario value for every step (as run --set)"
    )
    s.add_argument(
        "--good-repeats",
        type=int,
        metavar="N",
        help="repeats of the good side's run, the baseline every step is judged against (default: the scenario's)",
    )
    s.add_argument("--dir", metavar="DIR", help="the bisect folder (default: bisect/<scenario>-<UTC time>)")
    s.add_argument("--resume", metavar="DIR", help="go on with the bisection in DIR (finished steps are not redone)")
    s.set_defaults(func=cli_main)


def cli_main(args) -> int:
    from harness.compare import bisect as b
    from harness.compare.bisect_summary import write_summary

    require_extra("stats", "harness bisect")
    if args.resume:
        if args.scenario or args.repo or args.good or args.bad:
            return _bad("bisect --resume DIR: the scenario, repository and refs are the bisection's own")
        state = b.Bisection.load(Path(args.resume))
    else:
        missing = [
            f
            for f, v in (("SCENARIO", args.scenario), ("--repo", args.repo), ("--good", args.good), ("--bad", args.bad))
            if not v
        ]
        if missing:
            return _bad(f"bisect: give {', '.join(missing)} (or --resume DIR)")
        from harness.spec.numbers import MAX_REPEATS

        if args.good_repeats is not None and not 1 <= args.good_repeats <= MAX_REPEATS:
            # as the scenario's ``repeats`` takes it: refused here, not blamed on the good commit later
            return _bad(f"bisect: --good-repeats {args.good_repeats}: expected 1..{MAX_REPEATS} repeats")
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        root = Path(args.dir) if args.dir else b.default_root(Path(args.scenario), stamp)
        state = b.new_bisection(
            root,
            Path(args.scenario),
            Path(args.repo),
            args.good,
            args.bad,
            args.build,
            list(args.set or []),
            args.build_cmd,
            args.good_repeats,
        )
        print(f"harness bisect: {len(state.commits) - 1} commits from {args.good} to {args.bad}; folder {state.root}")
    scenario = b.load_step(
        Path(state.scenario), b.step_scenario(Path(state.scenario), state.src, state.build, state.sets)
    )
    if scenario.server.backend == "sim":
        require_extra("sim", "harness bisect with backend: sim")
    stepper = b.StepRunner(state, _runner(), say=lambda line: print(line, flush=True))
    try:
        result = b.bisect(state, stepper)
    except (b.Interrupted, KeyboardInterrupt):
        print(f"harness bisect: interrupted; resume: harness bisect --resume {shlex.quote(str(state.root))}")
        return ExitCode.INTERRUPTED
    path, text = write_summary(state)
    sys.stdout.write(text)
    print(f"summary: {path}\nstate:   {state.root / b.STATE_FILE}")
    return result["exit_code"]


def _runner():
    """Runs one step's scenario as ``harness run --only V --no-report`` would."""
    from harness.run import runner

    def run(scenario: Scenario, only: list[str], results_dir: Path):
        options = runner.RunOptions(results_dir=results_dir, only=list(only), draw_report=None)
        out = runner.run_scenario(scenario, options, harness_argv=sys.argv)
        print(f"harness bisect: run {out.run_dir}: exit {int(out.exit_code)}", flush=True)
        return out

    return run


def _bad(message: str) -> int:
    print(f"harness: {message}", file=sys.stderr)
    return ExitCode.BAD_INPUT

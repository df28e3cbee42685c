"""``harness run SCENARIO`` (or ``--url URL``): a fresh run, ``--resume`` the rest of an
interrupted one, ``--dry-run`` what would start (and the estimate), ``--decide`` the rounds a
comparison advises, ``--find-ratio`` the safe-ratio boundary (`harness.cli.find_ratio`); then the
verdict, the results table and where the files are."""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from harness.analysis.verdict import Outcome
from harness.cli.common import bad, load_scenario_or_exit, scenario_overrides
from harness.core.errors import BadInput
from harness.core.exit_codes import ExitCode
from harness.core.optional import MissingExtra, require_extra
from harness.run.estimate import design_warning_lines, design_warnings, estimate_run
from harness.run.shard import MAX_SHARDS

if TYPE_CHECKING:
    from harness.scenario.models import Scenario


def add_parser(sub) -> None:
    s = sub.add_parser("run", help="run a scenario: one server per variant, workloads, report")
    s.add_argument("scenario", nargs="?", help="scenario YAML file (optional with --url)")
    s.add_argument(
        "--url",
        action="append",
        metavar="[NAME=]URL",
        help="measure this running sglang server instead of launching any (repeatable: one variant each, "
        "e.g. --url off=http://a:30000 --url on=http://b:30000); the scenario's workloads, or the bundled "
        "scenarios/external.yaml's without one",
    )
    s.add_argument("--results-dir", default="results", help="where run folders go (default: results)")
    s.add_argument("--reports-dir", default="reports", help="where HTML reports go (default: reports)")
    s.add_argument("--only", action="append", metavar="VARIANT", help="run only this variant (repeatable)")
    s.add_argument("--dry-run", action="store_true", help="print each variant's argv and env; start nothing")
    s.add_argument(
        "--preflight",
        choices=["warn", "strict", "off"],
        help="host-memory preflight: warn (launch anyway) or strict (refuse before launch)",
    )
    s.add_argument(
        "--shard",
        metavar="I/N",
        help="run only shard I of N of the variants (e.g. from $SLURM_ARRAY_TASK_ID or a CI matrix)",
    )
    s.add_argument(
        "--set",
        action="append",
        metavar="KEY=VALUE",
        help="override a scenario value, checked like the file (repeatable; dotted keys: repeats, "
        "quality.enabled, workloads.0.n, variants.on-r2.hicache.ratio; VALUE is YAML); kept in the manifest",
    )
    s.add_argument("--repeats", type=int, metavar="N", help="run every workload N times (--set repeats=N)")
    s.add_argument(
        "--no-quality", action="store_true", help="skip the quality/parity questions (--set quality.enabled=false)"
    )
    s.add_argument("--no-report", action="store_true", help="do not write the HTML report at the end")
    s.add_argument(
        "--gpus",
        metavar="IDS|auto",
        help="run variants side by side, each on its own of these GPUs (as many as its tp_size; "
        "CUDA_VISIBLE_DEVICES per variant): 0,1,2,3 or auto (every GPU this harness may use)",
    )
    s.add_argument(
        "--probe",
        action="store_true",
        help="run the platform probes (quick) before the first variant; kept in the manifest",
    )
    s.add_argument(
        "--resume", metavar="RUN_DIR", help="continue an interrupted run: skip complete variants, rerun the rest"
    )
    s.add_argument(
        "--decide",
        action="store_true",
        help="then compare with --baseline and, while INCONCLUSIVE, run the rounds the comparison advises "
        "(verdict.rounds, within verdict.budget_minutes), every round pooled; exit: the final comparison's",
    )
    s.add_argument("--baseline", default="latest", metavar="RUN|latest", help="--decide's baseline (default: latest)")
    s.add_argument(
        "--pool",
        type=int,
        default=None,
        metavar="K",
        help="--decide with --baseline latest: the baseline side is the last K passing nights pooled, so both sides "
        "have more values than one night (default 1)",
    )
    s.add_argument(
        "--find-ratio",
        action="store_true",
        help="run one HiCache variant (--only V) at its predicted safe-ratio boundary and a step above, for the "
        "start limit and the page-cache limit, and say whether both sides agree and where the cliffs are",
    )
    s.set_defaults(func=cli_main)


def _parse_shard(text: str | None):
    if text is None:
        return None
    try:
        i, n = (int(x) for x in text.split("/"))
    except ValueError:
        raise SystemExit(bad(f"--shard: expected I/N, got {text!r}")) from None
    if not (n >= 1 and 1 <= i <= n):
        raise SystemExit(bad(f"--shard: expected 1 <= I <= N, got {text!r}"))
    if n > MAX_SHARDS:  # dealing the variants out into 10^20 shards hung even --dry-run
        raise SystemExit(bad(f"--shard: at most {MAX_SHARDS} shards, got {text!r}"))
    return (i, n)


def _draw_report(run_root: Path, reports_dir: Path) -> Path:
    from harness.report.html import write_report  # heavy (matplotlib, jinja2): only when a report is drawn

    return write_report(run_root, reports_dir)


def cli_main(args) -> int:
    """A fresh run, or with --resume the rest of an interrupted one; --dry-run prints what would start."""
    from harness.compare.planning import resolve_repeats
    from harness.run import builds, manifest, resume, runner
    from harness.run.shard import select_run_variants

    if args.scenario is None and not args.url:
        return bad("run: give a SCENARIO file, or --url URL to measure a running server")
    if args.decide and (args.shard or args.resume):
        return bad("run --decide: not with --shard or --resume (a round is a run of the whole night's variants)")
    if args.pool is not None:  # checked now, not by the final comparison once the night has run
        from harness.compare.runs import pool_problem

        if not args.decide:
            return bad("--pool: only with --decide (the nights its comparison pools as the baseline)")
        if pool_problem(args.pool):
            return bad(pool_problem(args.pool))
    args.pool = args.pool or 1
    scenario = load_scenario_or_exit(args.scenario, args.url, scenario_overrides(args))
    for u in scenario.unrun_checks:
        print(f"harness: not evaluated: {u['check']!r}: {u['reason']}", file=sys.stderr)
    if scenario.server.backend == "external" and args.preflight:
        return bad("--preflight does not apply to backend: external (the harness starts no server)")
    if scenario.server.backend == "sim" and not args.dry_run:
        require_extra("sim", "harness run with backend: sim")
    # what this night can decide: the runner prints it on stderr once the run's inputs are accepted
    plan_lines = [] if args.resume or args.find_ratio else resolve_repeats(scenario, Path(args.results_dir))
    write_report = not args.no_report and not args.dry_run
    if write_report and (gone := _missing_report_extra()):
        print(f"harness: no report at the end of this run: {gone}", file=sys.stderr)
        write_report = False
    options = runner.RunOptions(
        results_dir=Path(args.results_dir),
        only=args.only,
        preflight_mode=args.preflight,
        draw_report=_draw_report if write_report else None,
        reports_dir=Path(args.reports_dir),
        shard=_parse_shard(args.shard),
        live_progress=None,
        probe=args.probe,
        start_lines=plan_lines,
    )
    if args.gpus is not None:
        from harness.run import lanes

        try:
            options.gpus = lanes.parse_gpus(args.gpus) or lanes.host_gpus()
        except BadInput as exc:
            return bad(str(exc))
    try:
        if args.find_ratio:
            from harness.cli.find_ratio import run_find_ratio

            return run_find_ratio(args, scenario, options, _report_run)
        if args.resume and resume.holds_only_its_lock(Path(args.resume)):
            resume.check_fresh_start(scenario, Path(args.resume))
            print(
                f"harness: {args.resume} holds only its .lock (the harness stopped before writing its "
                "manifest; nothing was measured): the run starts again in it",
                file=sys.stderr,
            )
            if args.dry_run:
                variants, _ = select_run_variants(scenario, options.only, options.shard)
                sys.stdout.write(manifest.dry_run_text(scenario, variants))
                return ExitCode.OK
            options.into = Path(args.resume)
            outcome = runner.run_scenario(scenario, options, harness_argv=sys.argv)
        elif args.resume:
            plan = resume.check_resume(scenario, Path(args.resume), options.only, options.shard)
            if args.dry_run:
                print(plan.describe())
                return ExitCode.OK
            reopened = resume.reopen_run(plan, scenario, sys.argv)
            print(plan.describe(), file=sys.stderr)
            outcome = runner.execute_run(scenario, options, reopened.run, reopened.variants, prior=reopened.prior)
        elif args.dry_run:
            variants, _ = select_run_variants(scenario, options.only, options.shard)
            found = builds.dry_run_lines(scenario, variants)  # BuildError (exit 2): as the run refuses it
            sys.stdout.write(manifest.dry_run_text(scenario, variants))
            for line in found:
                print(line)
            if scenario.server.backend == "external":
                pass  # no estimate: its pools and speeds are the running servers'
            elif scenario.estimate is None:
                print("# no cost estimate: add `estimate: {prefill_tok_s: <measured tok/s>}` to the scenario")
                for line in design_warning_lines(design_warnings(scenario, variants)):
                    print(line)
            else:  # the estimate's table lists each variant's design warnings
                est = estimate_run(scenario, variants)
                print("\n".join(est.to_lines()))
                if options.gpus:
                    print(est.side_by_side_line(options.gpus))
            for line in plan_lines:
                print(f"# {line}")
            return ExitCode.OK
        else:
            outcome = runner.run_scenario(scenario, options, harness_argv=sys.argv)
    except BadInput as exc:  # e.g. --only naming no variant, a resume refused, a run locked
        return bad(str(exc))
    code = _report_run(outcome, args)
    if not args.decide or outcome.verdict is None or outcome.verdict.outcome is Outcome.INTERRUPTED:
        return code
    return _decide(args, scenario, options, outcome.run_dir, code)


def _decide(args, scenario: Scenario, options, night: Path, night_code: int) -> int:
    """``--decide``: the rounds the comparison with ``--baseline`` advises (harness/compare/rounds.py);
    the exit code is the final comparison's, or the night's own where the comparison PASSes and
    the night's verdict did not."""
    import dataclasses

    from harness.cli.compare import cli_main as compare_main
    from harness.compare.rounds import decide
    from harness.run import runner

    def run_round(repeats: int, variants: list[str], workloads: list[str] | None = None):
        args_round = argparse.Namespace(**{**vars(args), "repeats": repeats, "no_quality": True})
        round_scenario = load_scenario_or_exit(
            args.scenario, args.url, scenario_overrides(args_round), None if args.url else (workloads or None)
        )
        round_options = dataclasses.replace(options, only=list(variants), draw_report=None, start_lines=[])
        try:
            out = runner.run_scenario(round_scenario, round_options, harness_argv=sys.argv)
        except BadInput as exc:
            print(f"harness: round refused: {exc}", file=sys.stderr)
            return None, ExitCode.BAD_INPUT
        return out.run_dir, out.exit_code

    budget = scenario.verdict.budget_minutes
    baseline, rounds = decide(night, args.baseline, Path(args.results_dir), run_round, budget, args.pool)
    look = argparse.Namespace(
        run=str(night),
        baseline=baseline,
        results_dir=args.results_dir,
        pool=args.pool if args.baseline == "latest" else 1,
        round=[str(r) for r in rounds],
        junit=None,
        markdown=None,
    )
    code = compare_main(look)  # the final look: comparison.json, the Markdown, the exit code
    return night_code if code == ExitCode.OK and night_code != ExitCode.OK else code


def _missing_report_extra() -> str | None:
    try:
        require_extra("report", "the HTML report")
    except MissingExtra as exc:
        return str(exc)
    return None


def _report_run(outcome, args) -> int:
    """The run's verdict on the console (one line per variant, then the reasons), where its files
    are, and how to resume an interrupted run; the exit code is the verdict's."""
    for line in outcome.verdict.lines():
        print(line)
    _print_table(outcome.run_dir)
    print(f"results: {outcome.run_dir}")
    if outcome.report_path is not None:
        print(f"report:  {outcome.report_path}")
    if outcome.report_interrupted:
        print(f"report interrupted: draw it with  harness report {shlex.quote(str(outcome.run_dir))}")
    if outcome.verdict.outcome is Outcome.INTERRUPTED:
        again = [args.scenario] if args.scenario else []
        again += [f"--url={u}" for u in args.url or ()]
        again += [f"--set={o}" for o in args.set or ()]
        again += [f"--repeats={args.repeats}"] if args.repeats is not None else []
        again += ["--no-quality"] if args.no_quality else []
        print(f"resume:  harness run {shlex.join(again)} --resume {shlex.quote(str(outcome.run_dir))}")
    return outcome.exit_code


def _print_table(run_dir: Path) -> None:
    """The run's results table (`harness.analysis.results_table`), read from the folder it just wrote; a
    run that wrote no folder (refused before its first variant) has none."""
    from harness.analysis.results_table import results_table, to_text
    from harness.store import results

    try:
        sys.stdout.write(to_text(results_table(run_dir)))
    except results.ResultsError as exc:
        print(f"harness: no results table: {exc}", file=sys.stderr)

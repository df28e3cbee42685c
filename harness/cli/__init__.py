"""The `harness` command: parse arguments, call one function, map its outcome to an exit code.

Exit codes: 0 pass; 1 a regression, a failed expectation or a variant that failed unexpectedly;
2 bad input (scenario, arguments, results); 3 the harness or its environment broke; 130 interrupted.
"""

from __future__ import annotations

import argparse
import json
import logging
import shlex
import sys
from pathlib import Path

from harness import __version__
from harness.analysis.verdict import Outcome
from harness.core.errors import BadInput, Broken
from harness.core.exit_codes import ExitCode, restore_handlers, terminations_interrupt
from harness.core.optional import MissingExtra, require_extra
from harness.run.estimate import design_warning_lines, design_warnings, estimate_run
from harness.run.progress import plural

DESCRIPTION = (
    "Benchmark and regression harness for SGLang's hierarchical KV cache (HiCache): run a "
    "scenario (one server per variant), compare runs, draw reports."
)
EPILOG = (
    "Exit codes: 0 pass, 1 regression / failed expectation / unexpected variant failure, 2 bad "
    "input (or a missing optional extra), 3 the harness or its environment broke, 4 inconclusive, "
    "130 interrupted. Docs: README.md and docs/ in the repository."
)

# Each command imports its modules when it runs, so that `--help` and `validate` stay fast.


def _load_scenario_or_exit(path: str | None, urls: list[str] | None = None, overrides=()):
    """The scenario of ``path``; with ``urls`` (``run --url``) its backend-external form, one
    variant per URL (``path`` None: the bundled default workloads); ``overrides``: ``--set``'s
    (`harness.scenario.overrides`)."""
    from harness.core.bundled import resolve_scenario_path
    from harness.scenario import ScenarioError, load_scenario
    from harness.scenario.overrides import load_with_overrides
    from harness.scenario.urls import parse_url_args, scenario_with_urls

    resolved, bundled = resolve_scenario_path(path) if path is not None else (None, False)
    if bundled:
        print(f"harness: no {path} here; using the one this package ships: {resolved}", file=sys.stderr)
    try:
        if urls:
            try:
                pairs = parse_url_args(urls)
            except ValueError as exc:
                raise SystemExit(_bad(str(exc))) from None
            return scenario_with_urls(resolved, pairs, overrides=overrides)
        if overrides:
            return load_with_overrides(resolved, overrides)
        return load_scenario(resolved)
    except ScenarioError as exc:
        for line in exc.lines:
            print(line, file=sys.stderr)
        raise SystemExit(ExitCode.BAD_INPUT) from None


def _overrides(args) -> list:
    """``--set KEY=VALUE`` (in order), then ``--repeats N`` and ``--no-quality`` as the overrides
    they stand for; a malformed one exits 2 naming it."""
    from harness.scenario.overrides import Override, parse_override

    try:
        out = [parse_override(text) for text in args.set or ()]
    except ValueError as exc:
        raise SystemExit(_bad(str(exc))) from None
    if args.repeats is not None:
        out.append(Override(f"repeats={args.repeats}", ("repeats",), args.repeats))
    if args.no_quality:
        out.append(Override("quality.enabled=false", ("quality", "enabled"), False))
    return out


def cmd_validate(args) -> int:
    from harness.compare.planning import resolve_repeats

    scenario = _load_scenario_or_exit(args.scenario)
    variants = scenario.expand_variants()
    print(
        f"{args.scenario}: ok — scenario {scenario.name!r}, backend {scenario.server.backend}, "
        f"{plural(len(variants), 'variant')} ({', '.join(v.name for v in variants)}), "
        f"{plural(len(scenario.workloads), 'workload')}"
    )
    for line in resolve_repeats(scenario, Path(args.results_dir)):
        print(line)
    from harness.run.ratio_boundary import boundary_lines

    for line in boundary_lines(scenario, variants):
        print(line)
    return ExitCode.OK


def cmd_schema(args) -> int:
    from harness.scenario import json_schema

    print(json.dumps(json_schema(), indent=2))
    return ExitCode.OK


def _parse_shard(text: str | None):
    if text is None:
        return None
    try:
        i, n = (int(x) for x in text.split("/"))
    except ValueError:
        raise SystemExit(_bad(f"--shard: expected I/N, got {text!r}")) from None
    if not (n >= 1 and 1 <= i <= n):
        raise SystemExit(_bad(f"--shard: expected 1 <= I <= N, got {text!r}"))
    return (i, n)


def _bad(message: str) -> int:
    print(f"harness: {message}", file=sys.stderr)
    return ExitCode.BAD_INPUT


def _draw_report(run_root: Path, reports_dir: Path) -> Path:
    from harness.report.html import write_report  # heavy (matplotlib, jinja2): only when a report is drawn

    return write_report(run_root, reports_dir)


def cmd_run(args) -> int:
    """A fresh run, or with --resume the rest of an interrupted one; --dry-run prints what would start."""
    from harness.compare.planning import resolve_repeats
    from harness.run import manifest, resume, runner
    from harness.run.shard import select_run_variants

    if args.scenario is None and not args.url:
        return _bad("run: give a SCENARIO file, or --url URL to measure a running server")
    if args.decide and (args.shard or args.resume):
        return _bad("run --decide: not with --shard or --resume (a round is a run of the whole night's variants)")
    scenario = _load_scenario_or_exit(args.scenario, args.url, _overrides(args))
    for u in scenario.unrun_checks:
        print(f"harness: not evaluated: {u['check']!r}: {u['reason']}", file=sys.stderr)
    if scenario.server.backend == "external" and args.preflight:
        return _bad("--preflight does not apply to backend: external (the harness starts no server)")
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
            return _bad(str(exc))
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
            sys.stdout.write(manifest.dry_run_text(scenario, variants))
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
        return _bad(str(exc))
    code = _report_run(outcome, args)
    if not args.decide or outcome.verdict is None or outcome.verdict.outcome is Outcome.INTERRUPTED:
        return code
    return _decide(args, scenario, options, outcome.run_dir, code)


def _decide(args, scenario, options, night: Path, night_code: int) -> int:
    """``--decide``: the rounds the comparison with ``--baseline`` advises (harness/compare/rounds.py);
    the exit code is the final comparison's, or the night's own where the comparison PASSes and
    the night's verdict did not."""
    import dataclasses

    from harness.cli import compare
    from harness.compare.rounds import decide
    from harness.run import runner

    def run_round(repeats: int, variants: list[str]):
        args_round = argparse.Namespace(**{**vars(args), "repeats": repeats, "no_quality": True})
        round_scenario = _load_scenario_or_exit(args.scenario, args.url, _overrides(args_round))
        round_options = dataclasses.replace(options, only=list(variants), draw_report=None, start_lines=[])
        try:
            out = runner.run_scenario(round_scenario, round_options, harness_argv=sys.argv)
        except BadInput as exc:
            print(f"harness: round refused: {exc}", file=sys.stderr)
            return None, ExitCode.BAD_INPUT
        return out.run_dir, out.exit_code

    budget = scenario.verdict.budget_minutes
    baseline, rounds = decide(night, args.baseline, Path(args.results_dir), run_round, budget)
    look = argparse.Namespace(
        run=str(night),
        baseline=baseline,
        results_dir=args.results_dir,
        pool=1,
        round=[str(r) for r in rounds],
        junit=None,
        markdown=None,
    )
    code = compare.cli_main(look)  # the final look: comparison.json, the Markdown, the exit code
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


def cmd_show(args) -> int:
    """``harness show RUN [--json]``: the results table of a stored run."""
    from harness.analysis.results_table import results_table, to_text
    from harness.store import results

    try:
        table = results_table(Path(args.run))
    except results.ResultsError as exc:
        return _bad(f"show: {exc}")
    if args.json:
        print(json.dumps(table.to_json(), indent=2))
    else:
        sys.stdout.write(to_text(table))
    return ExitCode.OK


def cmd_merge(args) -> int:
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


def _delegate(module: str, *extras: str):
    """A subcommand whose whole job lives in ``module.cli_main(args) -> int``; ``extras``: the
    optional extras it needs (checked before the module is imported: one line, exit 2)."""

    def run(args) -> int:
        import importlib

        for extra in extras:
            require_extra(extra, f"harness {args.command}")
        return importlib.import_module(module).cli_main(args)

    return run


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="harness", description=DESCRIPTION, epilog=EPILOG)
    p.add_argument("--version", action="version", version=f"harness {__version__}")
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

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
        "--find-ratio",
        action="store_true",
        help="run one HiCache variant (--only V) at its predicted safe-ratio boundary and a step above, for the "
        "start limit and the page-cache limit, and say whether both sides agree and where the cliffs are",
    )
    s.set_defaults(func=cmd_run)

    s = sub.add_parser("show", help="print a run's results table (per variant: TTFT, speedup, tier share, parity)")
    s.add_argument("run", help="run folder (results/<scenario>/<run_id>)")
    s.add_argument("--json", action="store_true", help="the table as JSON, for scripts")
    s.set_defaults(func=cmd_show)

    s = sub.add_parser("report", help="write the self-contained HTML report of a run")
    s.add_argument("run", help="run folder (results/<scenario>/<run_id>)")
    s.add_argument("--reports-dir", default="reports", help="where reports go (default: reports)")
    s.set_defaults(func=_delegate("harness.report.html", "report"))

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
    s.set_defaults(func=_delegate("harness.cli.compare", "stats"))

    s = sub.add_parser("accept", help="accept a run as a baseline (even one whose comparison failed)")
    s.add_argument("run", help="run folder")
    s.add_argument("--note", help="why it is accepted (kept in accepted.json)")
    s.set_defaults(func=_delegate("harness.cli.accept"))

    s = sub.add_parser("history", help="trend page of a scenario's runs, with change points")
    s.add_argument("scenario", help="scenario name (or its YAML file)")
    s.add_argument("--results-dir", default="results")
    s.add_argument("--reports-dir", default="reports")
    s.set_defaults(func=_delegate("harness.cli.history", "report"))

    s = sub.add_parser(
        "load",
        help="a run's tables (requests, samples, quality, parity, summaries): print "
        "their shapes and heads, or write them as CSV or Parquet files",
    )
    s.add_argument("run", help="run folder")
    s.add_argument("--csv", metavar="DIR", help="write each table as DIR/<table>.csv")
    s.add_argument("--parquet", metavar="DIR", help="write each table as DIR/<table>.parquet (needs pyarrow)")
    s.set_defaults(func=_delegate("harness.cli.load"))

    s = sub.add_parser("merge", help="combine shard runs of one scenario into one run folder")
    s.add_argument("runs", nargs="+", metavar="RUN_DIR")
    s.add_argument("--results-dir", default="results", help="where the merged run goes (default: results)")
    s.set_defaults(func=cmd_merge)

    from harness.cli.bisect import add_parser as add_bisect  # light: its work is imported when it runs

    add_bisect(sub)

    s = sub.add_parser("validate", help="check a scenario without starting anything")
    s.add_argument("scenario")
    s.add_argument(
        "--results-dir",
        default="results",
        help="earlier runs the verdict plan reads its spread from (default: results)",
    )
    s.set_defaults(func=cmd_validate)

    s = sub.add_parser("schema", help="print the JSON Schema of the scenario format")
    s.set_defaults(func=cmd_schema)

    # Listed for --help; main() hands their arguments to their own parsers.
    sub.add_parser("sim", help="the simulated sglang server (accepts sglang's launch flags; sim --help)")
    sub.add_parser("probe", help="platform probes: WSL, host-memory mapping, H2D/D2H bandwidth (probe --help)")
    return p


# Subcommands whose own argument parser takes every argument after the name: (module, function,
# the extra it needs).
_PASSTHROUGH = {"sim": ("harness.sim.cli", "main", "sim"), "probe": ("harness.probe.cli", "main", None)}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] in _PASSTHROUGH:
        import importlib

        module, func, extra = _PASSTHROUGH[argv[0]]
        if extra is not None and argv[1:] not in (["-h"], ["--help"]):
            try:
                require_extra(extra, f"harness {argv[0]}")
            except MissingExtra as exc:
                print(exc, file=sys.stderr)
                return ExitCode.BAD_INPUT
        return getattr(importlib.import_module(module), func)(argv[1:])
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s"
    )
    handlers = terminations_interrupt()  # a console script's main: from here on, as `python -m harness` is
    try:
        return args.func(args)
    except MissingExtra as exc:  # an optional extra this command needs: one line, never a traceback
        print(exc, file=sys.stderr)
        return ExitCode.BAD_INPUT
    except BadInput as exc:  # the user's input: one line, never a traceback
        return _bad(str(exc))
    except Broken as exc:  # raised on purpose: what broke, in one line
        logging.getLogger("harness").error("harness %s: %s", args.command, exc)
        return ExitCode.BROKEN
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else ExitCode.BAD_INPUT
    except KeyboardInterrupt:
        return ExitCode.INTERRUPTED
    except OSError as exc:
        if exc.filename is None:  # not a file's: a harness bug
            logging.getLogger("harness").exception("harness %s failed", args.command)
            return ExitCode.BROKEN
        # a file system that refuses (read-only, full, no such folder, no permission): the file
        # and why, in one line, never a traceback
        return _bad(f"{exc.filename}: {exc.strerror or type(exc).__name__}")
    except Exception:  # noqa: BLE001 - a harness bug: its traceback, exit 3 (never read as bad input)
        logging.getLogger("harness").exception("harness %s failed", args.command)
        return ExitCode.BROKEN
    finally:
        restore_handlers(handlers)

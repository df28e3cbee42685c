"""``harness validate SCENARIO [--results-dir DIR]``: check a scenario without starting anything;
print its variants and workloads, the plan for a verdict (from earlier runs' spread) and the
safe-ratio boundary lines. Light: it loads no HTTP client and no pandas."""

from __future__ import annotations

import sys
from pathlib import Path

from harness.cli.common import load_scenario_or_exit
from harness.core.exit_codes import ExitCode
from harness.run.progress import plural


def add_parser(sub) -> None:
    s = sub.add_parser("validate", help="check a scenario without starting anything")
    s.add_argument("scenario")
    s.add_argument(
        "--results-dir",
        default="results",
        help="earlier runs the verdict plan reads its spread from (default: results)",
    )
    s.set_defaults(func=cli_main)


def cli_main(args) -> int:
    from harness.compare.planning import resolve_repeats
    from harness.scenario.checks import build_source_problems

    scenario = load_scenario_or_exit(args.scenario)
    variants = scenario.expand_variants()
    problems = build_source_problems(scenario, variants)  # what the run's build check refuses first
    for item in problems:
        print(item.format(), file=sys.stderr)
    if problems:
        return ExitCode.BAD_INPUT
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

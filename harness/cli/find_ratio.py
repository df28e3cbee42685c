"""``harness run SCENARIO --find-ratio``: run the safe-ratio boundary's points and judge both sides
(harness/run/find_ratio.py); exit 1 when a side contradicts the prediction, else the run's own."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.core.errors import BadInput
from harness.core.exit_codes import ExitCode

if TYPE_CHECKING:
    from harness.scenario.models import Scenario


def run_find_ratio(args, scenario: Scenario, options, report_run) -> int:
    from harness.run import find_ratio, manifest, runner

    for flag, given in (("--decide", args.decide), ("--resume", args.resume), ("--shard", args.shard)):
        if given:
            raise BadInput(f"run --find-ratio: not with {flag} (it runs its own variants: the boundary's points)")
    if scenario.server.backend == "external":
        raise BadInput("run --find-ratio: not with backend: external (the harness starts no server)")
    if not scenario.sampling.enabled:
        raise BadInput("run --find-ratio: needs sampling.enabled (the page-cache side is judged on the samples)")
    plan = find_ratio.plan(scenario, args.only)
    run = find_ratio.prepare(scenario, plan)
    for line in plan.lines():
        print(line, file=sys.stderr if not args.dry_run else sys.stdout)
    if args.dry_run:
        sys.stdout.write(manifest.dry_run_text(run, run.expand_variants()))
        return ExitCode.OK
    options.only = None
    tolerance_gib = scenario.sampling.cooldown_mem_tolerance_gib
    judged: dict[str, Any] = {}
    draw = options.draw_report
    if draw is not None:  # judged just before the report is drawn: the page shows ratio_boundary.json

        def judge_then_draw(root: Path, reports_dir: Path) -> Path:
            judged["res"] = find_ratio.judge(Path(root), plan, tolerance_gib)
            return draw(root, reports_dir)

        options.draw_report = judge_then_draw
    outcome = runner.run_scenario(run, options, harness_argv=sys.argv)
    code = report_run(outcome, args)
    if outcome.run_dir is None or not Path(outcome.run_dir).is_dir():
        return code
    res = judged.get("res") or find_ratio.judge(Path(outcome.run_dir), plan, tolerance_gib)
    for line in find_ratio.result_lines(res):
        print(line)
    print(f"find-ratio: {Path(outcome.run_dir) / find_ratio.RESULT_FILE}")
    if not res["confirmed"] and code in (ExitCode.OK, ExitCode.INCONCLUSIVE):
        return ExitCode.FAIL
    return code

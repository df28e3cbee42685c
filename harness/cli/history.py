"""``harness history SCENARIO``: collect the scenario's runs and write its history page."""

from __future__ import annotations

import sys
from pathlib import Path

from harness.core.exit_codes import ExitCode
from harness.core.optional import require_extra
from harness.core.yaml_lines import load_yaml
from harness.store import results


def add_parser(sub) -> None:
    s = sub.add_parser("history", help="trend page of a scenario's runs, with change points")
    s.add_argument("scenario", help="scenario name (or its YAML file)")
    s.add_argument("--results-dir", default="results")
    s.add_argument("--reports-dir", default="reports")
    s.set_defaults(func=cli_main)


def _scenario_name(arg: str) -> str:
    """A scenario name, or the name in a scenario YAML file (its stem when it has none)."""
    p = Path(arg)
    if p.suffix in (".yaml", ".yml") and p.is_file():
        data = load_yaml(p).data
        return str(data.get("name") or p.stem)
    return arg


def cli_main(args) -> int:
    require_extra("report", "harness history")
    from harness.compare.history import collect  # heavy (pandas, jinja2): only when it runs
    from harness.report.history_page import write_history_page

    try:
        name = _scenario_name(args.scenario)
    except Exception as exc:  # noqa: BLE001 - a YAML that does not load
        print(f"harness history: {args.scenario}: {exc}", file=sys.stderr)
        return ExitCode.BAD_INPUT
    if not results.list_runs(Path(args.results_dir), name):
        print(f"harness history: no runs of {name} under {args.results_dir}", file=sys.stderr)
        return ExitCode.BAD_INPUT
    h = collect(Path(args.results_dir), name)
    try:
        out = write_history_page(h, Path(args.reports_dir))
    except results.ResultsError as exc:  # its target is not a regular file (harness.store.targets)
        print(f"harness history: {exc}", file=sys.stderr)
        return ExitCode.BAD_INPUT
    for i, changes in h.night_changes.items():  # what differs at each change point, most likely cause first
        print(f"change point at {h.runs[i]['run_id']}: what changed since {h.runs[i - 1]['run_id']}:")
        for c in changes[:20] or [
            {"text": "nothing differs between the two nights' manifests, builds, probes or pools"}
        ]:
            print(f"  - {c['text']}")
    print(f"history: {out}")
    return ExitCode.OK

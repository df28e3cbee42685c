"""What several commands share: a scenario loaded (or exit 2 with its errors), ``--set`` and its
shorthands as overrides, and the one-line refusal of bad input (exit 2)."""

from __future__ import annotations

import sys

from harness.core.exit_codes import ExitCode


def load_scenario_or_exit(path: str | None, urls: list[str] | None = None, overrides=(), workloads=None):
    """The scenario of ``path``; with ``urls`` (``run --url``) its backend-external form, one
    variant per URL (``path`` None: the bundled default workloads); ``overrides``: ``--set``'s
    (`harness.scenario.overrides`); ``workloads``: only those run (a ``--decide`` round)."""
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
                raise SystemExit(bad(str(exc))) from None
            return scenario_with_urls(resolved, pairs, overrides=overrides)
        if overrides or workloads is not None:
            return load_with_overrides(resolved, overrides, workloads=workloads)
        return load_scenario(resolved)
    except ScenarioError as exc:
        for line in exc.lines:
            print(line, file=sys.stderr)
        raise SystemExit(ExitCode.BAD_INPUT) from None


def scenario_overrides(args) -> list:
    """``--set KEY=VALUE`` (in order), then ``--repeats N`` and ``--no-quality`` as the overrides
    they stand for; a malformed one exits 2 naming it."""
    from harness.scenario.overrides import Override, parse_override

    try:
        out = [parse_override(text) for text in args.set or ()]
    except ValueError as exc:
        raise SystemExit(bad(str(exc))) from None
    if args.repeats is not None:
        out.append(Override(f"repeats={args.repeats}", ("repeats",), args.repeats))
    if args.no_quality:
        out.append(Override("quality.enabled=false", ("quality", "enabled"), False))
    return out


def bad(message: str) -> int:
    print(f"harness: {message}", file=sys.stderr)
    return ExitCode.BAD_INPUT

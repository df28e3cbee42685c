"""``harness run [SCENARIO] --url [NAME=]URL ...``: a one-off run against running servers.

One job: turn a scenario file (or, without one, the bundled ``scenarios/external.yaml``) and the
URLs into a ``backend: external`` scenario — its workloads, quality, sampling, verdict,
expectations and gates kept; ``server`` reduced to what applies to a running server
(``request_timeout_s``, ``liveness_idle_s``, ``watchdog``); one variant per URL; the blocks that
cannot apply (``matrix``, ``preflight``, ``estimate``, the cooldown settings) dropped, and so are
checks, gates and names that name a variant the URLs do not have (the checks are kept as the
scenario's ``unrun_checks``: the run reports each as not evaluated). The result is written as JSON
(which is YAML) and loaded like any scenario, so the run's manifest holds the exact text it ran.
``--set`` overrides (`harness.scenario.overrides`) apply to the file's tree before the rewrite.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from harness.core.bundled import bundled_dir
from harness.core.yaml_lines import YamlLoadError, load_yaml
from harness.scenario.loading import load_scenario_text
from harness.scenario.models import Scenario
from harness.scenario.overrides import Override, load_with_overrides, override_tree
from harness.spec.errors import ErrorItem, ScenarioError
from harness.spec.values import Check, Gate, url_problem

DEFAULT_SCENARIO = "external.yaml"  # the workloads of `harness run --url URL` without a scenario
SERVER_KEYS_KEPT = ("request_timeout_s", "liveness_idle_s", "watchdog", "api_key_env")
DROPPED_BLOCKS = ("matrix", "preflight", "estimate")
DROPPED_SAMPLING = ("cooldown_timeout_s", "cooldown_mem_tolerance_gib")
NAME_SUFFIX = "-url"  # its runs go to their own results folder, apart from the scenario's own runs


def parse_url_args(values: list[str]) -> list[tuple[str, str]]:
    """``--url`` values → [(variant name, url)]: ``NAME=URL`` or a bare URL (``server``, or
    ``server1``, ``server2``... when there are several). ValueError names a bad one."""
    bare = sum(1 for v in values if not _split_name(v)[0])
    out: list[tuple[str, str]] = []
    for i, value in enumerate(values, 1):
        name, url = _split_name(value)
        if not name:
            name = "server" if bare == 1 else f"server{i}"
        problem = url_problem(url)
        if problem:
            raise ValueError(f"--url {value}: {problem}")
        if any(name == n for n, _ in out):
            raise ValueError(f"--url {value}: the name {name!r} is given twice")
        out.append((name, url.rstrip("/")))
    return out


def _split_name(value: str) -> tuple[str, str]:
    name, eq, rest = value.partition("=")
    if eq and "://" not in name and "/" not in name:
        return name.strip(), rest.strip()
    return "", value.strip()


def scenario_with_urls(
    path: str | Path | None,
    urls: list[tuple[str, str]],
    env: Mapping[str, str] | None = None,
    overrides: Sequence[Override] = (),
) -> Scenario:
    """The ``backend: external`` scenario of ``path`` (None: the bundled default) with one variant
    per (name, url), after ``overrides`` (``--set``). ScenarioError as for any scenario; line
    numbers point into the generated text, whose keys are the scenario's own. The checks left
    out because they name other variants are kept as the scenario's ``unrun_checks``."""
    src = Path(path) if path is not None else _default_path()
    names = {n for n, _ in urls}
    if overrides:
        scn = load_with_overrides(src, overrides, rewrite=lambda t: rewrite_tree(t, urls, src.stem), env=env)
        scn._unrun_checks += unrun_checks(override_tree(_raw(src), overrides)[0], names)
        return scn
    data = _raw(src)
    tree = rewrite_tree(data, urls, src.stem)
    text = f"# {src.name} with --url\n" + json.dumps(tree, indent=2) + "\n"  # its hash: the same from any folder
    scn = load_scenario_text(text, file=f"{src.name} (--url)", env=env, base_dir=src.absolute().parent)
    scn._unrun_checks = unrun_checks(data, names)
    return scn


def _raw(src: Path) -> dict:
    try:
        y = load_yaml(src)
    except YamlLoadError as e:
        raise ScenarioError([ErrorItem(e.file, e.line, e.path, e.message)]) from None
    if not isinstance(y.data, dict):
        raise ScenarioError([ErrorItem(str(src), 1, None, "a scenario must be a mapping")])
    return y.data


def unrun_checks(data: Mapping[str, Any], names: set[str]) -> list[dict[str, str]]:
    """The expectation checks of a raw scenario tree that name a variant not in ``names``, each
    with its reason (reported by the run as not evaluated)."""
    expectations = data.get("expectations")
    checks = expectations.get("checks") if isinstance(expectations, Mapping) else None
    listed = ", ".join(sorted(names))
    return [
        {"check": str(c), "reason": f"names a variant this --url run does not have ({listed})"}
        for c in (checks if isinstance(checks, list) else ())
        if not _names_known(Check, c, names)
    ]


def _default_path() -> Path:
    root = bundled_dir()
    if root is None or not (root / DEFAULT_SCENARIO).is_file():
        raise ScenarioError([ErrorItem(DEFAULT_SCENARIO, None, None, "the bundled default scenario is missing")])
    return root / DEFAULT_SCENARIO


def rewrite_tree(data: Mapping[str, Any], urls: list[tuple[str, str]], stem: str) -> dict[str, Any]:
    """The raw (unexpanded) scenario tree rewritten for ``urls`` (pure)."""
    names = {n for n, _ in urls}
    tree = {k: v for k, v in data.items() if k not in DROPPED_BLOCKS}
    base = str(data.get("name") or stem)
    tree["name"] = base if base.endswith(NAME_SUFFIX) or path_is_default(stem) else base + NAME_SUFFIX
    server = data.get("server") if isinstance(data.get("server"), Mapping) else {}
    tree["server"] = {"backend": "external", **{k: server[k] for k in SERVER_KEYS_KEPT if k in server}}
    tree["variants"] = [{"name": n, "url": u} for n, u in urls]
    sampling = data.get("sampling")
    if isinstance(sampling, Mapping):
        tree["sampling"] = {k: v for k, v in sampling.items() if k not in DROPPED_SAMPLING}
    quality = data.get("quality")
    if isinstance(quality, Mapping) and quality.get("baseline_variant") not in names:
        tree["quality"] = {k: v for k, v in quality.items() if k != "baseline_variant"}
    expectations = data.get("expectations")
    if isinstance(expectations, Mapping) and isinstance(expectations.get("checks"), list):
        kept = [c for c in expectations["checks"] if _names_known(Check, c, names)]
        tree["expectations"] = {**expectations, "checks": kept}
    if isinstance(data.get("gate"), list):
        tree["gate"] = [g for g in data["gate"] if _names_known(Gate, g, names)]
    verdict = data.get("verdict")
    if isinstance(verdict, Mapping) and isinstance(verdict.get("allow_not_exercised"), list):
        tree["verdict"] = {**verdict, "allow_not_exercised": [n for n in verdict["allow_not_exercised"] if n in names]}
    return tree


def path_is_default(stem: str) -> bool:
    return stem == Path(DEFAULT_SCENARIO).stem


def _names_known(kind, text: Any, names: set[str]) -> bool:
    """A check or gate that names no variant, or one of ``names``; one that cannot be parsed is
    kept (the loader reports it)."""
    try:
        variant = kind.parse(text).variant
    except ValueError:
        return True
    return variant is None or variant in names

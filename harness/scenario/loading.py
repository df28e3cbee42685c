"""Loading: file or text → YAML with lines → ``${VAR}`` expansion → models → checks → variants.

Every error that can be found is reported at once (fix them all, then run ``validate`` again):
a YAML syntax error stops everything; otherwise the ``${VAR}`` errors, the typed model's errors
and the expectations' metric names (checked on the raw tree when the model fails) come together;
a scenario whose model validates gets its cross-field checks, variant expansion and late checks
in one pass, and its size checks too unless a ``${VAR}`` error left a value unusable."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from pydantic import ValidationError

from harness.core.yaml_lines import (
    LoadedYaml,
    YamlLoadError,
    format_path,
    line_for,
    load_yaml,
    load_yaml_text,
)
from harness.scenario.checks import late_checks, raw_expectation_checks, semantic
from harness.scenario.error_mapping import convert_errors
from harness.scenario.expansion import expand_tree
from harness.scenario.hashing import scenario_hash
from harness.scenario.limits import size_checks
from harness.scenario.models import AUTO_REPEATS, Scenario
from harness.scenario.server_models import SimOptions
from harness.scenario.variants import expand_variants
from harness.spec.errors import ErrorItem, ScenarioError


def _sort_items(items: list[ErrorItem]) -> list[ErrorItem]:
    seen = set()
    out = []
    for it in items:
        key = (it.line, it.path, it.message)
        if key not in seen:
            seen.add(key)
            out.append(it)
    return sorted(out, key=lambda it: it.line or 0)


def _from_loaded(y: LoadedYaml, env: Mapping[str, str] | None, path: Path | None) -> Scenario:
    file = y.file
    env = os.environ if env is None else env
    exp_errors: list[tuple[tuple, str]] = []
    data = expand_tree(y.data, (), env, exp_errors)
    errors = [ErrorItem(file, line_for(y.lines, p), format_path(p), msg) for p, msg in exp_errors]
    if "name" not in data and path is not None:
        data = {"name": path.stem, **data}
    try:
        scn = Scenario.model_validate(data)
    except ValidationError as e:
        errors += convert_errors(e, data, y.lines, file)
        errors += raw_expectation_checks(data, y.lines, file)
        raise ScenarioError(_sort_items(errors)) from None
    expansion_failed = bool(errors)
    if scn.repeats == 0:  # repeats: auto
        scn.repeats, scn._repeats_auto = AUTO_REPEATS, True
    scn._text = y.text
    scn._hash = scenario_hash(y.text)
    scn._path = path
    scn._base_dir = path.absolute().parent if path is not None else Path.cwd()
    errors += semantic(scn, y.lines, file)
    variants = None
    try:
        variants, more = expand_variants(scn, y.lines, file)
        errors += more
        errors += late_checks(scn, variants, y.lines, file)
        if not expansion_failed:  # sizes read model paths and contexts: not from an unexpanded value
            errors += size_checks(scn, variants, y.lines, file)
            for i, w in enumerate(scn.workloads):  # the files workloads read (datasets): before anything starts
                for where, msg in w.input_problems(scn._base_dir):
                    key = ("workloads", i, *where)
                    errors.append(ErrorItem(file, line_for(y.lines, key), format_path(key), msg))
    except Exception:  # noqa: BLE001 - a later check tripped over an error already found: report those
        if not errors:
            raise
    if errors:
        raise ScenarioError(_sort_items(errors))
    if scn.server.backend == "sim" and scn.server.sim is None:
        scn.server.sim = SimOptions()
    scn._variants = variants
    return scn


def load_scenario(path: str | Path, env: Mapping[str, str] | None = None) -> Scenario:
    """Load and validate a scenario file; ``env`` (default ``os.environ``) feeds ``${VAR}``.

    Raises ScenarioError whose ``errors`` are ``FILE:LINE KEY.PATH: message`` lines."""
    try:
        y = load_yaml(path)
    except YamlLoadError as e:
        raise ScenarioError([ErrorItem(e.file, e.line, e.path, e.message)]) from None
    return _from_loaded(y, env, Path(path))


def load_scenario_text(
    text: str | bytes, file: str = "<string>", env: Mapping[str, str] | None = None, base_dir: str | Path | None = None
) -> Scenario:
    """Like ``load_scenario`` for text in memory; relative paths resolve against ``base_dir``
    (default: the directory of ``file``, or the current directory)."""
    try:
        y = load_yaml_text(text, file)
    except YamlLoadError as e:
        raise ScenarioError([ErrorItem(e.file, e.line, e.path, e.message)]) from None
    p = Path(base_dir) / Path(file).name if base_dir is not None else Path(file)
    return _from_loaded(y, env, p)

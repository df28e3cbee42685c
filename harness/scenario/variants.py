"""Variant resolution: explicit variants and matrix expansions → resolved ``Variant`` objects
(server and variant args/env merged, paths resolved, readable matrix names, folder clashes refused)."""

from __future__ import annotations

import itertools
import json
import math
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from harness.core.yaml_lines import format_path, line_for
from harness.scenario.checks import axis_problem
from harness.scenario.error_mapping import message_for
from harness.scenario.models import DEFAULT_BUILD, MatrixEntry, Scenario, Variant, VariantFields, VariantSpec
from harness.scenario.server_models import SimOptions
from harness.spec.errors import ErrorItem
from harness.spec.values import fmt_num, parse_extra_args
from harness.store.names import clashes_with_run_files, safe_name
from harness.store.secrets import is_secret_name

MAX_MATRIX_VARIANTS = 1000


def _resolve_path(p: str, base_dir: Path | None, *, always: bool) -> str:
    """Absolute and ``~`` paths are kept. A relative path resolves against the scenario file's
    directory when ``always`` (sim model dirs, sglang_source, python), when it starts with ``./``
    or ``../``, or when it exists there; otherwise it is kept as written (a Hugging Face id such
    as ``Qwen/Qwen3-8B``)."""
    q = os.path.expanduser(p)
    if os.path.isabs(q) or base_dir is None:
        return q
    cand = os.path.normpath(os.path.join(str(base_dir), q))
    if always or q.startswith(("./", "../")) or os.path.exists(cand):
        return cand
    return p


def _merge_args(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    out.update(over)
    return {k: v for k, v in out.items() if v is not None and v is not False}


def _merge_env(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, str]:
    out = dict(base)
    out.update(over)
    return {k: v for k, v in out.items() if v is not None}


def _make_variant(
    scn: Scenario, spec: VariantFields, name: str, origin: str, matrix_values: dict | None = None
) -> Variant:
    s = scn.server
    base_dir = scn.base_dir
    sim = s.backend == "sim"
    # backend external: no model_path is needed (the running server has its own); "" = none given
    mp_spec = (spec.model_path if spec.model_path is not None else s.model_path) or ""
    build_name = spec.build or DEFAULT_BUILD
    build = scn.builds.get(build_name) if spec.build else None  # a missing name: reported by checks
    python = build.python if build is not None and build.python is not None else s.python
    if "/" in python:
        python = _resolve_path(python, base_dir, always=True)
    source = build.sglang_source if build is not None else s.sglang_source
    server_args = _merge_args(s.args, parse_extra_args(s.extra_args))
    server_env: Mapping[str, Any] = s.env
    if build is not None:  # the build's env and args sit between the server's and the variant's
        server_args = _merge_args(_merge_args(server_args, build.args), parse_extra_args(build.extra_args))
        server_env = _merge_env(server_env, build.env)
    return Variant(
        name=name,
        origin=origin,
        description=spec.description,
        backend=s.backend,
        python=python,
        command_prefix=list(s.command_prefix),
        sglang_source=(_resolve_path(source, base_dir, always=True) if source else None),
        model_path=_resolve_path(mp_spec, base_dir, always=sim) if mp_spec else "",
        model_path_spec=mp_spec,
        tp_size=s.tp_size,
        host=s.host,
        hicache=spec.hicache.model_copy() if spec.hicache is not None else None,
        args=_merge_args(server_args, spec.args),
        env=_merge_env(server_env, spec.env),
        expect=spec.expect,
        expect_cause=spec.expect_cause,
        sim_faults=list(spec.sim_faults),
        sim=(s.sim or SimOptions()) if sim else None,
        startup_timeout_s=s.startup_timeout_s,
        startup_retries=s.startup_retries,
        request_timeout_s=s.request_timeout_s,
        matrix_values=dict(matrix_values or {}),
        url=spec.url,
        build=build_name,
    )


def _axis_part(axis: str, value: Any, labels: Mapping[str, str], position: int) -> str:
    """The name part of one axis value. A secret's value never becomes part of a name (names
    become folders, report headings and JUnit test names): its position stands in for it."""
    if is_secret_name(axis.partition(".")[2]):
        shown = f"secret{position + 1}"
    elif axis == "build":
        shown = str(value)
    elif axis == "model_path" and isinstance(value, str):
        shown = os.path.basename(value.rstrip("/")) or value
    elif isinstance(value, bool):
        shown = "on" if value else "off"
    elif value is None:
        shown = "none"
    else:
        shown = fmt_num(value)
    if axis in labels:
        label = labels[axis]
        part = label.replace("{}", shown) if "{}" in label else label + shown
    else:
        root, _, rest = axis.partition(".")
        if axis == "hicache.ratio":
            part = f"r{shown}"
        elif axis == "hicache.size_gb":
            part = f"{shown}gb"
        elif root == "env":
            short = re.sub(r"^SGLANG_(HICACHE_)?", "", rest) or rest
            part = f"{short}_{shown}"
        elif root == "args":
            flag = rest.lstrip("-")
            part = flag if value is True else (f"no-{flag}" if value in (False, None) else f"{flag}_{shown}")
        else:
            part = shown
    return re.sub(r"[^\w.+@-]", "_", part)


def _matrix_variants(
    scn: Scenario, i: int, m: MatrixEntry, lines: dict, file: str, raw: dict | None
) -> tuple[list[Variant], list[ErrorItem]]:
    errs: list[ErrorItem] = []
    axes = list(m.axes.items())
    count = math.prod(len(vals) for _, vals in axes)
    if count > MAX_MATRIX_VARIANTS:
        p = ("matrix", i, "axes")
        return [], [
            ErrorItem(file, line_for(lines, p), format_path(p), f"{count} combinations (limit {MAX_MATRIX_VARIANTS})")
        ]
    base = m.model_dump(include=set(VariantFields.model_fields), exclude_unset=False)
    # validate each axis value alone, so an error points at that value
    for axis, vals in axes:
        if axis_problem(axis):
            return [], []  # already reported by _semantic
        for j, val in enumerate(vals):
            trial = {"name": "x", **_apply_axis({}, axis, val)}
            try:
                VariantSpec.model_validate(trial)
            except ValidationError as e:
                p = ("matrix", i, "axes", axis, j)
                for err in e.errors(include_url=False):
                    errs.append(
                        ErrorItem(file, line_for(lines, p), format_path(p), message_for(err, tuple(err["loc"])))
                    )
    if errs:
        return [], errs
    out: list[Variant] = []
    for combo in itertools.product(*(vals for _, vals in axes)):
        d = json.loads(json.dumps(base))
        values = {}
        parts = [m.prefix]
        for (axis, _), val in zip(axes, combo):
            d = _apply_axis(d, axis, val)
            values[axis] = val
            parts.append(_axis_part(axis, val, m.labels, m.axes[axis].index(val)))
        name = "-".join(parts)
        try:
            spec = VariantSpec.model_validate({**d, "name": name})
        except ValidationError as e:
            p = ("matrix", i)
            for err in e.errors(include_url=False):
                errs.append(
                    ErrorItem(
                        file,
                        line_for(lines, p),
                        format_path(p) + " (" + name + ")",
                        message_for(err, tuple(err["loc"])),
                    )
                )
            continue
        out.append(_make_variant(scn, spec, name, f"matrix[{i}]", values))
    return out, errs


def _apply_axis(d: dict, axis: str, val: Any) -> dict:
    d = dict(d)
    if axis in ("model_path", "build"):
        d[axis] = val
        return d
    root, _, rest = axis.partition(".")
    sub = dict(d.get(root) or {})
    sub[rest] = val
    d[root] = sub
    return d


def expand_variants(scn: Scenario, lines: dict | None, file: str) -> tuple[list[Variant], list[ErrorItem]]:
    lines = lines or {}
    errs: list[ErrorItem] = []
    variants: list[Variant] = []
    where: dict[str, tuple] = {}
    folders: dict[str, str] = {}  # results folder -> the variant name that has it

    def folder_clash(name: str, p: tuple) -> bool:
        """Two names that differ only in characters the results folder cannot hold (``@``, non-ASCII
        letters) would share one folder and overwrite each other's files."""
        if clashes_with_run_files(name):
            errs.append(
                ErrorItem(
                    file,
                    line_for(lines, p),
                    format_path(p),
                    f"variant name {name!r} would name its results folder like the run's own "
                    f"file {safe_name(name)!r}; rename it",
                )
            )
            return True
        other = folders.setdefault(safe_name(name), name)
        if other == name:
            return False
        errs.append(
            ErrorItem(
                file,
                line_for(lines, p),
                format_path(p),
                f"variant name {name!r} and {other!r} would share the results folder "
                f"{safe_name(name)!r}; rename one of them",
            )
        )
        return True

    for i, v in enumerate(scn.variants):
        p = ("variants", i, "name")
        if v.name in where:
            first = where[v.name]
            errs.append(
                ErrorItem(
                    file,
                    line_for(lines, p),
                    format_path(p),
                    f"duplicate variant name {v.name!r} (first at {format_path(first[:2])}, "
                    f"line {line_for(lines, first)})",
                )
            )
            continue
        if folder_clash(v.name, p):
            continue
        where[v.name] = p
        variants.append(_make_variant(scn, v, v.name, f"variants[{i}]"))
    for i, m in enumerate(scn.matrix):
        got, e = _matrix_variants(scn, i, m, lines, file, None)
        errs += e
        for v in got:
            p = ("matrix", i)
            if v.name in where:
                first = where[v.name]
                errs.append(
                    ErrorItem(
                        file,
                        line_for(lines, p),
                        format_path(p),
                        f"generated variant name {v.name!r} duplicates {format_path(first[:2])} "
                        f"(line {line_for(lines, first)}); change the prefix or labels",
                    )
                )
                continue
            if folder_clash(v.name, p):
                continue
            where[v.name] = p
            variants.append(v)
    return variants, errs

"""Sizes checked before anything starts: the model's config must be readable where the harness
needs it, and no request may be longer than the context the server will have.

sglang refuses a prompt longer than its context (HTTP 400 for every such request), so a scenario
that asks for one can only produce a run of errors; the harness says so at ``validate`` instead.
The context is ``--context-length`` when the variant sets it, else the model's
``max_position_embeddings``; "x pool" sizes resolve against ``--max-total-tokens`` when given,
else against the context (sglang sizes the pool itself). A request longer than a given
``--max-total-tokens`` pool could never be scheduled either.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from harness.core.model_config import ModelConfigError, ModelShape, load_model_shape
from harness.core.yaml_lines import format_path, line_for
from harness.scenario.models import Scenario, Variant
from harness.spec.errors import ErrorItem


def _int_arg(value: Any) -> int | None:
    try:
        return int(str(value))
    except (TypeError, ValueError):
        return None


def _model_path_location(scn: Scenario, v: Variant) -> tuple:
    m = re.match(r"^(variants|matrix)\[(\d+)\]$", v.origin)
    if v.model_path_spec != scn.server.model_path and m:
        return (m.group(1), int(m.group(2)), "model_path")
    return ("server", "model_path")


def _shape(v: Variant) -> tuple[ModelShape | None, str | None]:
    """The model's shape where the harness needs it (always for the simulator; for sglang when
    the model is a local directory), or the problem reading it."""
    if not v.model_path:
        return None, None  # backend external without a local copy: the server's own limits apply
    local = Path(v.model_path).is_dir()
    if v.backend != "sim" and not local:
        return None, None  # a hub id or a path on another machine: sglang reads it
    try:
        return load_model_shape(v.model_path), None
    except ModelConfigError as exc:
        return None, f"cannot read the model's config.json: {exc}"


def size_checks(scn: Scenario, variants: list[Variant], lines: dict, file: str) -> list[ErrorItem]:
    errs: dict[tuple, ErrorItem] = {}  # one error per place, naming the first variant it hits

    def add(path: tuple, msg: str) -> None:
        errs.setdefault(path, ErrorItem(file, line_for(lines, path), format_path(path), msg))

    for v in variants:
        shape, problem = _shape(v)
        if problem:
            add(_model_path_location(scn, v), problem)
            continue
        given = _int_arg(v.args.get("--context-length"))
        context = given or (shape.max_position_embeddings if shape else None)
        if context is None:
            continue
        source = "--context-length" if given else "the model's max_position_embeddings"
        given_pool = _int_arg(v.args.get("--max-total-tokens"))
        pool = given_pool or context
        for i, w in enumerate(scn.workloads):
            n = w.longest_request_tokens(pool)
            if n > context:
                add(
                    ("workloads", i),
                    f"its longest request is {n:,} tokens (prompt + output), more than the "
                    f"context of {context:,} tokens ({source}) of variant {v.name}: sglang would refuse it",
                )
            elif given_pool and n > given_pool:
                add(
                    ("workloads", i),
                    f"its longest request is {n:,} tokens (prompt + output), more than the "
                    f"GPU pool of {given_pool:,} tokens (--max-total-tokens) of variant {v.name}: it could "
                    "never be scheduled",
                )
        q = scn.quality
        if q.enabled:
            for j, length in enumerate(q.lengths):
                n = length.resolve(pool) + q.max_new_tokens
                if n > context:
                    add(
                        ("quality", "lengths", j),
                        f"{n:,} tokens (length + max_new_tokens) is more than the "
                        f"context of {context:,} tokens ({source}) of variant {v.name}",
                    )
    return list(errs.values())

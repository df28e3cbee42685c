"""Cross-field checks pydantic cannot express: backend-only blocks, expect_cause, flags and env
names, matrix axes, duplicate workload names (``semantic``), and checks that need the resolved
variants: quality baseline, expectation checks' variants (``late_checks``)."""

from __future__ import annotations

from difflib import get_close_matches

from harness.metrics import METRICS
from harness.scenario.errors import ErrorItem
from harness.workloads import kinds
from harness.scenario.models import HiCache, Scenario, Variant, VariantFields
from harness.scenario.values import env_problem, flag_problem
from harness.yaml_lines import format_path, line_for

_AXIS_ROOTS = ("hicache.", "env.", "args.")


def axis_problem(axis: str) -> str | None:
    if axis == "model_path":
        return None
    root, _, rest = axis.partition(".")
    if root == "hicache":
        if rest not in HiCache.model_fields:
            return f"unknown axis {axis!r}: hicache fields are {', '.join('hicache.' + f for f in HiCache.model_fields)}"
        return None
    if root == "env":
        return env_problem(rest)
    if root == "args":
        return flag_problem(rest)
    return (f"unknown axis {axis!r}: axes are hicache.<field>, env.<NAME>, args.--<flag> or "
            "model_path")


def semantic(scn: Scenario, lines: dict, file: str) -> list[ErrorItem]:
    errs: list[ErrorItem] = []

    def add(path: tuple, msg: str) -> None:
        errs.append(ErrorItem(file, line_for(lines, path), format_path(path), msg))

    sim = scn.server.backend == "sim"
    if scn.server.sim is not None and not sim:
        add(("server", "sim"), "only allowed with backend: sim (this scenario uses backend: sglang)")
    blocks: list[tuple[tuple, VariantFields]] = [(("variants", i), v) for i, v in enumerate(scn.variants)]
    blocks += [(("matrix", i), m) for i, m in enumerate(scn.matrix)]
    for flag in scn.server.args:
        p = flag_problem(flag)
        if p:
            add(("server", "args", flag), p)
    for name in scn.server.env:
        p = env_problem(name)
        if p:
            add(("server", "env", name), p)
    for base, v in blocks:
        for flag in v.args:
            p = flag_problem(flag)
            if p:
                add(base + ("args", flag), p)
        for name in v.env:
            p = env_problem(name)
            if p:
                add(base + ("env", name), p)
        if v.sim_faults and not sim:
            add(base + ("sim_faults",), "only allowed with backend: sim")
        if v.expect_cause is not None and v.expect != "startup_failed":
            add(base + ("expect_cause",), "only allowed with expect: startup_failed")
    for i, m in enumerate(scn.matrix):
        for axis in m.axes:
            p = axis_problem(axis)
            if p:
                add(("matrix", i, "axes", axis), p)
        for axis in m.labels:
            if axis not in m.axes:
                add(("matrix", i, "labels", axis), f"label for {axis!r}, which is not an axis of this entry")
    if not scn.variants and not scn.matrix:
        add(("variants",), "no variants: add at least one under variants or matrix")
    seen_w: dict[str, int] = {}
    for i, w in enumerate(scn.workloads):
        if w.name in seen_w:
            j = seen_w[w.name]
            add(("workloads", i, "name") if ("workloads", i, "name") in lines else ("workloads", i),
                f"duplicate workload name {w.name!r} (first at workloads[{j}], line "
                f"{line_for(lines, ('workloads', j))}); give each a distinct name")
        else:
            seen_w[w.name] = i
    return errs


def late_checks(scn: Scenario, variants: list[Variant], lines: dict, file: str) -> list[ErrorItem]:
    errs: list[ErrorItem] = []

    def add(path: tuple, msg: str) -> None:
        errs.append(ErrorItem(file, line_for(lines, path), format_path(path), msg))

    names = [v.name for v in variants]
    by_name = {v.name: v for v in variants}
    q = scn.quality
    if q.baseline_variant is not None and q.baseline_variant not in by_name:
        add(("quality", "baseline_variant"), f"no variant named {q.baseline_variant!r} (variants: "
            f"{', '.join(names)})")
    elif q.enabled and q.baseline_variant is None:
        off = next((v for v in variants if v.hicache is None and v.expect == "ok"), None)
        if off is None:
            add(("quality", "enabled"), "quality needs an OFF variant (no hicache block) or "
                "quality.baseline_variant")
        else:
            q.baseline_variant = off.name
    if q.enabled and q.baseline_variant in by_name and by_name[q.baseline_variant].expect != "ok":
        add(("quality", "baseline_variant"), f"baseline {q.baseline_variant!r} is expected to fail "
            "at startup")
    for i, c in enumerate(scn.expectations.checks):
        if c.variant is not None and c.variant not in by_name:
            close = get_close_matches(c.variant, names, n=1)
            add(("expectations", "checks", i), f"unknown variant {c.variant!r} in check {c.text!r}"
                + (f" (did you mean {close[0]!r}?)" if close else f" (variants: {', '.join(names)})"))
    for i, g in enumerate(scn.gate):
        problem = gate_problem(scn, g.metric) or (
            None if g.variant is None or g.variant in by_name
            else f"unknown variant {g.variant!r}" + _did_you_mean(g.variant, names))
        if problem:
            add(("gate", i), problem)
    return errs


def _did_you_mean(word: str, choices: list[str]) -> str:
    close = get_close_matches(word, choices, n=1)
    return f" (did you mean {close[0]!r}?)" if close else f" (have: {', '.join(choices) or 'none'})"


def gate_problem(scn: Scenario, metric: str) -> str | None:
    """Why ``metric`` (``workload[.phase].metric`` or ``quality.parity``) names nothing this
    scenario measures and compares, or None."""
    if metric == "quality.parity":
        return None if scn.quality.enabled else "quality.parity gates nothing: quality is not enabled"
    parts = metric.split(".")
    workloads = {w.name: w.kind for w in scn.workloads}
    if parts[0] not in workloads:
        return f"unknown workload {parts[0]!r}" + _did_you_mean(parts[0], list(workloads))
    if len(parts) == 2:  # a figure the workload's kind derives
        figures = [d.name for d in kinds()[workloads[parts[0]]].derived if d.compared]
        if parts[1] not in figures:
            return (f"{workloads[parts[0]]} compares no derived figure {parts[1]!r}"
                    + _did_you_mean(parts[1], figures))
        return None
    compared = [name for name, m in METRICS.items() if m.compared]
    if parts[2] not in compared:
        return f"no compared metric {parts[2]!r}" + _did_you_mean(parts[2], compared)
    return None

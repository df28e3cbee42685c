"""Cross-field checks pydantic cannot express: backend-only blocks, expect_cause, flags and env
names, matrix axes, duplicate workload names (``semantic``), and checks that need the resolved
variants: quality baseline, expectation checks' variants and metric names, gate metrics
(``late_checks``). ``raw_expectation_checks`` checks the expectations' metric names on the raw
YAML tree, so that a scenario whose typed model fails still gets them in the same pass."""

from __future__ import annotations

from collections.abc import Mapping
from difflib import get_close_matches
from pathlib import Path
from typing import Any

from harness.core.sglang_source import source_problem
from harness.core.yaml_lines import format_path, line_for, load_yaml_text
from harness.measures.metrics import GATEABLE, METRICS
from harness.scenario.models import DEFAULT_BUILD, Scenario, Variant, VariantFields
from harness.scenario.server_models import HiCache
from harness.spec.errors import ErrorItem
from harness.spec.server_flags import flag_value_problem
from harness.spec.values import Check, env_problem, flag_problem
from harness.store.stats import STAT_KEYS
from harness.workloads import kinds

_AXIS_ROOTS = ("hicache.", "env.", "args.")


def axis_problem(axis: str) -> str | None:
    if axis in ("model_path", "build"):
        return None
    root, _, rest = axis.partition(".")
    if root == "hicache":
        if rest not in HiCache.model_fields:
            return (
                f"unknown axis {axis!r}: hicache fields are {', '.join('hicache.' + f for f in HiCache.model_fields)}"
            )
        return None
    if root == "env":
        return env_problem(rest)
    if root == "args":
        return flag_problem(rest)
    return f"unknown axis {axis!r}: axes are hicache.<field>, env.<NAME>, args.--<flag>, model_path or build"


def semantic(scn: Scenario, lines: dict, file: str) -> list[ErrorItem]:
    errs: list[ErrorItem] = []

    def add(path: tuple, msg: str) -> None:
        errs.append(ErrorItem(file, line_for(lines, path), format_path(path), msg))

    sim = scn.server.backend == "sim"
    external = scn.server.backend == "external"
    if scn.server.sim is not None and not sim and not external:
        add(("server", "sim"), "only allowed with backend: sim (this scenario uses backend: sglang)")
    if scn.server.model_path is None and not external:
        add(("server", "model_path"), f"required key is missing (backend: {scn.server.backend} launches the server)")
    if external:
        errs += external_problems(scn, lines, file)
    if scn.server.api_key_env is not None:
        if not external:
            add(
                ("server", "api_key_env"),
                f"only allowed with backend: external (this scenario uses backend: {scn.server.backend}; "
                "a launched server's --api-key goes in its args)",
            )
        if env_problem(scn.server.api_key_env):  # not echoed: it may be a key pasted in by mistake
            add(
                ("server", "api_key_env"),
                "not an environment variable name ([A-Za-z_][A-Za-z0-9_]*): it names the environment "
                "variable holding the key, never the key itself",
            )
    blocks: list[tuple[tuple, VariantFields]] = [(("variants", i), v) for i, v in enumerate(scn.variants)]
    blocks += [(("matrix", i), m) for i, m in enumerate(scn.matrix)]
    for flag in scn.server.args:
        p = flag_problem(flag) or flag_value_problem(flag, scn.server.args[flag])
        if p:
            add(("server", "args", flag), p)
    for name in scn.server.env:
        p = env_problem(name)
        if p:
            add(("server", "env", name), p)
    _build_problems(scn, blocks, add)
    for base, v in blocks:
        for flag in v.args:
            p = flag_problem(flag) or flag_value_problem(flag, v.args[flag])
            if p:
                add(base + ("args", flag), p)
        for name in v.env:
            p = env_problem(name)
            if p:
                add(base + ("env", name), p)
        if v.sim_faults and not sim and not external:
            add(base + ("sim_faults",), "only allowed with backend: sim")
        if v.url is not None and not external:
            add(
                base + ("url",),
                f"only allowed with backend: external (this scenario uses backend: {scn.server.backend})",
            )
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
            add(
                ("workloads", i, "name") if ("workloads", i, "name") in lines else ("workloads", i),
                f"duplicate workload name {w.name!r} (first at workloads[{j}], line "
                f"{line_for(lines, ('workloads', j))}); give each a distinct name",
            )
        else:
            seen_w[w.name] = i
    return errs


# What cannot apply to a server the harness does not start (backend: external). Refused rather
# than recorded as declared-only: a run must never look as if it set a knob it could not set.
# The server's own arguments are read from /get_server_info instead (harness/run/external.py).
EXTERNAL_REFUSED_SERVER = (
    "python",
    "command_prefix",
    "sglang_source",
    "tp_size",
    "host",
    "args",
    "extra_args",
    "env",
    "startup_timeout_s",
    "startup_retries",
    "sim",
)
# ... and what does apply to it: every other ``server`` field, each with what it does there
# (tests/unit/scenario/test_external_fields.py: every field of `Server` is in exactly one of the two).
EXTERNAL_APPLIES_SERVER = {
    "backend": "selects backend: external itself",
    "model_path": "the model's files, read here (tokenizer, config.json sizes)",
    "request_timeout_s": "each request's limit",
    "liveness_idle_s": "the idle wait and final /health_generate after the last response (P6)",
    "watchdog": "the hang check of a server that stops answering",
    "api_key_env": "the variable holding the running servers' API key",
}
EXTERNAL_REFUSED_VARIANT = ("hicache", "args", "env", "model_path", "sim_faults", "expect_cause")
EXTERNAL_REFUSED_SAMPLING = ("cooldown_timeout_s", "cooldown_mem_tolerance_gib")
_EXTERNAL_WHY = "does not apply to backend: external (the harness starts no server)"


def external_problems(scn: Scenario, lines: dict, file: str) -> list[ErrorItem]:
    """``backend: external``: every variant names its server's ``url``; launch knobs, HiCache
    blocks, preflight, cooldown, the cost estimate and the matrix (it varies launch knobs) are
    refused, each with the reason."""
    errs: list[ErrorItem] = []

    def add(path: tuple, msg: str) -> None:
        errs.append(ErrorItem(file, line_for(lines, path), format_path(path), msg))

    for key in EXTERNAL_REFUSED_SERVER:
        if key in scn.server.model_fields_set:
            add(("server", key), f"{_EXTERNAL_WHY}: it is the running server's own setting")
    for i, v in enumerate(scn.variants):
        base = ("variants", i)
        for key in EXTERNAL_REFUSED_VARIANT:
            if key in v.model_fields_set:
                why = (
                    "HiCache on or off is read from the server's own arguments (/get_server_info)"
                    if key == "hicache"
                    else "it is the running server's own setting"
                )
                add(base + (key,), f"{_EXTERNAL_WHY}: {why}")
        if v.expect != "ok":
            add(base + ("expect",), f"{_EXTERNAL_WHY}: a running server cannot fail to start")
        if v.url is None:
            add(base, f"variant {v.name!r} needs url: (the running server it measures, e.g. http://gpu-node-3:30000)")
    if scn.matrix:
        add(("matrix",), f"{_EXTERNAL_WHY}: list each server under variants with its url")
    if "preflight" in scn.model_fields_set:
        add(("preflight",), f"{_EXTERNAL_WHY}: no host-pool prediction before a launch")
    if "estimate" in scn.model_fields_set:
        add(("estimate",), f"{_EXTERNAL_WHY}: its pools and speeds are the running server's")
    for key in EXTERNAL_REFUSED_SAMPLING:
        if key in scn.sampling.model_fields_set:
            add(("sampling", key), f"{_EXTERNAL_WHY}: no cooldown after a stop")
    return errs


def _build_problems(scn: Scenario, blocks: list[tuple[tuple, VariantFields]], add) -> None:
    """``builds`` entries (names, flags, env names, backend) and every ``build:`` / axis value
    naming one of them, each reported through ``add(path, message)``."""
    names = list(scn.builds)
    if names and scn.server.backend == "external":
        add(("builds",), f"{_EXTERNAL_WHY}: a running server is the build it is (its version is recorded)")
    for name, b in scn.builds.items():
        if name == DEFAULT_BUILD:
            add(("builds", name), f"{DEFAULT_BUILD!r} is the server block's own build; give this one another name")
        if b.python is not None and scn.server.backend == "sim":
            add(("builds", name, "python"), "only with backend: sglang (the simulator runs on the harness's python)")
        for flag in b.args:
            p = flag_problem(flag)
            if p:
                add(("builds", name, "args", flag), p)
        for env_name in b.env:
            p = env_problem(env_name)
            if p:
                add(("builds", name, "env", env_name), p)

    def unknown(build: str) -> str:
        return f"unknown build {build!r}" + (
            _did_you_mean(build, names) if names else " (no builds: declare it under builds)"
        )

    for base, v in blocks:
        if v.build is not None and v.build not in scn.builds:
            add(base + ("build",), unknown(v.build))
    for i, m in enumerate(scn.matrix):
        for j, val in enumerate(m.axes.get("build", [])):
            if not isinstance(val, str) or val not in scn.builds:
                add(("matrix", i, "axes", "build", j), unknown(str(val)))


def late_checks(scn: Scenario, variants: list[Variant], lines: dict, file: str) -> list[ErrorItem]:
    errs: list[ErrorItem] = []

    def add(path: tuple, msg: str) -> None:
        errs.append(ErrorItem(file, line_for(lines, path), format_path(path), msg))

    names = [v.name for v in variants]
    by_name = {v.name: v for v in variants}
    q = scn.quality
    if q.baseline_variant is not None and q.baseline_variant not in by_name:
        add(("quality", "baseline_variant"), f"no variant named {q.baseline_variant!r} (variants: {', '.join(names)})")
    elif q.enabled and q.baseline_variant is None and scn.server.backend == "external":
        pass  # the OFF server is known once each server's own arguments are read (harness/run/external.py)
    elif q.enabled and q.baseline_variant is None:
        off = next((v for v in variants if v.hicache is None and v.expect == "ok"), None)
        if off is None:
            add(("quality", "enabled"), "quality needs an OFF variant (no hicache block) or quality.baseline_variant")
        else:
            q.baseline_variant = off.name
    if q.enabled and q.baseline_variant in by_name and by_name[q.baseline_variant].expect != "ok":
        add(("quality", "baseline_variant"), f"baseline {q.baseline_variant!r} is expected to fail at startup")
    elif q.enabled and q.baseline_variant in by_name and by_name[q.baseline_variant].hicache is not None:
        # corrupt against corrupt passes: the baseline must be the cache's absence
        add(
            ("quality", "baseline_variant"),
            f"baseline_variant {q.baseline_variant} must be a variant with HiCache off (it has a hicache block)",
        )
    for i, c in enumerate(scn.expectations.checks):
        if c.variant is not None and c.variant not in by_name:
            close = get_close_matches(c.variant, names, n=1)
            add(
                ("expectations", "checks", i),
                f"unknown variant {c.variant!r} in check {c.text!r}"
                + (f" (did you mean {close[0]!r}?)" if close else f" (variants: {', '.join(names)})"),
            )
    workloads = {w.name: str(w.kind) for w in scn.workloads}
    for i, c in enumerate(scn.expectations.checks):
        problem = check_metric_problem(c.metric, workloads, scn.quality.enabled)
        if problem:
            add(("expectations", "checks", i), f"{problem} in check {c.text!r}")
    for i, g in enumerate(scn.gate):
        problem = gate_problem(scn, g.metric) or (
            None
            if g.variant is None or g.variant in by_name
            else f"unknown variant {g.variant!r}" + _did_you_mean(g.variant, names)
        )
        if problem:
            add(("gate", i), problem)
    return errs


def build_source_problems(scn: Scenario, variants: list[Variant]) -> list[ErrorItem]:
    """Each build's ``sglang_source`` that is not there or holds no sglang, as `harness validate`
    and the dry run say it (`file:line builds.<name>.sglang_source: ...`); the run refuses the same
    before any server starts (harness/run/builds.py). Not part of loading: `harness bisect` loads a
    scenario whose source it then replaces with each step's worktree."""
    file = str(scn._path) if scn._path is not None else "<string>"
    lines = load_yaml_text(scn.text, file).lines if scn.text else {}
    errs, sources = [], set()
    for v in variants:
        if v.sglang_source and v.sglang_source not in sources and v.backend != "external":
            sources.add(v.sglang_source)
            problem = source_problem(Path(v.sglang_source))
            if problem:
                key = (*(("server",) if v.build == DEFAULT_BUILD else ("builds", v.build)), "sglang_source")
                msg = f"{problem} (build {v.build!r}, variant {v.name})"
                errs.append(ErrorItem(file, line_for(lines, key), format_path(key), msg))
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
            return f"{workloads[parts[0]]} compares no derived figure {parts[1]!r}" + _did_you_mean(parts[1], figures)
        return None
    compared = list(GATEABLE)
    if parts[2] not in compared:
        return f"no compared metric {parts[2]!r}" + _did_you_mean(parts[2], compared)
    return None


# What a check may name (harness.analysis.expectations' docstring has the grammar): a workload's
# ``<workload>.<derived>`` or ``<workload>.<phase>.<metric>[_<stat>]`` / ``.n`` / ``.n_errors`` /
# ``.n_warmup`` / ``.hits.<key>``; ``quality.parity``; ``sampling.<phase>.<key>``; ``pools.<key>``;
# ``status.<key>``. Phase names and the keys under sampling/pools/status/hits are not declared
# anywhere, so only their shape is checked.
PHASE_COUNTS = ("n", "n_errors", "n_warmup")
CHECK_ROOTS = ("quality", "sampling", "pools", "status")


def check_metric_problem(metric: str, workloads: Mapping[str, str], quality_enabled: bool) -> str | None:
    """Why an expectation check's ``metric`` names nothing a run of this scenario has, or None.
    ``workloads``: {workload name: kind}. Pure."""
    parts = metric.split(".")
    head = parts[0]
    if head == "quality":
        if parts[1:] != ["parity"]:
            return f"unknown metric {metric!r}: the quality figure a check can name is quality.parity"
        return None if quality_enabled else "quality.parity is never measured: quality is not enabled"
    if head == "sampling":
        return (
            None
            if len(parts) >= 3
            else (f"{metric!r}: a sampling figure is sampling.<phase>.<key>, e.g. sampling.idle.max_pswpin_kib_s")
        )
    if head in ("pools", "status"):
        return None if len(parts) == 2 else f"{metric!r}: expected {head}.<key>, e.g. {head}.{_EXAMPLE[head]}"
    if head not in workloads:
        return f"unknown workload {head!r} in metric {metric!r}" + _did_you_mean(head, [*workloads, *CHECK_ROOTS])
    kind = kinds().get(workloads[head])
    if len(parts) == 1:
        return f"{metric!r} names a workload, not a figure: add .<derived> or .<phase>.<metric>"
    if len(parts) == 2:
        if kind is None:
            return None  # an unknown kind is reported where the workload is declared
        derived = [d.name for d in kind.derived]
        if parts[1] in derived:
            return None
        return (
            f"{kind.name} derives no figure {parts[1]!r}"
            + _did_you_mean(parts[1], derived)
            + " (a phase statistic is <workload>.<phase>.<metric>)"
        )
    if len(parts) == 4 and parts[2] == "hits":
        return None
    if len(parts) != 3:
        return (
            f"cannot read metric {metric!r}: expected <workload>.<derived>, <workload>.<phase>.<metric>"
            f"[_<stat>] or <workload>.<phase>.hits.<key>"
        )
    name = parts[2]
    if name in PHASE_COUNTS or name in METRICS:
        return None
    base, _, stat = name.rpartition("_")
    if stat in STAT_KEYS and base in METRICS:
        return None
    if base in METRICS:
        return f"unknown statistic {stat!r} of {base} in {metric!r} (statistics: {', '.join(STAT_KEYS)})"
    known = [*METRICS, *PHASE_COUNTS]
    return f"no metric {name!r} in {metric!r}" + _did_you_mean(base if base in known else name, known)


_EXAMPLE = {"pools": "host_pool_gb", "status": "ready_s"}


def raw_expectation_checks(data: Any, lines: dict, file: str) -> list[ErrorItem]:
    """The expectations' metric names checked on the raw (expanded) YAML tree, for a scenario whose
    typed model did not validate: checks that cannot be parsed, and workloads without a kind, are
    left to the model's own errors."""
    if not isinstance(data, Mapping):
        return []
    block = data.get("expectations")
    checks = block.get("checks") if isinstance(block, Mapping) else None
    if not isinstance(checks, list):
        return []
    workloads: dict[str, str] = {}
    for w in data.get("workloads") or []:
        if isinstance(w, Mapping) and isinstance(w.get("kind"), str):
            workloads[str(w.get("name") or w["kind"])] = w["kind"]
    quality = data.get("quality")
    enabled = isinstance(quality, Mapping) and quality.get("enabled") is True
    errs = []
    for i, text in enumerate(checks):
        try:
            c = Check.parse(text)
        except ValueError:
            continue
        problem = check_metric_problem(c.metric, workloads, enabled)
        if problem:
            path = ("expectations", "checks", i)
            errs.append(ErrorItem(file, line_for(lines, path), format_path(path), f"{problem} in check {c.text!r}"))
    return errs

"""``harness run SCENARIO --set KEY=VALUE ... [--repeats N] [--no-quality]``: a scenario's values
changed from the command line, validated like the file.

One job: apply dotted-key overrides to the scenario's raw tree and load the result as any scenario
is loaded, so an override is checked by the same models and checks as the YAML and an error names
its key. ``KEY`` is a dotted path (``repeats``, ``quality.enabled``, ``workloads.0.n`` or
``workloads[0].n``; a list element may also be named by its ``name``, or by its ``kind`` where one
element has it: ``variants.on-r2.hicache.ratio``, ``workloads.cold_prefill.n``); ``VALUE`` is read as
YAML (``3``, ``false``, ``0.5x pool``, ``{ratio: 2}``). ``--repeats N`` is ``--set repeats=N``,
``--no-quality`` is ``--set quality.enabled=false``.

The scenario that runs is the overridden tree written as JSON (which is YAML) under a header that
lists the overrides, so the run's manifest holds the exact text it ran and its hash (a resume or a
history marker sees the change); the manifest also lists them (``scenario.overrides``). The file's
own errors are reported first, with its lines; an override's errors name it (``--set KEY=VALUE
key.path: message``).
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.core.yaml_lines import MAX_DEPTH, YamlLoadError, format_path, load_yaml, load_yaml_value, numeral_problem
from harness.scenario.loading import load_scenario, load_scenario_text
from harness.scenario.models import Scenario
from harness.spec.errors import ErrorItem, ScenarioError

_SEGMENT = re.compile(r"([^.\[\]]+)|\[(\d+)\]")


@dataclass(frozen=True)
class Override:
    """One ``KEY=VALUE``: its text as given, the key's segments, the value read as YAML."""

    text: str
    key: tuple[str, ...]
    value: Any


def parse_override(text: str) -> Override:
    """``KEY=VALUE`` → Override; ValueError (exit 2) names a malformed one."""
    key, eq, raw = text.partition("=")
    key = key.strip()
    if not eq or not key:
        raise ValueError(f"--set {text}: expected KEY=VALUE, e.g. --set repeats=3")
    pos, segments = 0, []
    for m in _SEGMENT.finditer(key):
        if m.start() != pos and key[pos : m.start()] != ".":
            break
        segments.append(m.group(1) if m.group(1) is not None else m.group(2))
        pos = m.end()
    if pos != len(key) or not segments:
        raise ValueError(f"--set {text}: cannot read the key {key!r} (dotted, e.g. workloads.0.n)")
    if len(segments) > MAX_DEPTH:  # as deep as a scenario may nest (5,000 was a RecursionError)
        raise ValueError(f"--set: the key has {len(segments)} levels; a scenario nests at most {MAX_DEPTH}")
    try:  # the file's resolver: 0x10 marked for the number keys to refuse, `off` a string
        value = load_yaml_value(raw) if raw.strip() else ""
    except YamlLoadError as exc:
        raise ValueError(f"--set {text}: the value is not YAML: {exc.message}") from None
    problem = _numeral_in(value)
    if problem:  # the scenario is read back from JSON, where 0x10 is 16: refused here
        raise ValueError(f"--set {text}: {problem}")
    return Override(text, tuple(segments), value)


def _numeral_in(value: Any) -> str | None:
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, list):
        return next((p for p in map(_numeral_in, value) if p), None)
    return numeral_problem(value)


def _index(items: list, segment: str, where: tuple) -> int:
    """The list element a segment names: an index, else the element named (or of the kind) ``segment``."""
    if segment.isdigit():
        i = int(segment)
        if i >= len(items):
            raise LookupError(f"{format_path(where) or 'the scenario'} has {len(items)} elements, no [{i}]")
        return i
    for field in ("name", "kind"):
        hits = [i for i, e in enumerate(items) if isinstance(e, Mapping) and e.get(field) == segment]
        if len(hits) == 1:
            return hits[0]
        if len(hits) > 1:
            raise LookupError(f"{format_path(where)}: {len(hits)} elements have {field} {segment!r}: use an index")
    raise LookupError(f"{format_path(where)} has no element named {segment!r} (use an index or a name)")


def apply_override(tree: dict, o: Override) -> tuple:
    """Set ``o`` in ``tree`` (in place), creating mappings on the way; the resolved path
    (list elements as indices). LookupError when a segment cannot be followed."""
    node: Any = tree
    path: tuple = ()
    for i, seg in enumerate(o.key):
        last = i == len(o.key) - 1
        if isinstance(node, list):
            key: Any = _index(node, seg, path)
        elif isinstance(node, dict):
            key = seg
        else:
            raise LookupError(f"{format_path(path)} is a value ({node!r}), not a mapping or a list")
        path += (key,)
        if last:
            node[key] = o.value
        else:
            if isinstance(node, dict) and not isinstance(node.get(key), (dict, list)):
                if node.get(key) is not None:
                    raise LookupError(f"{format_path(path)} is a value ({node[key]!r}), not a mapping or a list")
                node[key] = {}
            node = node[key]
    return path


def override_tree(data: Mapping[str, Any], overrides: Sequence[Override]) -> tuple[dict, list[tuple]]:
    """A copy of ``data`` with every override applied; their resolved paths. ScenarioError names
    each override that cannot be applied."""
    tree = copy.deepcopy(dict(data))
    paths, errors = [], []
    for o in overrides:
        try:
            paths.append(apply_override(tree, o))
        except LookupError as exc:
            errors.append(ErrorItem(f"--set {o.text}", None, "", str(exc)))
    if errors:
        raise ScenarioError(errors)
    return tree, paths


def _owner(item: ErrorItem, overrides: Sequence[Override], paths: Sequence[tuple]) -> ErrorItem:
    """An error of the overridden scenario: named after the override whose key it is under, else
    the file's (without the generated text's line)."""
    for o, p in zip(overrides, paths):
        key = format_path(p)
        if item.path == key or item.path.startswith((key + ".", key + "[")):
            return ErrorItem(f"--set {o.text}", None, item.path, item.message)
    return ErrorItem(item.file, None, item.path, item.message)


def header(name: str, overrides: Sequence[Override], paths: Sequence[tuple], urls: bool) -> str:
    """The generated text's first lines: the file, and each override by its resolved key (so two
    spellings of one override give one text and one hash)."""
    lines = [f"# {name}" + (" with --url" if urls else "") + (" with --set" if overrides else "")]
    lines += [f"# --set {format_path(p)}={json.dumps(o.value, ensure_ascii=False)}" for o, p in zip(overrides, paths)]
    return "\n".join(lines) + "\n"


def load_with_overrides(
    path: str | Path,
    overrides: Sequence[Override],
    rewrite=None,
    env: Mapping[str, str] | None = None,
    workloads: Sequence[str] | None = None,
) -> Scenario:
    """The scenario of ``path`` with ``overrides`` applied; ``rewrite`` (tree → tree), applied after
    them, is ``--url``'s; ``workloads``: only these (by name) run (`keep_workloads`: a round of
    ``run --decide``). ScenarioError: the file's own errors with its lines (when it is loaded as
    it is), then the overrides'."""
    src = Path(path)
    if rewrite is None:
        load_scenario(src, env)  # its own errors first, with the file's lines
    try:
        y = load_yaml(src)
    except YamlLoadError as e:
        raise ScenarioError([ErrorItem(e.file, e.line, e.path, e.message)]) from None
    if not isinstance(y.data, dict):
        raise ScenarioError([ErrorItem(str(src), 1, None, "a scenario must be a mapping")])
    tree, paths = override_tree({"name": src.stem, **y.data}, overrides)
    unrun = set_aside_quality_checks(tree) if any(p[:1] == ("quality",) for p in paths) else []
    if workloads is not None:
        unrun += keep_workloads(tree, workloads)
        overrides = [*overrides, Override(f"workloads={','.join(workloads)}", ("workloads",), list(workloads))]
        paths = [*paths, ("workloads",)]
    if rewrite is not None:
        tree = rewrite(tree)
    text = header(src.name, overrides, paths, rewrite is not None) + json.dumps(tree, indent=2) + "\n"
    file = f"{src.name} ({'--url, ' if rewrite is not None else ''}--set)"
    try:
        scn = load_scenario_text(text, file=file, env=env, base_dir=src.absolute().parent)
    except ScenarioError as exc:
        raise ScenarioError([_owner(it, overrides, paths) for it in exc.items]) from None
    scn._overrides = [o.text for o in overrides]
    scn._unrun_checks = unrun
    return scn


def _workload_of(entry: Any) -> str | None:
    """The workload a gate entry or check names (``[variant:] workload.…``); None for quality,
    sampling, pools and status, which name none."""
    if not isinstance(entry, str):
        return None
    head = entry.split(":", 1)[1] if ":" in entry else entry  # a metric has no ':'; a variant name may have dots
    name = head.strip().split(".", 1)[0].split()[0] if head.strip() else ""
    return None if name in ("quality", "sampling", "pools", "status", "") else name


def keep_workloads(tree: dict, names: Sequence[str]) -> list[dict[str, str]]:
    """Only the workloads ``names`` (by name, else kind) stay in ``tree`` (in place), with the gate
    entries and checks that name them; the checks of the others are returned as not evaluated. A
    round of ``harness run --decide`` runs only what its undecided rows need."""
    keep = set(names)
    items = tree.get("workloads")
    if isinstance(items, list):
        tree["workloads"] = [w for w in items if isinstance(w, Mapping) and str(w.get("name") or w.get("kind")) in keep]
    if isinstance(tree.get("gate"), list):
        tree["gate"] = [g for g in tree["gate"] if _workload_of(g) in keep or _workload_of(g) is None]
    expectations = tree.get("expectations")
    if not isinstance(expectations, dict) or not isinstance(expectations.get("checks"), list):
        return []
    out = [c for c in expectations["checks"] if _workload_of(c) is not None and _workload_of(c) not in keep]
    expectations["checks"] = [c for c in expectations["checks"] if c not in out]
    why = f"this round runs only {', '.join(names)} (run --decide)"
    return [{"check": c, "reason": why} for c in out]


def set_aside_quality_checks(tree: dict) -> list[dict[str, str]]:
    """With quality turned off on the command line (``--no-quality``), the checks that name
    ``quality.*`` cannot be evaluated: taken out of ``tree`` (in place) and returned, each with
    its reason, for the run to report as not evaluated."""
    quality, expectations = tree.get("quality"), tree.get("expectations")
    if not isinstance(quality, Mapping) or quality.get("enabled") is not False or not isinstance(expectations, dict):
        return []
    checks = expectations.get("checks")
    if not isinstance(checks, list):
        return []
    metric = re.compile(r"^(?:[^:]+:)?\s*quality\.")
    out = [c for c in checks if isinstance(c, str) and metric.match(c)]
    expectations["checks"] = [c for c in checks if c not in out]
    return [{"check": c, "reason": "quality is off in this run (--no-quality)"} for c in out]

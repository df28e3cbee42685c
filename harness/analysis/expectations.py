"""Within-run expectations: the scenario's ``expectations.checks`` evaluated on a run's summaries.

One job: ``[variant:] metric op value`` checks → pass / fail / not_evaluable per variant.

Metric names (what a check may name; docs/reports.md has the table):

  quality.parity                         summary["quality"]["parity"]["verdict"] (PASS, WARN, FAIL,
                                         NOT_EXERCISED, NOT_COMPARABLE)
  <workload>.<derived>                   summary["workloads"][wl]["derived"][key], e.g.
                                         parallel_prefixes.second_pass_speedup, decode.decode_tok_s
  <workload>.<phase>.<metric>_<stat>     a phase statistic, stat one of n mean p50 p90 p95 p99 min max,
                                         e.g. short_ttft.alone.ttft_ms_p50, cold_prefill.cold.prefill_tok_s_p90
  <workload>.<phase>.<metric>            the same with stat p50
  <workload>.<phase>.hits.<key>          the phase's tier-hit counts, e.g. parallel_prefixes.pass2.hits.host_tokens
  <workload>.<phase>.n_errors            errored requests of the phase
  sampling.<phase>.<key>                 the sampler's per-phase figure; a workload phase is written
                                         with dots (sampling.cold_prefill.cold.min_mem_available_kib),
                                         e.g. sampling.idle.max_pswpin_kib_s
  pools.<key>                            status.json pools, e.g. pools.host_pool_gb
  status.<key>                           status.json scalars, e.g. status.ready_s, status.state

A check without ``variant:`` applies to every variant expected to start (for ``quality.*``: every
variant except the quality baseline). Outcomes: ``pass``; ``fail``; ``not_evaluable`` (the variant
did not run ok, the metric is missing, or it is a figure derived from a cache phase that got no
hit of the tier it exists to measure: it measured recompute, `harness.analysis.summary.unexercised_phases`)
— which fails the expectation (``failed: true``, the verdict INCONCLUSIVE) unless
the variant was declared ``expect: startup_failed`` and did fail to start, as declared (P10: a
missing number is never a pass); ``skipped`` (the check names a variant this run left out with
``--only``/``--shard``; not a failure).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from harness.analysis.summary import unexercised_figures
from harness.spec.values import Check, Gate, Threshold
from harness.store import run_folder
from harness.store.manifest import Manifest
from harness.store.stats import STAT_KEYS
from harness.store.status_view import Pools
from harness.store.summary import Summary
from harness.store.variant_status import VariantStatus


class _AnyEnv(Mapping):
    """``${VAR}`` expansion when re-reading a stored scenario: the run's recorded (allowlisted)
    environment, then the current one, else a marker (the run already happened; its variables
    only matter for paths we do not use here)."""

    def __init__(self, recorded: Mapping[str, str] | None = None):
        self._env = {**os.environ, **(recorded or {})}

    def __getitem__(self, key: str) -> str:
        return self._env.get(key, f"<{key}>")

    def __iter__(self) -> Iterator[str]:
        return iter(self._env)

    def __len__(self) -> int:
        return len(self._env)

    def get(self, key, default=None):  # unset → None, so ${VAR:-default} takes its default
        return self._env.get(key, default)


@dataclass
class ScenarioExpectations:
    checks: list[Check] = field(default_factory=list)
    thresholds: dict[str, Threshold] = field(default_factory=dict)
    quality_baseline: str | None = None
    gate: list[Gate] = field(default_factory=list)  # the scenario's ``gate:`` (harness compare)
    source: str = "scenario"  # "scenario" (full re-parse) | "yaml" (expectations block only) | "none"
    problem: str | None = None


def scenario_expectations(manifest: Manifest) -> ScenarioExpectations:
    """Checks, thresholds and gate of the scenario stored in a run's manifest.

    Re-parses the text with `load_scenario_text`; when that fails (a sim model path that moved,
    a variable that made a path invalid) falls back to the ``expectations`` block of the raw
    YAML, parsed with the same Check/Threshold rules."""
    sc = manifest.scenario
    text = sc.text
    if not text:
        return ScenarioExpectations(source="none", problem="manifest has no scenario text")
    from harness.scenario import ScenarioError, load_scenario_text

    path = sc.path or "scenario.yaml"
    base = Path(path).parent if Path(path).parent.is_dir() else None
    try:
        scn = load_scenario_text(text, file=path, env=_AnyEnv(manifest.env), base_dir=base)
        return ScenarioExpectations(
            list(scn.expectations.checks),
            dict(scn.expectations.thresholds),
            scn.quality.baseline_variant if scn.quality.enabled else None,
            list(scn.gate),
        )
    except ScenarioError as exc:
        problem = "; ".join(exc.lines) if hasattr(exc, "lines") else str(exc)
    except Exception as exc:  # noqa: BLE001 - any parse trouble: use the raw block below
        problem = f"{type(exc).__name__}: {exc}"
    data = sc.data
    if not data:
        return ScenarioExpectations(source="none", problem=f"{problem}; the stored scenario is not YAML of a mapping")
    block = sc.block("expectations")
    checks, thresholds = [], {}
    for c in block.get("checks") or []:
        try:
            checks.append(Check.parse(c))
        except ValueError:
            continue
    declared = block.get("thresholds")
    for k, v in declared.items() if isinstance(declared, Mapping) else ():
        try:
            thresholds[str(k)] = Threshold.parse(v)
        except Exception:  # noqa: BLE001
            continue
    gate = []
    raw_gate = data.get("gate")
    for g in raw_gate if isinstance(raw_gate, list) else []:
        try:
            gate.append(Gate.parse(g))
        except ValueError:
            continue
    q = sc.block("quality")
    baseline = q.get("baseline_variant") if q.get("enabled") else None
    return ScenarioExpectations(checks, thresholds, baseline, gate, source="yaml", problem=problem)


def lookup_metric(metric: str, summary: Summary | None, status: VariantStatus | None) -> Any:
    """The value a check's metric names in one variant's summary/status (None when absent)."""
    parts = metric.split(".")
    head = parts[0]
    if head == "status" and len(parts) == 2:
        v = getattr(status, parts[1], None) if parts[1] in _STATUS_FIELDS else None
        return v if not isinstance(v, (dict, list)) else None
    if head == "pools" and len(parts) == 2:
        pools = Pools.from_json(status.pools) if status is not None else None
        return pools.value(parts[1]) if pools is not None else None
    if summary is None:
        return None
    if head == "quality" and len(parts) == 2 and parts[1] == "parity":
        return summary.parity.get("verdict")
    if head == "sampling" and len(parts) >= 3:
        ph = summary.samples.phases.get("/".join(parts[1:-1]))
        return ph.value(parts[-1]) if ph is not None else None
    w = summary.workload(head)
    if w is None:
        return None
    if len(parts) == 2:
        return w.derived.get(parts[1])
    phase = w.phases.get(parts[1])
    if phase is None:
        return None
    if len(parts) == 4 and parts[2] == "hits":
        return phase.hits.get(parts[3])
    if len(parts) == 3:
        name = parts[2]
        if name in ("n", "n_errors", "n_warmup"):
            return getattr(phase, name)
        stat = "p50"
        if name not in phase.metrics:
            base, _, suffix = name.rpartition("_")
            if suffix in STAT_KEYS and base in phase.metrics:
                name, stat = base, suffix
        return phase.stat(name, stat)
    return None


_STATUS_FIELDS = frozenset(f.name for f in fields(VariantStatus)) - {"redact", "clock"}


@dataclass
class CheckResult:
    check: str
    variant: str
    metric: str
    op: str
    expected: Any
    actual: Any
    outcome: str  # pass | fail | not_evaluable | skipped
    failed: bool  # counts as a failed expectation
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def evaluate_check(check: Check, variant: str, summary: Summary | None, status: VariantStatus | None) -> CheckResult:
    """One check on one variant. Pure."""

    def result(actual: Any, outcome: str, failed: bool, reason: str) -> CheckResult:
        return CheckResult(check.text, variant, check.metric, check.op, check.value, actual, outcome, failed, reason)

    state = status.state if status is not None else None
    expected_failure = status is not None and status.expect == "startup_failed"
    if state != "ok":
        declared = expected_failure and state == "startup_failed" and status.expect_met is not False
        why = f"variant state {state or 'missing'}" + (" (declared expect: startup_failed)" if declared else "")
        return result(None, "not_evaluable", not declared, why)
    actual = lookup_metric(check.metric, summary, status)
    workload, _, figure = check.metric.partition(".")
    recompute = unexercised_figures(summary).get((workload, figure))
    if recompute is not None:  # a speedup of recompute over recompute passes or fails by chance
        return result(actual, "not_evaluable", True, f"cannot tell: {recompute}")
    if actual is None:
        return result(None, "not_evaluable", True, f"metric {check.metric} is missing")
    ok = check.evaluate(actual)
    return result(
        actual, "pass" if ok else "fail", not ok, "" if ok else f"{actual!r} {check.op} {check.value!r} is false"
    )


def evaluate_checks(
    checks: list[Check],
    variants: list[tuple[str, Summary | None, VariantStatus | None]],
    quality_baseline: str | None = None,
) -> list[CheckResult]:
    """All checks on the variants they apply to; ``variants`` = [(name, summary, status)]."""
    out: list[CheckResult] = []
    by_name = {n: (s, st) for n, s, st in variants}
    for c in checks:
        if c.variant is not None:
            targets = [c.variant]
        else:
            targets = [
                n
                for n, _, st in variants
                if (st.expect if st is not None else "ok") == "ok"
                and not (c.metric.startswith("quality.") and n == quality_baseline)
            ]
        for name in targets:
            if name not in by_name:  # left out of this run on purpose (--only, --shard)
                out.append(
                    CheckResult(
                        c.text,
                        name,
                        c.metric,
                        c.op,
                        c.value,
                        None,
                        "skipped",
                        False,
                        f"variant {name} is not in this run",
                    )
                )
                continue
            summary, status = by_name[name]
            out.append(evaluate_check(c, name, summary, status))
    return out


def evaluate_run_expectations(run_dir: Path) -> list[dict]:
    """The scenario's within-run checks on a run folder, as JSON-ready dicts (for expectations.json)."""
    run = run_folder.load_run(Path(run_dir))
    exp = scenario_expectations(run.manifest)
    variants = [(v.name, v.summary, v.status) for v in run.variants]
    out = [r.to_dict() for r in evaluate_checks(exp.checks, variants, exp.quality_baseline)]
    return out + unrun_results(list(run.manifest.scenario.unrun_checks))


def unrun_results(unrun: Any) -> list[dict]:
    """The checks the run's scenario set aside (``Scenario.unrun_checks``, kept in the manifest:
    a ``--url`` run's checks naming variants it does not have, a ``--no-quality`` run's quality
    checks), each as ``skipped`` with its reason: listed, never dropped silently."""
    out = []
    for u in unrun if isinstance(unrun, list) else ():
        if not isinstance(u, dict):
            continue
        try:
            c = Check.parse(u.get("check"))
        except ValueError:
            continue
        reason = f"not evaluated: {u.get('reason')}"
        out.append(CheckResult(c.text, c.variant or "*", c.metric, c.op, c.value, None, "skipped", False, reason))
    return [r.to_dict() for r in out]

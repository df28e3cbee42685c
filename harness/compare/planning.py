"""Plan for a verdict: how many samples each gated row needs to decide, and what they cost.

From the spread a scenario's earlier runs measured (the baseline's, pooled over its last nights:
`measured_spread`), per gated row the number of independent units (requests, concurrency groups
or repeats: `harness.compare.statistics.per_unit`) a side needs so that a change of the row's
threshold is significant with ``POWER`` (95 %) at ``ALPHA`` (5 %) false alarm — the test compare
runs at that n (`units_needed`: Welch's t on logs below 8 values, then Mann-Whitney, whose
efficiency on log-normal data is 3/π of the t-test's) — the repeats that gives at the row's units
per repeat, and the GPU-minutes of those repeats (`harness.run.estimate`'s minutes of the workloads
involved). A row whose shipped repeats fall short cannot decide: `ScenarioPlan.lines` says so
plainly, with the count that would. The quality-parity gate gets the same: how many host-hit
re-asks its test needs to reach its alpha (`parity_plan`).

The arithmetic is `harness.compare.power` (pure); this module reads the earlier runs under a
results folder.
``harness run --dry-run``, ``harness validate`` and the start of ``harness run`` print the plan;
``repeats: auto`` takes its count (`ScenarioPlan.auto_repeats`), bounded by the scenario's
``verdict.budget_minutes``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import numpy as np

from harness.compare.power import POWER, log_spread, parity_keys_needed, units_needed, within_log_spread
from harness.compare.statistics import ALPHA, MIN_VALUES, threshold_for
from harness.core.optional import MissingExtra
from harness.scenario.models import AUTO_REPEATS

if TYPE_CHECKING:
    from harness.scenario.models import Scenario

PLAN_NIGHTS = 5  # the earlier runs whose spread a plan pools
MAX_LINES = 12  # rows a plan prints (a scenario without a gate has dozens)


@dataclass(frozen=True)
class RowPlan:
    variant: str
    row: str  # how a gate names it
    unit: str  # request | group | repeat
    threshold: float
    repeats: int  # the scenario's
    spread: float | None = None  # sd of one unit's log value
    spread_from: str = ""
    units_per_repeat: float | None = None
    units_needed: int | None = None
    repeats_needed: int | None = None
    minutes_per_repeat: float | None = None  # GPU-minutes of one repeat of the row's workload (all variants)

    @property
    def decides(self) -> bool:
        return self.repeats_needed is not None and self.repeats >= self.repeats_needed

    def line(self) -> str:
        head = f"{self.variant}: {self.row} (threshold {self.threshold * 100:.0f}%, one {self.unit} per unit)"
        if self.spread is None:
            return f"{head}: no spread measured ({self.spread_from}): cannot plan"
        need = "—" if self.units_needed is None else f"{self.units_needed} {self.unit}s a side"
        per = "" if self.units_per_repeat is None else f", {self.units_per_repeat:g} a repeat"
        cost = (
            ""
            if self.minutes_per_repeat is None or self.repeats_needed is None
            else f", {self.repeats_needed * self.minutes_per_repeat:.1f} GPU-min"
        )
        verdict = (
            "decides"
            if self.decides
            else (
                "CANNOT DECIDE at any affordable count"
                if self.repeats_needed is None
                else f"CANNOT DECIDE at repeats {self.repeats}: needs repeats {self.repeats_needed}"
            )
        )
        return (
            f"{head}: spread ±{self.spread * 100:.1f}% ({self.spread_from}) → needs {need}{per} = "
            f"repeats {self.repeats_needed if self.repeats_needed is not None else '—'}{cost}: {verdict}"
        )


@dataclass(frozen=True)
class ParityPlan:
    variant: str
    keys: int  # host-hit re-asks the quality block asks (if every re-ask hits the host tier)
    needed: int
    needed_exact: int
    alpha: float
    per_sample: int  # re-asks per samples_per_task step (tasks × lengths × reasks)

    @property
    def decides(self) -> bool:
        return self.keys >= self.needed

    def line(self) -> str:
        head = (
            f"{self.variant}: quality.parity: {self.keys} host-hit re-asks at most; the rate test needs "
            f">= {self.needed} to reach alpha {self.alpha:g} ({self.needed_exact} with an exact "
            "OFF-vs-OFF control: deterministic inference)"
        )
        if self.decides:
            return head + ": decides"
        more = math.ceil(self.needed / max(1, self.per_sample))
        return head + f": CANNOT DECIDE on a nondeterministic server: set quality.samples_per_task >= {more}"


@dataclass
class ScenarioPlan:
    scenario: str
    repeats: int | str
    rows: list[RowPlan] = field(default_factory=list)
    parity: list[ParityPlan] = field(default_factory=list)
    measured_on: list[str] = field(default_factory=list)  # run ids the spread came from
    budget_minutes: float | None = None
    gated: bool = True  # the scenario has a gate (else every row gates)
    unplanned: list[str] = field(default_factory=list)  # gated tail / drift rows: tested otherwise, not planned
    minutes_per_repeat: float | None = None  # GPU-minutes of one repeat of every workload

    @property
    def needed_repeats(self) -> int | None:
        """The repeats every row that could be planned needs (None: none could)."""
        needs = [r.repeats_needed for r in self.rows if r.repeats_needed is not None]
        return max(needs) if needs else None

    def auto_repeats(self) -> tuple[int, str]:
        """(the repeats ``repeats: auto`` takes, why): the planned count, within the budget."""
        need = self.needed_repeats
        if need is None:
            return AUTO_REPEATS, (
                f"nothing measured to plan from: {AUTO_REPEATS} repeats (a first night that measures a spread)"
                if not self.measured_on
                else f"a row cannot be planned: {AUTO_REPEATS} repeats"
            )
        why = f"the plan's {need} (the row that needs the most)"
        if self.budget_minutes is not None and self.minutes_per_repeat:
            cap = max(1, int(self.budget_minutes // self.minutes_per_repeat))
            if cap < need:
                return cap, (
                    f"{why}, cut to {cap} by verdict.budget_minutes {self.budget_minutes:g} "
                    f"({self.minutes_per_repeat:.1f} GPU-min a repeat): some rows will not decide"
                )
        return need, why

    def lines(self) -> list[str]:
        src = ", ".join(self.measured_on) if self.measured_on else "no earlier run"
        out = [
            f"plan for a verdict (power {POWER:.0%} at a {ALPHA:.0%} false alarm; spread from {src}; "
            f"repeats {self.repeats}):"
        ]
        if not self.gated:
            out.append("  no gate: every compared row gates (add `gate:` to decide on the rows that matter)")
        if self.unplanned:
            out.append(
                f"  not planned here (a tail's exceedance count or a drift between thirds of a run, tested "
                f"otherwise): {', '.join(self.unplanned)}"
            )
        short = [r for r in self.rows if not r.decides] + [p for p in self.parity if not p.decides]
        shown = [*self.rows, *self.parity]
        if len(shown) > MAX_LINES:  # a scenario without a gate: the rows that cannot decide, the worst first
            shown = sorted(short, key=lambda r: -(getattr(r, "repeats_needed", None) or 10**9))[:MAX_LINES]
        out += [f"  {r.line()}" for r in shown]
        if len(shown) < len(self.rows) + len(self.parity):
            out.append(f"  … {len(self.rows) + len(self.parity) - len(shown)} more rows not shown")
        if short:
            out.append(
                f"  {len(short)} of {len(self.rows) + len(self.parity)} gated rows cannot decide: {self.advice()}"
            )
        elif self.rows or self.parity:
            out.append("  every gated row can decide at these sizes")
        return out

    def advice(self) -> str:
        """One line: what would make the comparison decide."""
        parts = []
        need = self.needed_repeats
        if any(r.spread is None for r in self.rows):
            parts.append("run it twice to measure a spread")
        elif need is not None and any(not r.decides for r in self.rows):
            cost = f" (~{need * self.minutes_per_repeat:.0f} GPU-min)" if self.minutes_per_repeat else ""
            parts.append(f"repeats: {need}{cost} or repeats: auto")
        elif any(r.repeats_needed is None for r in self.rows):
            parts.append("a larger threshold or fewer gated rows (some need more than any run affords)")
        for p in self.parity:
            if not p.decides:
                parts.append(f"quality.samples_per_task >= {math.ceil(p.needed / max(1, p.per_sample))}")
        if not self.gated:
            parts.append("a gate: on the rows that matter")
        return "; ".join(parts) or "nothing"


# ------------------------------------------------------------------------------ reading runs


def _gate_names(row: SimpleNamespace, gates: Sequence[Any]) -> bool:
    return not gates or any(g.names(row.variant, row.workload, row.phase, row.metric) for g in gates)


def measured_spread(
    runs: Sequence[Any], variant: str, key: tuple[str, str, str]
) -> tuple[float | None, float | None, str, str]:
    """(sd of one unit's log value, units per repeat, where from, the unit) of one row over the
    earlier runs (newest first): every run's unit values (`harness.compare.rows.RowSample`),
    each night's centred on its own median when a night has 3 or more (the spread within a
    night), else the nights' values together (the spread between nights, drift included)."""
    if not runs:  # a scenario that never ran: nothing to read, and no frames to load for it
        return None, None, "no earlier run has this row", "request"
    from harness.compare.rows import RowSample, metric_samples, variant_derived_values
    from harness.compare.runs import run_workload_kinds, variant_requests

    wl, ph, metric = key
    per_night: list[np.ndarray] = []
    per_repeat: float | None = None
    unit = "request"
    for run in runs:
        v = next((x for x in run.variants if x.name == variant and x.ok), None)
        if v is None:
            continue
        kinds = run_workload_kinds(run.manifest)
        if ph == "*":
            vals = variant_derived_values(v, kinds).get((wl, metric))
            sample = RowSample(np.asarray(vals or [], dtype=float), None, "repeat")
            repeats = len(vals or [])
        else:
            req = variant_requests(v)
            sample = metric_samples(req, kinds).get(key)
            phase_rows = req[(req["workload"] == wl) & (req["phase"] == ph)] if len(req) else req
            repeats = int(phase_rows["repeat"].nunique()) if len(phase_rows) else 0
        if sample is None or not sample.values.size:
            continue
        units = sample.evidence()
        unit = sample.unit
        if per_repeat is None and repeats:
            per_repeat = units.size / repeats
        per_night.append(units[np.isfinite(units) & (units > 0)])
    if not per_night:
        return None, per_repeat, "no earlier run has this row", unit
    within = [a for a in per_night if a.size >= MIN_VALUES]
    if within:
        sd = within_log_spread(within)
        return sd, per_repeat, f"{sum(a.size for a in within)} {unit}s within {_nights(len(within))}", unit
    allv = np.concatenate(per_night)
    sd = log_spread(allv)
    where = f"{allv.size} {unit}s over {_nights(len(per_night))}, between nights"
    return sd, per_repeat, where if sd is not None else where + ": too few", unit


def _nights(n: int) -> str:
    return f"{n} night" + ("" if n == 1 else "s")


def workload_minutes(scenario: Scenario, variants: Sequence[Any]) -> dict[str, float] | None:
    """{workload: GPU-minutes of one repeat of it over the variants} from `harness.run.estimate`
    (None without a prefill speed)."""
    from harness.run.estimate import estimate_run

    try:
        est = estimate_run(scenario, variants)
    except ValueError:
        return None
    repeats = max(1, int(scenario.repeats))
    out: dict[str, float] = {}
    for v in est.variants:
        for w in v.work:
            if w.kind == "quality":
                continue
            s = w.wall_s(w.expected_tokens, v.prefill_tok_s)
            if s is None:
                return None
            out[w.name] = out.get(w.name, 0.0) + s * v.gpus / 60.0 / repeats
    return out


def earlier_runs(results_dir: Path, scenario_name: str, limit: int = PLAN_NIGHTS) -> list[Any]:
    """The newest ``limit`` complete, unsharded runs of a scenario whose own comparison did not
    FAIL (or that were accepted): what a baseline would be drawn from."""
    from harness.store import results

    out = []
    for p in reversed(results.list_runs(Path(results_dir), scenario_name)):
        from harness.compare.runs import accepted, compared_outcome, read_run  # only when there is a run

        try:
            run = read_run(p)
        except results.ResultsError:
            continue
        if not run.complete or run.manifest.shard:
            continue
        if compared_outcome(run)[0] == "FAIL" and accepted(run) is None:
            continue
        out.append(run)
        if len(out) >= limit:
            break
    return out


def plan_scenario(scenario: Scenario, results_dir: Path | None, runs: Sequence[Any] | None = None) -> ScenarioPlan:
    """The plan of a loaded scenario from its earlier runs under ``results_dir`` (or ``runs``,
    newest first)."""
    from harness.quality.parity import ALPHA as PARITY_ALPHA

    if runs is None:
        runs = earlier_runs(Path(results_dir), scenario.name) if results_dir is not None else []
    from harness.measures.metrics import METRICS
    from harness.workloads import derived_figures

    figures = derived_figures()
    variants = [v for v in scenario.expand_variants() if v.expect != "startup_failed"]
    gates = list(scenario.gate)
    thresholds = {k: t.fraction for k, t in scenario.expectations.thresholds.items()}
    budget = scenario.verdict.budget_minutes
    shipped = int(scenario.repeats)
    minutes = workload_minutes(scenario, variants)
    plan = ScenarioPlan(
        scenario.name,
        "auto" if scenario.repeats_auto else shipped,
        measured_on=[r.run_id for r in runs],
        budget_minutes=budget,
        gated=bool(gates),
        minutes_per_repeat=sum(minutes.values()) if minutes else None,
    )
    # the rows to plan: what the gate names, among the rows the newest run with the variant has
    for v in variants:
        keys: list[tuple[str, str, str]] = []
        for run in runs:
            lv = next((x for x in run.variants if x.name == v.name and x.ok), None)
            if lv is None:
                continue
            # an earlier run's rows (pandas, the run readers): loaded only when there is one, so
            # `harness validate` of a scenario that never ran loads neither
            from harness.compare.rows import metric_samples, variant_derived_values
            from harness.compare.runs import run_workload_kinds, variant_requests

            kinds = run_workload_kinds(run.manifest)
            keys = list(metric_samples(variant_requests(lv), kinds)) + [
                (wl, "*", m) for wl, m in variant_derived_values(lv, kinds)
            ]
            break
        # and the gate's rows by name (unmeasured, or rows compare builds beyond the samples: tails, drift)
        keys += [
            (parts[0], "*" if len(parts) == 2 else parts[1], parts[-1])
            for g in gates
            if g.metric != "quality.parity" and g.variant in (None, v.name)
            for parts in [g.metric.split(".")]
        ]
        for wl, ph, metric in dict.fromkeys(keys):
            if not _gate_names(SimpleNamespace(variant=v.name, workload=wl, phase=ph, metric=metric), gates):
                continue
            if metric not in METRICS and metric not in figures:  # a tail or drift row: its own test
                plan.unplanned.append(f"{v.name}: {wl}.{ph}.{metric}")
                continue
            thr, _ = threshold_for(thresholds, wl, ph, metric)
            sd, per_repeat, where, unit = measured_spread(runs, v.name, (wl, ph, metric))
            need = units_needed(sd, thr) if sd is not None else None
            reps = math.ceil(need / per_repeat) if need is not None and per_repeat else None
            name = f"{wl}.{metric}" if ph == "*" else f"{wl}.{ph}.{metric}"
            plan.rows.append(
                RowPlan(
                    v.name,
                    name,
                    unit,
                    thr,
                    shipped,
                    sd,
                    where,
                    per_repeat,
                    need,
                    reps,
                    (minutes or {}).get(wl),
                )
            )
    q = scenario.quality
    if q.enabled and any(g.metric == "quality.parity" for g in gates):
        per_sample = len(q.tasks) * len(q.lengths) * max(1, q.reasks)
        keys = per_sample * int(q.samples_per_task)
        for g in gates:
            if g.metric != "quality.parity":
                continue
            targets = [g.variant] if g.variant else [v.name for v in variants if v.name != q.baseline_variant]
            for t in targets:
                plan.parity.append(
                    ParityPlan(
                        t,
                        keys,
                        parity_keys_needed(PARITY_ALPHA, exact_control=False),
                        parity_keys_needed(PARITY_ALPHA, exact_control=True),
                        PARITY_ALPHA,
                        per_sample,
                    )
                )
    return plan


def resolve_repeats(scenario: Scenario, results_dir: Path | None) -> list[str]:
    """The plan's lines for a command to print; with ``repeats: auto`` the scenario's repeats set
    to `ScenarioPlan.auto_repeats` first (and the plan redone at that count). A plan never stops
    a run: one that cannot be made is one line saying why."""
    try:
        plan = plan_scenario(scenario, results_dir)
        if not scenario.repeats_auto:
            return plan.lines()
        n, why = plan.auto_repeats()
        scenario.repeats = n
        return [f"repeats: auto → {n}: {why}", *plan_scenario(scenario, results_dir).lines()]
    except MissingExtra as exc:  # scipy's power arithmetic: a core install runs without a plan
        return [f"plan for a verdict: not made ({exc})"]
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        return [f"plan for a verdict: not made ({type(exc).__name__}: {exc})"]

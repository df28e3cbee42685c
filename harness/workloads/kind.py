"""What a workload kind declares about itself, so that no other module names a kind or a phase.

A kind's module (``harness/workloads/kinds/<kind>.py``) exports ``KIND = WorkloadKind(...)``: its config
model, its ``run`` coroutine, the phases that are filler, the figures it derives from its phase
summaries (with unit and direction), the rows it adds to the report's HiCache table, whether its
phases belong in the tier-hit chart, and which phase statistics the history tracks. The summary,
compare, report and history read these declarations (``harness.workloads.kinds()``). A kind
whose figures need its records and its config (schedule lag, SLO attainment) declares
``phase_figures``: the summary keeps what it returns under each phase's ``"figures"``, where the
kind's derived figures read it.

The shapes the report and compare draw from a kind's phases are declared here too:
``load_points`` (its phases are the load points of a sweep, their ``figures`` carrying
``sweep_axis``/``sweep_value``, the offered and achieved rate, schedule lag and SLO attainment:
latency-vs-load and goodput curves, the knee, curve points compared pairwise), ``round_of``
(its phases are rounds of conversations: per-round TTFT and tier hits) and ``estimate`` (what
``harness estimate`` / ``--dry-run`` count for it, `harness.workloads.estimating`).

``hit_tier`` says which of its phases exist to measure hits of one cache tier, and which tier
(repeat_prefill's ``repeat_device`` the device, ``repeat_after_evict`` the host): a variant that
has that tier and whose phase got none of it measured recompute there, and the figures derived
from that phase say so (`harness.analysis.summary.unexercised_phases`). Phases where a miss is the point
(cold phases, eviction filler) have no tier.
"""

from __future__ import annotations

import typing
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from harness.measures.metrics import METRICS
from harness.store.summary import PhaseSummary

PhaseSummaries = Mapping[str, Mapping[str, Any]]  # phase → its summary (harness.analysis.summary)
Tier = typing.Literal["device", "host", "storage"]  # a cache tier a phase exists to hit


@dataclass(frozen=True)
class PhaseStat:
    """One statistic of one metric of one phase, e.g. ``PhaseStat("cold", "ttft_ms")`` (its p50)."""

    phase: str
    metric: str
    stat: str = "p50"

    def of(self, phases: PhaseSummaries) -> float | None:
        summary = phases.get(self.phase)
        if not summary:
            return None
        s = (summary.get("metrics") or {}).get(self.metric)
        return s.get(self.stat) if s else None

    def stored(self, phases: Mapping[str, PhaseSummary]) -> float | None:
        """The statistic from a stored summary's typed phases (`harness.store.summary`)."""
        p = phases.get(self.phase)
        return p.stat(self.metric, self.stat) if p is not None else None


@dataclass(frozen=True)
class PhaseRoofline:
    """One figure of one phase's roofline (`harness.measures.roofline.phase_roofline`: ``ratio`` is
    achieved / floor, ``vs_recompute`` achieved / recompute), e.g. ``PhaseRoofline("repeat_after_evict")``."""

    phase: str
    key: str = "ratio"

    def present(self, phases: PhaseSummaries) -> bool:
        """Whether the phase has a roofline at all (it got host or storage hits)."""
        return bool((phases.get(self.phase) or {}).get("roofline"))

    def of(self, phases: PhaseSummaries) -> float | None:
        summary = phases.get(self.phase)
        v = ((summary or {}).get("roofline") or {}).get(self.key)
        return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None

    def stored(self, phases: Mapping[str, PhaseSummary]) -> float | None:
        """The figure from a stored summary's typed phases (`harness.store.summary`)."""
        p = phases.get(self.phase)
        v = p.roofline.get(self.key) if p is not None else None
        return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    """numerator / denominator; None when either is missing or the denominator is not > 0."""
    if numerator is None or denominator is None or denominator <= 0:
        return None
    return numerator / denominator


@dataclass(frozen=True)
class Derived:
    """A figure a kind derives from its phase summaries (e.g. host_speedup = cold / after-evict
    TTFT). ``needs``: the phases it needs (not listed for a workload that lacks one);
    ``compared``: judged by ``harness compare``; ``counts_hits``: it counts the hits itself (a
    hit fraction), so a phase without hits makes it a true 0, not a figure of recompute;
    ``compute`` is pure."""

    name: str
    unit: str
    higher_is_better: bool
    description: str
    compute: Callable[[PhaseSummaries], float | None]
    needs: tuple[str, ...] = ()
    compared: bool = False
    counts_hits: bool = False
    # listed only where this holds too (a roofline figure: only where its phase has a roofline)
    when: Callable[[PhaseSummaries], bool] | None = None

    def applies(self, phases: PhaseSummaries) -> bool:
        return all(p in phases for p in self.needs) and (self.when is None or self.when(phases))

    @classmethod
    def phase_median(cls, phase: str, metric: str, description: str) -> Derived:
        """The median of a declared metric in one phase, named after it, with its unit and
        direction from its declaration (`harness.measures.metrics.METRICS`)."""
        m = METRICS[metric]
        return cls(metric, m.unit, m.higher_is_better, description, PhaseStat(phase, metric).of, needs=(phase,))


@dataclass(frozen=True)
class ReportRow:
    """A row of the report's HiCache table. ``value``: a derived figure's name or a phase
    statistic. ``label``/``note`` may use ``{workload}`` (the workload's name)."""

    label: str
    unit: str
    value: str | PhaseStat
    higher_is_better: bool
    note: str = ""


@dataclass(frozen=True)
class WorkloadKind:
    """The declaration of one workload kind (see the module docstring)."""

    config: type  # the pydantic config model; its ``kind: Literal[...]`` field names the kind
    run: Callable[[Any, Any], Awaitable[None]]  # async (WorkloadContext, config) -> None
    filler_phases: frozenset[str] = frozenset()
    derived: tuple[Derived, ...] = ()
    report_rows: tuple[ReportRow, ...] = ()
    tier_hit_phases: bool = False  # its phases reuse prompts: show their tier hits
    pass_walls: bool = False  # its phases are concurrent passes: show their wall times
    history_stats: tuple[PhaseStat, ...] = field(default=())  # tracked beside the derived figures
    # (the workload's config, or None where the summary has none; a phase's name; its records,
    # warm-up included) -> JSON-ready figures kept in that phase's summary under "figures"; pure
    phase_figures: Callable[[Any, str, Sequence[Any]], Mapping[str, Any]] | None = None
    load_points: bool = False  # its phases are a sweep's load points (figures: sweep_axis, sweep_value, rates)
    round_of: Callable[[str], int | None] | None = None  # a phase -> its round (None: not a round)
    # (the workload's config, `estimating.EstimateContext`) -> `estimating.WorkEstimate`; None: not estimated
    estimate: Callable[[Any, Any], Any] | None = None
    # a phase -> the cache tier it exists to hit (None: a miss is no news there); None: no such phase
    hit_tier: Callable[[str], Tier | None] | None = None
    # the columns of the console's results table it fills (`harness.analysis.results_table.COLUMNS`' keys):
    # column -> a derived figure's name or a phase statistic
    table_cells: Mapping[str, str | PhaseStat] = field(default_factory=dict)
    # (the workload's config, the variant's samples in time order) -> JSON-ready figures kept under
    # the workload's "from_samples" in the summary (`harness.analysis.summary.sample_figures`); pure.
    # Its "findings" ([{"outcome": "FAIL" | "INCONCLUSIVE", "code", "text"}]) are read by the
    # variant's verdict (`harness.analysis.verdict`): a soak's LEAK fails the variant.
    sample_figures: Callable[[Any, Sequence[Mapping[str, Any]]], Mapping[str, Any]] | None = None

    @property
    def name(self) -> str:
        return typing.get_args(self.config.model_fields["kind"].annotation)[0]

"""Which variants a run runs (``--only``, ``--shard I/N``), and the split of a scenario's variants
into N shards: deterministic, balanced, stable under YAML reordering.

The rule (docs/sharding.md):

1. Each variant gets a cost estimate: one server start, plus — when it is expected to start —
   one unit per workload per repeat and one for the quality arm. Expected start-up failures are
   cheap (they stop at the start), so they are spread like everything else but count less.
2. Variants are sorted by (cost descending, name). The name is the identity of a variant in its
   run folder and does not depend on where it is written in the YAML, so reordering the file
   never moves a variant to another shard.
3. The sorted list is dealt out in "snake" order (1..N, N..1, 1..N, ...). Every round gives each
   shard exactly one variant, so shard sizes differ by at most one, and the snake puts the
   expensive variants of one round and the cheap ones of the next on the same shards.

Adding or removing a variant can move others (any balanced rule must); every shard of one
nightly therefore has to run the same scenario text, which ``harness merge`` checks by hash.

Parity needs the baseline (HiCache OFF) arm's answers. A shard that holds a variant with a
quality arm but not the baseline also runs the baseline, as a *support* variant: each shard is
self-contained and every parity verdict compares ON and OFF on one host (comparing across hosts
would mix GPU, driver and host-memory differences into what should be a HiCache-only diff).
The merge keeps the baseline copy of the shard it is assigned to for the merged tables.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from harness.core.errors import BadInput

if TYPE_CHECKING:
    from harness.scenario.models import Scenario

RULE = "cost-desc,name; snake; baseline-per-shard"
MAX_SHARDS = 10_000  # N of --shard I/N: more than any CI matrix or job array


class SelectionError(BadInput, ValueError):
    """``--only`` / ``--shard`` that select no variant, or variants that cannot be dealt out."""


def _name(v: Any) -> str:
    return v if isinstance(v, str) else v.name


def variant_cost(variant: Any, n_workloads: int = 1, repeats: int = 1, quality: bool = False) -> float:
    """Estimated relative cost of one variant: 1 per server start, plus the workload and quality
    units when it is expected to come up (``expect: ok``)."""
    if getattr(variant, "expect", "ok") != "ok":
        return 1.0
    return 1.0 + max(1, n_workloads) * max(1, repeats) + (1.0 if quality else 0.0)


def assign_shards(
    variants: Iterable[Any], n: int, cost: Mapping[str, float] | Callable[[Any], float] | None = None
) -> list[list[str]]:
    """Names of the variants of each of ``n`` shards (index 0 is shard 1/N).

    ``variants``: names or objects with ``.name`` (and optionally ``.expect``). ``cost``: a
    mapping name → cost, a function variant → cost, or None (:func:`variant_cost` with one
    workload). Each variant is in exactly one shard; sizes differ by at most one; the result
    depends only on the set of (name, cost) pairs, never on their order. Within a shard the
    names are sorted.
    """
    if n < 1:
        raise SelectionError(f"shard count must be >= 1, got {n}")
    items = list(variants)
    names = [_name(v) for v in items]
    if len(set(names)) != len(names):
        dup = sorted({x for x in names if names.count(x) > 1})
        raise SelectionError(f"duplicate variant names: {', '.join(dup)}")

    def cost_of(v: Any) -> float:
        if cost is None:
            return variant_cost(v)
        if callable(cost):
            return float(cost(v))
        return float(cost.get(_name(v), 1.0))

    order = sorted(((-cost_of(v), _name(v)) for v in items))
    shards: list[list[str]] = [[] for _ in range(n)]
    for i, (_, name) in enumerate(order):
        rnd, pos = divmod(i, n)
        shards[pos if rnd % 2 == 0 else n - 1 - pos].append(name)
    return [sorted(s) for s in shards]


@dataclass
class ShardPlan:
    """What shard ``index``/``count`` runs: the variants assigned to it and the support baseline."""

    index: int
    count: int
    assigned: list[str]
    support: list[str] = field(default_factory=list)
    all_variants: list[str] = field(default_factory=list)  # the whole scenario, in YAML order
    costs: dict[str, float] = field(default_factory=dict)

    @property
    def names(self) -> set[str]:
        return set(self.assigned) | set(self.support)

    def to_json(self) -> dict:
        return {
            "index": self.index,
            "count": self.count,
            "rule": RULE,
            "assigned": self.assigned,
            "support": self.support,
            "all_variants": self.all_variants,
            "cost": round(sum(self.costs.get(n, 0.0) for n in self.assigned + self.support), 3),
        }


def needs_baseline(scenario: Scenario, variants: Iterable[Any], baseline: str | None) -> bool:
    """Whether a shard with these variants needs the baseline arm for parity: quality is on and
    some other variant is expected to come up (and so asks the quality tasks)."""
    if not baseline or not scenario.quality.enabled:
        return False
    return any(_name(v) != baseline and getattr(v, "expect", "ok") == "ok" for v in variants)


def plan_shard(scenario: Scenario, variants: list[Any], index: int, count: int) -> ShardPlan:
    """Shard ``index`` (1-based) of ``count`` over ``variants`` (already filtered by --only)."""
    if not (count >= 1 and 1 <= index <= count):
        raise SelectionError(f"--shard: expected 1 <= I <= N, got {index}/{count}")
    if count > MAX_SHARDS:
        raise SelectionError(f"--shard: at most {MAX_SHARDS} shards, got {index}/{count}")
    n_workloads = len(scenario.workloads)
    repeats = scenario.repeats
    quality = bool(scenario.quality.enabled)
    costs = {v.name: variant_cost(v, n_workloads, repeats, quality) for v in variants}
    assigned = assign_shards(variants, count, costs)[index - 1]
    baseline = scenario.quality.baseline_variant
    by_name = {v.name: v for v in variants}
    support: list[str] = []
    if (
        baseline in by_name
        and baseline not in assigned
        and needs_baseline(scenario, [by_name[n] for n in assigned], baseline)
    ):
        support = [baseline]
    return ShardPlan(index, count, assigned, support, [v.name for v in variants], costs)


def select(variants: list[Any], plan: ShardPlan) -> list[Any]:
    """The variants a shard runs, in YAML order (the support baseline where it stands)."""
    return [v for v in variants if v.name in plan.names]


def select_variants(variants: list[Any], only: list[str] | None) -> list[Any]:
    """The variants ``--only`` names (all of them without it), in YAML order; ValueError names
    an unknown one."""
    if not only:
        return variants
    names = {v.name for v in variants}
    unknown = [o for o in only if o not in names]
    if unknown:
        raise SelectionError(f"--only: no variant named {', '.join(unknown)} (have: {', '.join(sorted(names))})")
    return [v for v in variants if v.name in only]


def select_run_variants(
    scenario: Scenario, only: list[str] | None = None, shard: tuple[int, int] | None = None
) -> tuple[list[Any], ShardPlan | None]:
    """The variants one ``harness run`` runs: ``--only``, then shard I/N of those (its own plus
    the parity baseline it needs). The plan is None without ``--shard``."""
    variants = select_variants(scenario.expand_variants(), only)
    if shard is None:
        return variants, None
    plan = plan_shard(scenario, variants, *shard)
    return select(variants, plan), plan

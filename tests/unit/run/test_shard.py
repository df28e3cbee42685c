"""Shard assignment: every variant in exactly one shard, sizes within one, independent of YAML
order, the parity baseline added to the shards that need it."""

from __future__ import annotations

import random
from types import SimpleNamespace

import pytest

from harness.run.shard import assign_shards, plan_shard, select
from harness.scenario import load_scenario
from tests.conftest import tiny_scenario, write_scenario


def _v(name, expect="ok"):
    return SimpleNamespace(name=name, expect=expect)


MATRIX = [
    _v(f"on-r{r}-{layout}-{pol}")
    for r in (1, 2, 4)
    for layout in ("page_first", "layer_first", "pfd")
    for pol in ("wt", "wb")
] + [_v("off"), _v("fail-a", "startup_failed"), _v("fail-b", "startup_failed")]


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 7, 21, 30])
def test_each_variant_in_exactly_one_shard_and_balanced(n):
    shards = assign_shards(MATRIX, n)
    assert len(shards) == n
    flat = [x for s in shards for x in s]
    assert sorted(flat) == sorted(v.name for v in MATRIX)  # exactly once each
    sizes = [len(s) for s in shards]
    assert max(sizes) - min(sizes) <= 1


@pytest.mark.parametrize("n", [2, 3, 4])
def test_stable_under_reordering(n):
    want = assign_shards(MATRIX, n)
    rng = random.Random(7)
    for _ in range(20):
        shuffled = MATRIX[:]
        rng.shuffle(shuffled)
        assert assign_shards(shuffled, n) == want
        assert assign_shards([v.name for v in shuffled], n) == assign_shards([v.name for v in MATRIX], n)


def test_cost_is_spread():
    """Expected start-up failures are cheap; the snake deal does not pile them onto one shard."""
    costs = {v.name: (1.0 if v.expect != "ok" else 3.0) for v in MATRIX}
    shards = assign_shards(MATRIX, 3, costs)
    totals = [sum(costs[x] for x in s) for s in shards]
    assert max(totals) - min(totals) <= 3.0  # within one expensive variant


def test_bad_inputs():
    with pytest.raises(ValueError):
        assign_shards(MATRIX, 0)
    with pytest.raises(ValueError, match="duplicate"):
        assign_shards(["a", "a"], 2)
    assert assign_shards([], 3) == [[], [], []]


def test_scenario_reorder_keeps_shards(tmp_path):
    a = load_scenario(write_scenario(tmp_path, tiny_scenario(n_on=5, quality=True), name="a"))
    b = load_scenario(write_scenario(tmp_path, tiny_scenario(n_on=5, quality=True, reverse=True), name="b"))
    for n in (2, 3, 4):
        pa = [plan_shard(a, a.expand_variants(), i, n) for i in range(1, n + 1)]
        pb = [plan_shard(b, b.expand_variants(), i, n) for i in range(1, n + 1)]
        assert [(p.assigned, p.support) for p in pa] == [(p.assigned, p.support) for p in pb]


def test_baseline_runs_in_every_shard_with_a_quality_arm(tmp_path):
    s = load_scenario(write_scenario(tmp_path, tiny_scenario(n_on=5, quality=True)))
    variants = s.expand_variants()
    plans = [plan_shard(s, variants, i, 3) for i in (1, 2, 3)]
    owners = [p for p in plans if "off" in p.assigned]
    assert len(owners) == 1 and owners[0].support == []
    for p in plans:
        if "off" not in p.assigned:
            assert p.support == ["off"], p
        ran = [v.name for v in select(variants, p)]
        assert ran == [v.name for v in variants if v.name in p.assigned + p.support]  # YAML order
        assert "off" in ran


def test_no_support_baseline_without_quality_or_only_failures(tmp_path):
    s = load_scenario(write_scenario(tmp_path, tiny_scenario(n_on=3)))
    for i in (1, 2):
        assert plan_shard(s, s.expand_variants(), i, 2).support == []
    q = load_scenario(write_scenario(tmp_path, tiny_scenario(n_on=1, quality=True), name="q"))
    vs = q.expand_variants()
    fake = [vs[0], vs[1].model_copy(update={"expect": "startup_failed"})]
    plans = [plan_shard(q, fake, i, 2) for i in (1, 2)]
    assert all(p.support == [] for p in plans)  # the only ON arm is expected not to start


def test_plan_shard_range(tmp_path):
    s = load_scenario(write_scenario(tmp_path, tiny_scenario()))
    with pytest.raises(ValueError):
        plan_shard(s, s.expand_variants(), 3, 2)
    empty = plan_shard(s, s.expand_variants(), 7, 7)
    assert empty.assigned == [] and empty.support == []

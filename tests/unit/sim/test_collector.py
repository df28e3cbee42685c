"""The simulated server's garbage collection inside modelled batch time (harness.sim.collector):
CPython's older generations are collected by the scheduler between a batch's start and its
deadline, a full collection only in a batch with room for it, and the automatic collector keeps
its youngest generation only. Before it, a full collection of the twin's page tree (0.2-0.55 s)
landed in the same cold prompts every night (the 3rd and 8th of `off`, +11-64 %)."""

from __future__ import annotations

import asyncio
import gc

import pytest

from harness.sim import collector as collector_mod
from harness.sim.cache import TwoTierCache
from harness.sim.collector import MAX_POSTPONED_S, NEVER, BatchCollector
from harness.sim.cost import CostModel
from harness.sim.engine import Engine, EngineConfig
from harness.sim.metrics import SimMetrics
from harness.sim.request import SamplingParams, SimRequest
from harness.sim.tokens import TokenModel


class FakeGC:
    """CPython's gc module as the collector sees it: counts, the generations' sizes and the
    collections asked for, scripted; a full collection takes ``s_per_object`` per object on
    the fake clock."""

    def __init__(self) -> None:
        self.thresholds = (700, 10, 10)
        self.count = (0, 0, 0)
        self.oldest = 1000
        self.young = 0
        self.collected: list[int] = []
        self.now = 0.0
        self.s_per_object = 1e-6

    def clock(self) -> float:
        return self.now

    def get_threshold(self):
        return self.thresholds

    def set_threshold(self, *t):
        self.thresholds = t

    def get_count(self):
        return self.count

    def get_objects(self, generation=None):
        return [None] * (self.oldest if generation == 2 else self.oldest + self.young)

    def collect(self, generation=2):
        self.collected.append(generation)
        if generation == 2:
            self.now += self.s_per_object * (self.oldest + self.young)
        c0, c1, c2 = self.count
        self.count = (0, 0, 0) if generation == 2 else (0, 0, c2 + 1)
        return 0


@pytest.fixture
def fake(monkeypatch):
    g = FakeGC()
    monkeypatch.setattr(collector_mod, "gc", g)
    return g


def test_install_leaves_only_the_youngest_generation_automatic(fake):
    c = BatchCollector(clock=fake.clock)
    c.install()
    assert fake.thresholds == (700, NEVER, NEVER)
    assert fake.collected == [2]  # one full collection while the process holds little: its cost per object
    assert c.s_per_object == pytest.approx(1e-6)
    c.uninstall()
    assert fake.thresholds == (700, 10, 10)


def test_the_middle_generation_when_its_count_is_due(fake):
    c = BatchCollector(clock=fake.clock)
    c.install()
    fake.count = (5, 10, 0)
    assert c.during(0.001) is None and fake.collected == [2]
    fake.count = (5, 11, 0)
    assert c.during(0.001) == 1 and fake.collected == [2, 1]


def test_a_full_collection_waits_for_a_batch_with_room_for_it(fake):
    c = BatchCollector(clock=fake.clock)
    c.install()  # 1000 objects survived: the 25 % rule asks for > 250 promoted since
    fake.oldest, fake.count = 300_000, (0, 3, 11)  # a page tree: 0.3 s at 1 us an object
    assert c.expected_full_s() == pytest.approx(0.001)  # not looked at since the install
    assert c.during(0.5) is None  # due, but 0.5 s left < 2 x 0.3 s
    assert c.expected_full_s() == pytest.approx(0.3)
    fake.count = (0, 11, 11)
    assert c.during(0.5) == 1  # the middle generation still runs when it is due
    fake.count = (0, 0, 12)
    assert c.during(0.61) == 2  # a long batch: room for it
    assert fake.now == pytest.approx(0.3 + 0.001)  # (the one at install: 1,000 objects)


def test_the_quarter_rule_keeps_full_collections_rare(fake):
    c = BatchCollector(clock=fake.clock)
    c.install()
    fake.oldest, fake.count = 1250, (0, 0, 50)  # 250 promoted of 1000: not over a quarter
    assert c.during(10.0) is None and fake.collected == [2]
    fake.oldest, fake.count = 1251, (0, 0, 51)
    assert c.during(10.0) == 2


def test_a_full_collection_postponed_too_long_runs_anyway(fake):
    c = BatchCollector(clock=fake.clock)
    c.install()
    fake.oldest, fake.count = 1_000_000, (0, 0, 11)  # 1 s to collect
    steps = int(MAX_POSTPONED_S / 0.5)
    for _ in range(steps):  # decode steps of 10 ms every 0.5 s: never room for it
        assert c.during(0.01) is None
        fake.now += 0.5
    assert c.during(0.01) == 2  # memory stays bounded on a server that only decodes


def test_with_it_installed_the_older_generations_wait_for_the_scheduler():
    """Real CPython: while installed, no automatic collection of the older generations happens,
    however much is allocated; `during` collects them."""
    seen: list[int] = []
    inside = [False]

    def watch(phase, info):
        if phase == "start" and not inside[0]:
            seen.append(info["generation"])

    c = BatchCollector()
    c.install()  # (its own full collection: the cost per object)
    gc.callbacks.append(watch)
    try:
        keep = []
        for i in range(20_000):  # cycles, like the page tree's parent <-> child sets
            a: dict = {}
            a["self"] = a
            keep.append(a)
        assert seen and set(seen) == {0}  # automatic: the youngest generation only
        inside[0] = True
        assert c.during(10.0) in (1, 2)
    finally:
        c.uninstall()
        gc.callbacks.remove(watch)


class Budgets:
    """A collector that records the time left in each batch it is called in."""

    def __init__(self) -> None:
        self.budgets: list[float] = []

    def during(self, budget_s: float) -> None:
        self.budgets.append(budget_s)


def test_the_scheduler_collects_inside_each_batch_before_sleeping_to_its_deadline():
    cfg = EngineConfig(
        max_total_tokens=4096,
        chunked_prefill_size=8192,
        max_running_requests=8,
        context_len=4096,
        kv_bytes_per_token=1024,
        mamba_bytes_per_slot=0,
        hybrid=False,
        deterministic=True,
        faults={},
        random_seed=0,
    )
    cost = CostModel(
        prefill_tok_s=1e4,
        prefill_overhead_s=0.01,
        decode_base_s=0.005,
        decode_per_req_s=0.0,
        h2d_bytes_s=1e9,
        d2h_bytes_s=1e12,
        hbm_bytes_s=1e15,
        backup_visible=0.0,
        time_scale=1.0,
    )
    e = Engine(cfg, TwoTierCache(4096, 0), cost, TokenModel(32000), SimMetrics("m"))
    e.collector = Budgets()

    async def go() -> None:
        loop = asyncio.create_task(e.run())
        req = SimRequest(rid="r", input_ids=list(range(10, 510)), sampling=SamplingParams(max_new_tokens=3))
        e.submit(req)
        while not req.done:
            await req.updates.get()
        loop.cancel()

    asyncio.run(go())
    # one prefill batch (10 ms + 500 tokens at 10K tok/s = 60 ms) and two decode steps (5 ms)
    assert len(e.collector.budgets) == 3
    prefill, *steps = e.collector.budgets
    assert prefill <= 0.06 + 1e-9  # what is left of the batch when it starts (less on a busy box)
    assert all(b <= 0.005 + 1e-9 for b in steps)

"""Workloads end to end against the simulated server (real processes, real HTTP).

HiCache ON (ratio 2) vs OFF with a working set over the 4096-token GPU pool: the second pass of
parallel_prefixes is served from cache ON (every request a hit, the part the GPU pool could not
keep from the host tier); OFF has no host hits. P5: a server that crashes mid-run leaves its
in-flight rows marked server_died, nothing more is sent, rows are kept and the outcome says so.
Assertions read cache tiers and orderings the simulator decides, not wall-clock ratios that a
loaded machine blurs.
"""

from __future__ import annotations

import asyncio
from contextlib import ExitStack

import httpx
import pytest
from pydantic import TypeAdapter

from harness.analysis.summary import summarize
from harness.scenario import Workload
from harness.server.client import StreamingClient
from harness.sim.testing import SimProcess
from harness.store.records import RequestRecord
from harness.workloads import WorkloadContext, run_workloads

POOL = 4096
_wl = TypeAdapter(Workload)


def workload(**kw):
    return _wl.validate_python(kw)


class Sim(SimProcess):
    """The shared sim helper plus what a WorkloadContext needs: liveness and the pool size."""

    def __enter__(self) -> "Sim":
        super().__enter__()
        self.base_url = self.url
        self.info = httpx.get(self.url + "/get_server_info", timeout=5).json()
        return self

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


@pytest.fixture
def sim_factory():
    with ExitStack() as stack:

        def make(*extra: str, time_scale: float = 0.02) -> Sim:
            argv = ["--max-total-tokens", str(POOL), "--skip-tokenizer-init", *extra]
            return stack.enter_context(Sim(argv, time_scale=time_scale))

        yield make


HICACHE = ("--enable-hierarchical-cache", "--hicache-ratio", "2")


def run(sim: Sim, workloads, repeat: int = 0, timeout_s: float = 60.0):
    records: list[RequestRecord] = []
    phases: list[str] = []

    async def go():
        async with StreamingClient(sim.base_url, timeout_s=timeout_s) as client:
            ctx = WorkloadContext(
                base_url=sim.base_url,
                client=client,
                variant="v",
                repeat=repeat,
                pool_tokens=sim.info["max_total_num_tokens"],
                vocab_size=32000,
                seed=0,
                record=records.append,
                set_phase=phases.append,
                alive=sim.alive,
                request_timeout_s=timeout_s,
            )
            return await run_workloads(ctx, workloads)

    outcome = asyncio.run(go())
    return outcome, records, phases


def by_phase(records, phase):
    return [r for r in records if r.phase == phase and not r.warmup]


PARALLEL = dict(kind="parallel_prefixes", k=4, prompt_tokens="0.4x pool", passes=2, flush_before=True)


def test_parallel_prefixes_second_pass_host_hits_on_vs_off(sim_factory):
    on, off = sim_factory(*HICACHE), sim_factory()
    assert on.info["max_total_num_tokens"] == POOL
    out_on, rec_on, phases = run(on, [workload(**PARALLEL)])
    out_off, rec_off, _ = run(off, [workload(**PARALLEL)])
    assert out_on.ok and out_off.ok and out_on.completed == ["parallel_prefixes"]
    assert phases == ["parallel_prefixes/pass1", "parallel_prefixes/pass2"]
    for recs in (rec_on, rec_off):
        assert len(recs) == 8 and all(r.error is None for r in recs)
        assert {r.concurrency_group for r in by_phase(recs, "pass2")} == {"parallel_prefixes/pass2/r0"}
        assert all(r.prompt_len == int(0.4 * POOL) for r in recs)
    # Pass 2 ON: every request is served from cache. The GPU pool still holds the most recent
    # pool's worth of pass 1; which requests find their prefix there depends on the arrival order
    # within the concurrent pass (in order, LRU thrashes and all are host hits, as on the H200;
    # reordered under load, the newest prefixes are device hits). What holds in every order: the
    # part of the working set the device could not keep came back from the host tier.
    p2_on = by_phase(rec_on, "pass2")
    tiers = [(r.cached_device, r.cached_host) for r in p2_on]
    assert all(r.cached_tokens >= r.prompt_len - 1 for r in p2_on), tiers
    working_set = sum(r.prompt_len for r in p2_on)
    assert sum(r.cached_host or 0 for r in p2_on) >= working_set - POOL - len(p2_on), tiers
    assert sum((r.cached_host or 0) > 0 for r in p2_on) >= 2, tiers
    assert all((r.cached_host or 0) == 0 for r in rec_off)
    # OFF: the pool holds the latest prompts only; pass 2 recomputes what was evicted
    p2_off = by_phase(rec_off, "pass2")
    assert sum(r.cached_tokens or 0 for r in p2_off) <= POOL, [r.cached_tokens for r in p2_off]
    assert sum(r.cached_tokens or 0 for r in p2_on) > sum(r.cached_tokens or 0 for r in p2_off)
    # the speed-up is derived (its size is a timing, checked on real hardware, not here)
    assert summarize(rec_on)["workloads"]["parallel_prefixes"]["derived"]["second_pass_speedup"] > 0


def test_every_workload_kind_on_hicache(sim_factory):
    sim = sim_factory(*HICACHE)
    wls = [
        workload(kind="cold_prefill", n=2, prompt_tokens=512, warmup=1),
        workload(kind="repeat_prefill", n=2, prompt_tokens="0.2x pool", eviction_tokens="1x pool"),
        workload(kind="short_ttft", n=3, prompt_tokens=32, long_prompt_tokens="0.8x pool"),
        workload(kind="decode", batch=2, prompt_tokens=64, output_tokens=8),
        workload(kind="multi_turn", sessions=2, turns=3, first_turn_tokens=256, turn_tokens=32, output_tokens=4),
    ]
    out, recs, phases = run(sim, wls, repeat=1)
    assert out.ok, out
    assert out.completed == ["cold_prefill", "repeat_prefill", "short_ttft", "decode", "multi_turn"]
    assert all(r.error is None and r.repeat == 1 and r.variant == "v" for r in recs)
    # cold_prefill: one marked warm-up, then two never-seen prompts
    cold = [r for r in recs if r.workload == "cold_prefill"]
    assert [(r.phase, r.warmup) for r in cold] == [("warmup", True), ("cold", False), ("cold", False)]
    assert all(r.cached_tokens == 0 and r.prompt_len == 512 for r in cold)
    # repeat_prefill: device hits at once, host hits after eviction
    rp = [r for r in recs if r.workload == "repeat_prefill"]
    assert all(r.cached_tokens == 0 for r in by_phase(rp, "cold"))
    assert all((r.cached_device or 0) > 0 and r.cached_host == 0 for r in by_phase(rp, "repeat_device"))
    assert by_phase(rp, "evict")
    assert all((r.cached_host or 0) > 0 for r in by_phase(rp, "repeat_after_evict"))
    # short_ttft
    st = [r for r in recs if r.workload == "short_ttft"]
    assert len(by_phase(st, "alone")) == 3 and len(by_phase(st, "long")) == 1
    during = by_phase(st, "during_long") + by_phase(st, "after_long")
    assert len(during) == 3  # at this time scale the long prefill may end before any short one
    (long_rec,) = by_phase(st, "long")
    assert all(long_rec.sent_ns <= r.sent_ns < long_rec.first_token_ns for r in by_phase(st, "during_long"))
    # decode: fixed output length
    dec = by_phase(recs, "decode")
    assert len(dec) == 2 and all(len(r.output_ids) == 8 and r.completion_tokens == 8 for r in dec)
    # multi_turn: histories grow by output + turn tokens and hit the cache
    mt = [r for r in recs if r.workload == "multi_turn"]
    for s in range(2):
        turns = sorted((r for r in mt if r.index == s), key=lambda r: r.phase)
        assert [r.prompt_len for r in turns] == [256, 256 + 4 + 32, 256 + 2 * (4 + 32)]
        assert all((r.cached_tokens or 0) >= 256 for r in turns[1:])
    s = summarize(recs)["workloads"]
    assert s["repeat_prefill"]["derived"]["device_speedup"] > 0  # derived; its size is a timing
    assert s["repeat_prefill"]["phases"]["evict"]["filler"] is True
    assert ("interference" in s["short_ttft"]["derived"]) == bool(by_phase(st, "during_long"))
    decode_tok_s = s["decode"]["derived"]["decode_tok_s"]
    assert decode_tok_s is None or decode_tok_s > 0  # None: a loaded client read all 8 tokens as one chunk
    assert s["multi_turn"]["derived"]["later_turns_cached_fraction"] > 0.5
    assert "cold_prefill/cold" in phases and "multi_turn/turns" in phases


def test_server_death_mid_run_is_contained(sim_factory):
    """P5: crash at the 3rd request of a concurrent pass → in-flight rows server_died, no more sent."""
    sim = sim_factory(*HICACHE, "--sim-fault", "crash_at_request=6")
    wls = [
        workload(kind="parallel_prefixes", k=4, prompt_tokens=256, passes=3),
        workload(kind="cold_prefill", n=2, prompt_tokens=64, warmup=0),
    ]
    out, recs, _ = run(sim, wls)
    assert out.server_died and not out.ok
    assert out.skipped == ["cold_prefill"] and "parallel_prefixes" in out.failed
    assert not sim.alive()
    ok = [r for r in recs if r.error is None]
    died = [r for r in recs if r.error == "server_died"]
    assert len(ok) >= 4 and died, [(r.phase, r.error) for r in recs]
    assert len(recs) == len(ok) + len(died)  # every row kept, no other error kinds
    assert all(r.phase != "pass3" for r in recs)  # nothing sent after the death
    assert out.n_requests == len(recs)


def test_workload_timeout_marks_in_flight_and_moves_on(sim_factory):
    # real-time cost model: 1500 decode steps of >= 4 ms are ~6 s, far past the 0.4 s timeout
    # (at the default 0.02 they would finish inside it on an idle machine)
    sim = sim_factory(time_scale=1.0)
    wls = [
        workload(kind="decode", batch=2, prompt_tokens=64, output_tokens=1500, timeout_s=0.4),
        workload(kind="cold_prefill", n=1, prompt_tokens=64, warmup=0),
    ]
    out, recs, _ = run(sim, wls)
    assert out.timed_out == ["decode"] and out.completed == ["cold_prefill"] and not out.server_died
    dec = [r for r in recs if r.workload == "decode"]
    assert len(dec) == 2 and all(r.error == "timeout" for r in dec) and any(r.output_ids for r in dec)


def test_prefix_sharing_fanout_reuses_the_shared_prefix(sim_factory):
    """Every fan-out request finds the shared prefix cached (page-aligned) and computes only its
    suffix; the seed request is a cold prefill of the prefix."""
    sim = sim_factory()
    prefix = 1000
    wl = workload(kind="prefix_sharing_fanout", prefix_tokens=prefix, suffix_tokens=100, fanout=4, flush_before=True)
    outcome, records, _ = run(sim, [wl])
    assert outcome.ok
    (seed,) = by_phase(records, "seed")
    fanout = by_phase(records, "fanout")
    assert seed.prompt_len == prefix and (seed.cached_tokens or 0) == 0
    assert len(fanout) == 4 and len({r.concurrency_group for r in fanout}) == 1
    aligned = prefix // 64 * 64
    assert all(r.prompt_len == prefix + 100 and (r.cached_tokens or 0) >= aligned for r in fanout)
    derived = summarize(records, {wl.name: wl.kind})["workloads"][wl.name]["derived"]
    assert derived["fanout_cached_fraction"] >= aligned / (prefix + 100)


def test_short_ttft_during_a_long_prefill_that_lasts(sim_factory):
    """With a long prefill that takes a while (4x the real-time cost model: ~0.2 s), short prompts
    sent during it are labelled during_long and wait for it (the 3.7K-token prompt is one prefill
    batch, under the 8192-token chunk): each gets its first token after the long one's, and the
    median TTFT shows the interference."""
    sim = sim_factory(time_scale=4.0)
    out, recs, _ = run(sim, [workload(kind="short_ttft", n=3, prompt_tokens=32, long_prompt_tokens="0.9x pool")])
    assert out.ok, out
    (long_rec,) = by_phase(recs, "long")
    during = by_phase(recs, "during_long")
    assert during, [(r.phase, r.sent_ns - long_rec.sent_ns, r.done_ns - long_rec.done_ns) for r in recs]
    assert all(long_rec.sent_ns <= r.sent_ns < long_rec.first_token_ns for r in during)
    assert all(r.concurrency_group == long_rec.concurrency_group for r in during)
    # queued behind the long prefill: the server emits a short's first token one batch (>= 16 ms
    # at this scale) after the long one's
    assert all(r.first_token_ns > long_rec.first_token_ns for r in during)
    interference = summarize(recs)["workloads"]["short_ttft"]["derived"]["interference"]
    assert interference > 1  # median during / median alone; ~9 on an idle machine

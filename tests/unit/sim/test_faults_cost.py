"""The regression faults of the simulator's engine (slower prefill or decode, stalls, slowdown
over a run, slower only under concurrency, a host tier serving part of its pages, late token
flips), run in process: the modelled batch durations are recorded instead of slept, so each
fault's effect is read exactly, with no wall clock."""

from __future__ import annotations

import asyncio

import pytest

from harness.sim.cache import TwoTierCache
from harness.sim.cost import CostModel
from harness.sim.engine import LATE_FLIP_FROM, Engine, EngineConfig
from harness.sim.faults import Fault
from harness.sim.metrics import SimMetrics
from harness.sim.request import SamplingParams, SimRequest
from harness.sim.tokens import TokenModel

POOL = 4096


class Recorder(Engine):
    """An engine whose batches take no real time: each modelled duration is recorded."""

    def __init__(self, *a, **kw) -> None:
        super().__init__(*a, **kw)
        self.paced: list[float] = []

    async def _pace(self, seconds: float, arrived: float | None = None) -> None:
        self.paced.append(seconds)
        await asyncio.sleep(0)


def engine(
    faults: dict | None = None,
    *,
    host_tokens: int = 0,
    page_size: int = 1,
    layout: str | None = None,
    hybrid: bool = False,
) -> Recorder:
    cfg = EngineConfig(
        max_total_tokens=POOL,
        chunked_prefill_size=8192,
        max_running_requests=8,
        context_len=POOL,
        kv_bytes_per_token=1024,
        mamba_bytes_per_slot=0,
        hybrid=hybrid,
        deterministic=True,
        faults=faults or {},
        random_seed=0,
        layout=layout,
    )
    cost = CostModel(
        prefill_tok_s=1e5,
        prefill_overhead_s=0.01,
        decode_base_s=0.01,
        decode_per_req_s=0.001,
        h2d_bytes_s=1e9,
        d2h_bytes_s=1e12,
        hbm_bytes_s=1e15,
        backup_visible=0.0,
        time_scale=1.0,
    )
    cache = TwoTierCache(POOL, host_tokens, page_size=page_size, hybrid=hybrid)
    return Recorder(cfg, cache, cost, TokenModel(32000), SimMetrics("m"))


async def send(e: Engine, ids: list[int], new: int, *, logprobs: bool = False) -> SimRequest:
    req = SimRequest(
        rid=f"r{ids[0]}-{len(ids)}", input_ids=ids, sampling=SamplingParams(max_new_tokens=new, temperature=0.0)
    )
    req.return_logprob, req.top_logprobs_num = logprobs, 5 if logprobs else 0
    e.submit(req)
    while not req.done:
        await req.updates.get()
    return req


def run(e: Engine, coro):
    async def main():
        loop = asyncio.create_task(e.run())
        try:
            return await coro
        finally:
            loop.cancel()

    return asyncio.run(main())


def prompt(n: int, start: int) -> list[int]:
    return list(range(start, start + n))


def alone(faults: dict | None, n_requests: int = 1, new: int = 1) -> list[float]:
    """Each request alone, one after another: the recorded batch durations."""
    e = engine(faults)

    async def go():
        for i in range(n_requests):
            await send(e, prompt(200, 1000 * (i + 1)), new)

    run(e, go())
    return e.paced


def test_slow_prefill_multiplies_every_prefill_batch():
    healthy, slow = alone(None, 3), alone({Fault.slow_prefill: 1.1}, 3)
    assert len(slow) == len(healthy) == 3
    assert slow == pytest.approx([h * 1.1 for h in healthy])


def test_slow_decode_multiplies_every_decode_step_only():
    healthy, slow = alone(None, new=5), alone({Fault.slow_decode: 1.15}, new=5)
    assert slow[0] == pytest.approx(healthy[0])  # the prefill batch
    assert slow[1:] == pytest.approx([h * 1.15 for h in healthy[1:]]) and len(slow) == 5


def test_stall_every_doubles_the_first_token_batch_of_every_nth_request():
    healthy, stalled = alone(None, 6), alone({Fault.stall_every: 3}, 6)
    ratios = [s / h for s, h in zip(stalled, healthy)]
    assert ratios == pytest.approx([1, 1, 2, 1, 1, 2])


def test_slowdown_per_request_grows_with_the_requests_served():
    healthy, slowing = alone(None, 4), alone({Fault.slowdown_per_request: 0.05}, 4)
    assert [s / h for s, h in zip(slowing, healthy)] == pytest.approx([1.05, 1.10, 1.15, 1.20])


def concurrent(faults: dict | None) -> tuple[list[float], list[float]]:
    """(one request alone, then four at once): the recorded durations of each part."""
    e = engine(faults)

    async def go():
        await send(e, prompt(200, 1000), 3)
        first = len(e.paced)
        await asyncio.gather(*(send(e, prompt(200, 5000 + 1000 * i), 3) for i in range(4)))
        return first

    first = run(e, go())
    return e.paced[:first], e.paced[first:]


def test_slow_when_concurrent_slows_only_batches_of_several_requests():
    (h_alone, h_conc), (s_alone, s_conc) = concurrent(None), concurrent({Fault.slow_when_concurrent: 1.3})
    assert s_alone == pytest.approx(h_alone)  # one request alone: full speed
    assert len(s_conc) == len(h_conc) and s_conc == pytest.approx([h * 1.3 for h in h_conc])


def host_hit(faults: dict | None, new: int = 4, *, logprobs: bool = False) -> tuple[SimRequest, SimRequest]:
    """A 1,000-token prompt asked cold, pushed out of the GPU pool by churn (kept on the host),
    then asked again: (cold, re-ask)."""
    e = engine(faults, host_tokens=3 * POOL, page_size=16)
    ids = prompt(1000, 100_000)

    async def go():
        cold = await send(e, ids, new, logprobs=logprobs)
        for i in range(3):
            await send(e, prompt(1500, 200_000 + 10_000 * i), 1)
        return cold, await send(e, ids, new, logprobs=logprobs)

    return run(e, go())


def test_partial_host_hits_serves_only_the_share_of_host_pages():
    _, full = host_hit(None)
    _, part = host_hit({Fault.partial_host_hits: 0.6})
    assert full.cached_host > 0 and full.cached_device == 0
    pages = full.cached_host // 16
    assert part.cached_host == int(pages * 0.6) * 16 < full.cached_host
    assert part.output_ids == full.output_ids  # the rest is recomputed: answers stay right


def test_late_token_flips_change_late_tokens_of_host_hits_only():
    cold, again = host_hit({Fault.late_token_flips: 20}, new=400, logprobs=True)
    assert again.cached_host > 0
    diff = next(i for i, (a, b) in enumerate(zip(cold.output_ids, again.output_ids)) if a != b)
    assert diff >= LATE_FLIP_FROM
    top = [t for _, t in cold.output_top[diff]]
    assert again.output_ids[diff] not in top  # outside the true top-k
    _, healthy = host_hit(None, new=400)
    assert healthy.output_ids == cold.output_ids
    short_cold, short = host_hit({Fault.late_token_flips: 1}, new=LATE_FLIP_FROM)
    assert short.output_ids == short_cold.output_ids  # answers shorter than the start never flip


def test_declined_host_load_reports_the_host_hit_and_recomputes_it(caplog):
    _, full = host_hit(None)
    with caplog.at_level("WARNING", logger="sglang.sim.scheduler"):
        e = engine({Fault.declined_host_load: None}, host_tokens=3 * POOL, page_size=16)
        ids = prompt(1000, 100_000)

        async def go():
            await send(e, ids, 4)
            for i in range(3):
                await send(e, prompt(1500, 200_000 + 10_000 * i), 1)
            return await send(e, ids, 4)

        again = run(e, go())
    # sglang's breakdown of a declined load_back: host = the host hit, cached_tokens only what was reused
    assert again.cached_host == full.cached_host > 0 and again.cached_device == 0
    assert again.cached_tokens == 0 < full.cached_tokens
    assert again.output_ids == full.output_ids  # recomputed: answers stay right
    assert f"load_back: FAILED to load {full.cached_host} tokens" in caplog.text
    assert "sglang:load_back_tokens_total{" not in e.metrics.render().decode()  # never incremented


def test_slow_page_first_direct_loads_back_at_its_measured_share_of_the_link_on_that_layout_only():
    from harness.sim.cost import PAGE_FIRST_DIRECT_SHARE, PLATFORM_H2D_BYTES_S

    fault = {Fault.slow_page_first_direct: None}
    slow = engine(fault, host_tokens=3 * POOL, layout="page_first_direct")
    assert slow.cost.h2d_bytes_s == PLATFORM_H2D_BYTES_S * PAGE_FIRST_DIRECT_SHARE  # 1.46 GB/s
    assert engine(fault, host_tokens=3 * POOL, layout="page_first").cost.h2d_bytes_s == 1e9  # untouched
    assert engine(None, host_tokens=3 * POOL, layout="page_first_direct").cost.h2d_bytes_s == 1e9


def test_the_pretend_hosts_link_prices_a_host_hits_load_back():
    """``--sim-h2d-gbs`` (``server.sim.h2d_gbs``): a WSL2-like slow link makes a host hit's load
    cost what the link allows; the io backend and layout shares and the page_first_direct fault
    are shares of that link, not of the H200's."""
    from harness.core.model_config import load_model_shape
    from harness.run.launch import launch_spec
    from harness.scenario.loading import load_scenario
    from harness.sim.cli import parse_args
    from harness.sim.cost import DIRECT_SHARE, PAGE_FIRST_DIRECT_SHARE
    from harness.sim.testing import MODELS

    args = parse_args(["--model-path", str(MODELS / "llama-tiny"), "--sim-h2d-gbs", "2"])
    shape = load_model_shape(str(MODELS / "llama-tiny"))
    wsl = CostModel.for_model(shape, 1, "kernel", "page_first", 1.0, **args.cost_knobs())
    h200 = CostModel.for_model(shape, 1, "kernel", "page_first", 1.0)
    assert (wsl.h2d_bytes_s, h200.h2d_bytes_s) == (2e9, 55e9)
    load = 60_000_000  # bytes: the twin's host hit (3,776 tokens of int2 KV + one mamba state)
    assert wsl.prefill_s(24, load, 0) - h200.prefill_s(24, load, 0) == pytest.approx(0.03 - 60e6 / 55e9)
    direct = CostModel.for_model(shape, 1, "direct", "page_first", 1.0, h2d_gbs=2.0)
    assert direct.h2d_bytes_s == pytest.approx(2e9 * DIRECT_SHARE)
    cfg = engine({Fault.slow_page_first_direct: None}, host_tokens=POOL, layout="page_first_direct").cfg
    slow = Engine(cfg, TwoTierCache(POOL, POOL), wsl, TokenModel(32000), SimMetrics("m"))
    assert slow.cost.h2d_bytes_s == pytest.approx(2e9 * PAGE_FIRST_DIRECT_SHARE)
    twin = load_scenario(MODELS.parent / "wsl_tp2_sim.yaml", {})
    argv = launch_spec(twin, twin.expand_variants()[0], 30000).argv
    assert argv[argv.index("--sim-h2d-gbs") + 1] == f"{twin.server.sim.h2d_gbs:g}"


def test_mamba_states_at_most_drops_the_oldest_prompts_state_so_its_repeat_matches_nothing():
    def repeat_of_first(faults):
        e = engine(faults, hybrid=True)
        a, b = prompt(1100, 100_000), prompt(1100, 200_000)

        async def go():
            await send(e, a, 1)
            await send(e, b, 1)
            return await send(e, a, 1), await send(e, b, 1)

        return run(e, go())

    first, second = repeat_of_first(None)
    assert first.cached_tokens == second.cached_tokens == 1088  # the last 64-token checkpoint
    first, second = repeat_of_first({Fault.mamba_states_at_most: 1})
    assert first.cached_tokens == 0  # its state went when b was cached
    assert second.cached_tokens == 0  # and b's when a was cached again

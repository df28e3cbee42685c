"""open_loop and what the clocked kinds share (`harness.workloads.arrivals`, `.slo`): arrivals,
load points and sweeps, the cap, schedule lag and the client-bound flag, SLO attainment, goodput
and the knee; on the simulator, a sweep whose knee moves when the cost model doubles, and the
batch-size-dependent step cost (``--sim-step-ms-per-request``) that gives TPOT a knee."""

from __future__ import annotations

import asyncio
import logging
import statistics

import pytest
from pydantic import ValidationError

from harness.analysis.summary import summarize
from harness.core.model_config import load_model_shape
from harness.scenario import load_scenario_text
from harness.sim.cli import parse_args
from harness.sim.cost import CostModel
from harness.sim.testing import MODELS
from harness.workloads.arrivals import (
    Slots,
    arrival_offsets_ns,
    lag_figures,
    parse_point_phase,
    plan_window,
    point_phase,
)
from harness.workloads.slo import SLO, knee, slo_figures
from tests.factories import MS, make_failed, make_record
from tests.sim_workloads import max_in_flight, run_on, sim, summary_of, workload

# ------------------------------------------------------------------------------ pure parts


def test_arrivals_keep_the_mean_rate_and_burstiness_shapes_the_gaps():
    const = arrival_offsets_ns("constant", 4.0, seed=0, duration_s=2.0)
    assert const == [
        0,
        250_000_000,
        500_000_000,
        750_000_000,
        1_000_000_000,
        1_250_000_000,
        1_500_000_000,
        1_750_000_000,
    ]
    assert arrival_offsets_ns("constant", 4.0, seed=0, limit=3) == const[:3]

    def cv(process, burstiness=1.0):
        off = arrival_offsets_ns(process, 100.0, seed=7, limit=20_000, burstiness=burstiness)
        gaps = [b - a for a, b in zip(off, off[1:])]
        assert len(off) / (off[-1] / 1e9) == pytest.approx(100.0, rel=0.05)  # the mean rate holds
        return statistics.pstdev(gaps) / statistics.mean(gaps)

    assert cv("poisson") == pytest.approx(1.0, abs=0.05)
    assert cv("gamma", 1.0) == pytest.approx(1.0, abs=0.05)  # shape 1 is Poisson
    assert cv("gamma", 0.25) == pytest.approx(2.0, abs=0.2)  # burstier: CV = 1/sqrt(shape)
    assert cv("gamma", 4.0) == pytest.approx(0.5, abs=0.05)
    assert arrival_offsets_ns("poisson", 50, seed=1, duration_s=1) == arrival_offsets_ns(
        "poisson", 50, seed=1, duration_s=1
    )
    assert all(o < 1e9 for o in arrival_offsets_ns("poisson", 50, seed=1, duration_s=1))
    with pytest.raises(ValueError):
        arrival_offsets_ns("poisson", 0, seed=0, limit=3)


def test_warmup_and_cooldown_windows_mark_requests():
    plan = plan_window([0, 400 * MS, 1000 * MS, 1500 * MS, 1999 * MS], warmup_s=0.5, cooldown_s=0.5, end_ns=2000 * MS)
    assert [p.warmup for p in plan] == [True, True, False, True, True]
    assert [p.index for p in plan] == [0, 1, 2, 3, 4]


def test_phase_names_of_load_points():
    assert point_phase("rate", 4.0) == "rate_4" and point_phase("rate", 0.5) == "rate_0p5"
    assert point_phase("conc", 8) == "conc_8"
    assert parse_point_phase("rate_0p5") == ("rate", 0.5) and parse_point_phase("conc_8") == ("conc", 8.0)
    assert parse_point_phase("trace") is None and parse_point_phase("round2") is None


def test_load_points_of_a_config():
    w = workload(kind="open_loop", rate=[4, 0.5], max_concurrency=16, duration_s=5)
    assert [(p.phase, p.rate, p.cap) for p in w.points()] == [("rate_4", 4.0, 16), ("rate_0p5", 0.5, 16)]
    w = workload(kind="open_loop", max_concurrency=[1, 4], duration_s=5)
    assert [(p.phase, p.rate, p.cap) for p in w.points()] == [("conc_1", None, 1), ("conc_4", None, 4)]
    w = workload(kind="open_loop", rate=8, max_concurrency=[2, 4], duration_s=5)
    assert [(p.phase, p.rate, p.cap) for p in w.points()] == [("conc_2", 8.0, 2), ("conc_4", 8.0, 4)]
    assert w.longest_request_tokens(10_000) == 1000 + 64
    assert workload(kind="open_loop", rate=1, prompt_tokens="0.5x pool").longest_request_tokens(4000) == 2064


@pytest.mark.parametrize(
    "fields,message",
    [
        (dict(), "give a rate"),
        (dict(rate=[1, 2], max_concurrency=[1, 2]), "one axis at a time"),
        (dict(rate=[2, 2]), "must differ"),
        (dict(rate=1, burstiness=0.5), "burstiness shapes gamma"),
        (dict(rate=1, duration_s=5, warmup_s=3, cooldown_s=2), "nothing of duration_s"),
        (dict(rate=10_000, duration_s=1000), "more than"),
        (dict(rate=1, prompt_tokens=100, prefix_tokens=100), "shorter than prompt_tokens"),
        (dict(rate=1, slo={}), "at least one of"),
        (dict(rate=1, slo_percentile=80), "slo_percentile"),
    ],
)
def test_bad_load_configs_are_refused(fields, message):
    with pytest.raises(ValidationError, match=message):
        workload(kind="open_loop", **fields)


def test_the_knee_and_goodput_are_gateable_and_the_shares_are_not():
    base = (
        "name: t\nserver: {backend: sglang, model_path: /m}\nvariants: [{name: off}]\n"
        "workloads:\n  - {kind: open_loop, rate: [1, 2], slo: {ttft_ms: 100}}\n"
    )
    s = load_scenario_text(base + "gate: [open_loop.knee_rate, open_loop.goodput_rps]\n", "g.yaml", env={})
    assert [g.metric for g in s.gate] == ["open_loop.knee_rate", "open_loop.goodput_rps"]
    with pytest.raises(Exception, match="compares no derived figure 'slo_met_fraction'"):
        load_scenario_text(base + "gate: [open_loop.slo_met_fraction]\n", "g.yaml", env={})


def test_slots_serve_first_come_first_served_and_say_when_a_slot_freed():
    async def go():
        slots = Slots(1)
        assert await slots.acquire() is None  # free at once
        waiters = [asyncio.ensure_future(slots.acquire()) for _ in range(3)]
        await asyncio.sleep(0)
        assert not any(w.done() for w in waiters)
        slots.release(111)
        await asyncio.sleep(0)
        assert [w.done() for w in waiters] == [True, False, False] and waiters[0].result() == 111
        waiters[1].cancel()  # a waiter that gives up passes its turn on
        await asyncio.sleep(0)
        slots.release(222)
        await asyncio.sleep(0)
        assert waiters[2].result() == 222
        slots.release(333)
        assert slots.free == 1 and await slots.acquire() is None

    asyncio.run(go())


def _lagged(lags_ms, warmup=False, phase="rate_4"):
    out = []
    for i, lag in enumerate(lags_ms):
        r = make_record(
            workload="open_loop", phase=phase, index=i, sent_ns=(1000 + 100 * i) * MS + int(lag * MS), warmup=warmup
        )
        r.scheduled_ns = (1000 + 100 * i) * MS
        out.append(r)
    return out


def test_lag_figures_flag_a_client_that_fell_behind():
    kept = lag_figures(_lagged([0.01] * 99 + [0.5]))
    assert kept["client_bound"] is False and kept["lag_n"] == 100
    assert kept["achieved_rps"] == pytest.approx(10.0, rel=1e-3)  # a send every 100 ms
    behind = lag_figures(_lagged([0.01] * 90 + [3.0] * 10))
    assert behind["client_bound"] is True and behind["lag_p99_ms"] == pytest.approx(3.0)
    assert lag_figures(_lagged([0.01] * 90 + [3.0] * 10), limit_ms=5.0)["client_bound"] is False
    assert lag_figures(_lagged([9.0] * 5, warmup=True))["lag_n"] == 0  # warm-up sends are left out
    assert lag_figures(_lagged([9.0] * 5, warmup=True))["client_bound"] is None


def test_slo_attainment_goodput_and_the_percentile():
    slo = SLO(ttft_ms=100, tpot_ms=20)
    rs = (
        [make_record(ttft_ms=50, output_tokens=5, itl_ms=10) for _ in range(6)]  # meets both
        + [make_record(ttft_ms=150, output_tokens=5, itl_ms=10)]  # TTFT over
        + [make_record(ttft_ms=50, output_tokens=5, itl_ms=30)]  # TPOT over
        + [make_record(ttft_ms=50, output_tokens=1)]  # no TPOT: meets the TPOT limit
        + [make_failed()]
    )  # meets nothing
    f = slo_figures(rs, slo, 90, window_s=2.0)
    assert (f["slo_n"], f["slo_good"]) == (10, 7)
    assert f["slo_met_fraction"] == pytest.approx(0.7) and f["goodput_rps"] == pytest.approx(3.5)
    assert f["ttft_ms_slo_met_fraction"] == pytest.approx(0.8) and f["tpot_ms_slo_met_fraction"] == pytest.approx(0.8)
    assert f["slo_percentile_met"] is False  # p90 counts the failed request as infinitely slow
    assert slo_figures(rs[:6] + rs[8:9], slo, 99, window_s=1.0)["slo_percentile_met"] is True
    assert slo_figures(rs, None, 90, 1.0) == {}
    assert slo_figures([make_record(warmup=True)], slo, 90, 1.0)["slo_n"] == 0  # warm-up left out


def test_the_knee_is_the_highest_point_below_the_first_miss():
    assert knee([(4.0, True), (1.0, True), (16.0, False), (8.0, True)]) == 8.0
    assert knee([(1.0, True), (2.0, False), (4.0, True)]) == 1.0  # a lucky point past a miss is no knee
    assert knee([(1.0, False), (2.0, True)]) is None  # none met: null, never 0
    assert knee([(1.0, True), (2.0, None)]) == 1.0
    assert knee([]) is None


def test_the_summary_keeps_each_points_figures_and_derives_the_knee():
    cfg = workload(kind="open_loop", rate=[1, 2, 4], duration_s=3, warmup_s=1, slo={"ttft_ms": 200})
    records = []
    for repeat in (0, 1):
        for phase, ttft in (("rate_1", 100), ("rate_2", 150), ("rate_4", 400)):
            for i in range(5):
                r = make_record(
                    workload="open_loop",
                    phase=phase,
                    repeat=repeat,
                    index=i,
                    ttft_ms=ttft,
                    sent_ns=(1000 + 10 * i) * MS,
                )
                r.scheduled_ns = r.sent_ns
                records.append(r)
    w = summarize(records, {"open_loop": "open_loop"}, {"open_loop": cfg})["workloads"]["open_loop"]
    f = w["phases"]["rate_2"]["figures"]
    assert f["sweep_axis"] == "rate" and f["sweep_value"] == 2.0 and f["offered_rps"] == 2.0
    # 10 good over two repeats' measured windows of 2 s each (not over one: repeats are not load)
    assert f["slo_percentile_met"] is True and f["goodput_rps"] == pytest.approx(10 / 4.0)
    assert w["phases"]["rate_4"]["figures"]["slo_percentile_met"] is False
    assert w["derived"]["knee_rate"] == 2.0 and w["derived"]["knee_concurrency"] is None
    assert w["derived"]["slo_met_fraction"] == pytest.approx(2 / 3)
    assert w["derived"]["client_bound"] == 0.0
    if (
        "derived_by_repeat" in w
    ):  # the summary's per-repeat figures (harness.analysis.summary.by_repeat) get the config too
        assert w["derived_by_repeat"]["knee_rate"] == [2.0, 2.0]  # one per repeat: compare has n = repeats
    # without the config (an old caller): the schedule figures stay, the SLO ones are not made up
    bare = summarize(records, {"open_loop": "open_loop"})["workloads"]["open_loop"]
    assert "lag_p99_ms" in bare["phases"]["rate_2"]["figures"] and bare["derived"]["knee_rate"] is None


def test_the_step_cost_grows_with_the_batch_and_is_a_sim_flag():
    shape = load_model_shape(MODELS / "llama-tiny")
    steep = CostModel.for_model(shape, 1, "kernel", "page_first", 1.0, step_ms_per_request=2.0)
    flat = CostModel.for_model(shape, 1, "kernel", "page_first", 1.0, step_ms_per_request=0.0)
    assert steep.decode_s(10, 0, 0) - steep.decode_s(1, 0, 0) == pytest.approx(9 * 0.002)
    assert flat.decode_s(10, 0, 0) == flat.decode_s(1, 0, 0)
    assert CostModel.for_model(shape, 1, "kernel", "page_first", 1.0).decode_per_req_s == pytest.approx(0.0001)
    assert parse_args(["--model-path", "m", "--sim-step-ms-per-request", "3"]).step_ms_per_request == 3.0
    assert parse_args(["--model-path", "m", "--sim-step-ms-per-request", "-1"]).step_ms_per_request == 0.0


# -------------------------------------------------------------------------------- simulator


def test_requests_go_out_on_their_schedule_with_warmup_left_out():
    w = workload(
        kind="open_loop", arrivals="constant", rate=20, duration_s=1.5, warmup_s=0.5, prompt_tokens=200, output_tokens=2
    )
    with sim() as s:
        outcome, records = run_on(s, [w])
    assert outcome.ok and len(records) == 30
    records.sort(key=lambda r: r.index)
    sched = [r.scheduled_ns for r in records]
    assert all(b - a == 50 * MS for a, b in zip(sched, sched[1:]))  # the clock, exactly
    assert all(r.sent_ns >= r.scheduled_ns for r in records)  # never before its instant
    assert [r.warmup for r in records] == [True] * 10 + [False] * 20
    assert {r.phase for r in records} == {"rate_20"}
    f = summary_of(records, [w])["open_loop"]["phases"]["rate_20"]
    assert f["n"] == 20 and f["n_warmup"] == 10 and f["figures"]["lag_n"] == 20
    assert f["figures"]["client_bound"] == (f["figures"]["lag_p99_ms"] > 1.0)


def test_the_cap_bounds_requests_in_flight_and_shows_as_a_lower_achieved_rate():
    w = workload(
        kind="open_loop",
        arrivals="constant",
        rate=200,
        max_concurrency=2,
        duration_s=0.3,
        prompt_tokens=3000,
        output_tokens=4,
    )
    with sim(time_scale=0.5) as s:
        outcome, records = run_on(s, [w])
    assert outcome.ok and len(records) == 60
    assert max_in_flight(records) <= 2
    fig = summary_of(records, [w])["open_loop"]["phases"]["rate_200"]["figures"]
    assert fig["achieved_rps"] < fig["offered_rps"] / 2  # the server, not the schedule, set the pace
    # a request that waited for a slot is due when the slot freed, so the lag stays the client's own
    waited = [r for r in records if r.scheduled_ns in {o.done_ns for o in records}]
    assert len(waited) > 30


def test_a_closed_loop_sends_each_next_request_when_the_last_finished():
    w = workload(kind="open_loop", max_concurrency=[1, 3], duration_s=0.6, prompt_tokens=100, output_tokens=3)
    with sim() as s:
        outcome, records = run_on(s, [w])
    assert outcome.ok and {r.phase for r in records} == {"conc_1", "conc_3"}
    one = sorted((r for r in records if r.phase == "conc_1"), key=lambda r: r.sent_ns)
    assert len(one) > 3 and all(b.scheduled_ns == a.done_ns for a, b in zip(one, one[1:]))
    assert max_in_flight(one) == 1
    three = [r for r in records if r.phase == "conc_3"]
    assert max_in_flight(three) == 3


def _sweep_knee(time_scale: float, *extra: str, **fields) -> dict:
    with sim(65536, *extra, time_scale=time_scale) as s:
        outcome, records = run_on(s, [workload(**fields)])
    assert outcome.ok, outcome
    return summary_of(records, [workload(**fields)])["open_loop"]


@pytest.mark.slow  # 2 x 3 rates x 3 s of real time; the knee on a live sim is test_the_step_cost_knob_...
def test_the_knee_moves_down_when_the_simulated_cost_model_doubles():
    """A rate sweep (2, 8, 32 req/s of 2000-token prompts, TTFT p90 <= 320 ms): at --sim-time-scale
    2 the server keeps up with 8 req/s, at 4 (every modelled duration doubled) only with 2. The SLO
    sits between the two runs' p90 at 8 req/s (~2x margin each way on an idle machine)."""
    sweep = dict(
        kind="open_loop",
        rate=[2, 8, 32],
        duration_s=2.5,
        warmup_s=0.5,
        prompt_tokens=2000,
        output_tokens=1,
        slo={"ttft_ms": 320},
    )
    fast, slow = _sweep_knee(2.0, **sweep), _sweep_knee(4.0, **sweep)
    p90 = {
        name: {ph: p["metrics"]["ttft_ms"]["p90"] for ph, p in w["phases"].items()}
        for name, w in (("x2", fast), ("x4", slow))
    }
    assert fast["derived"]["knee_rate"] is not None, p90
    assert slow["derived"]["knee_rate"] is None or slow["derived"]["knee_rate"] < fast["derived"]["knee_rate"], p90
    assert fast["derived"]["goodput_rps"] > slow["derived"]["goodput_rps"], p90


def test_the_step_cost_knob_gives_tpot_a_concurrency_knee():
    sweep = dict(
        kind="open_loop",
        max_concurrency=[1, 8],
        duration_s=1.2,
        warmup_s=0.2,
        prompt_tokens=100,
        output_tokens=16,
        slo={"tpot_ms": 25},
        # the median: on a loaded box a few of conc_8's requests wait on the client (CLIENT-BOUND,
        # lag ~40 ms), which moved the flat server's p90 TPOT past the limit and its knee to 1
        slo_percentile=50,
    )
    with sim(65536, "--sim-step-ms-per-request", "5", time_scale=1.0) as s:
        assert s.info["sim"]["step_ms_per_request"] == 5.0
        outcome, records = run_on(s, [workload(**sweep)])
    assert outcome.ok
    steep = summary_of(records, [workload(**sweep)])["open_loop"]
    with sim(65536, "--sim-step-ms-per-request", "0", time_scale=1.0) as s:
        outcome, records = run_on(s, [workload(**sweep)])
    assert outcome.ok
    flat = summary_of(records, [workload(**sweep)])["open_loop"]
    tpot = {
        name: {ph: p["metrics"]["tpot_ms"]["p50"] for ph, p in w["phases"].items()}
        for name, w in (("steep", steep), ("flat", flat))
    }
    # 4 ms + 5 ms per running request: ~9 ms at 1, ~44 ms at 8; without the knob ~4 ms at both
    assert tpot["steep"]["conc_8"] > 2.5 * tpot["steep"]["conc_1"], tpot
    assert steep["derived"]["knee_concurrency"] == 1.0 and flat["derived"]["knee_concurrency"] == 8.0, tpot


def test_a_client_that_falls_behind_is_reported_client_bound(caplog):
    """Forced past the limit: the event loop is blocked 4 ms of every 6, so most requests go out
    late. The run must say so (phase figures, derived figure, console) rather than hide it."""
    import time as _time

    async def hog():
        while True:
            _time.sleep(0.004)  # noqa: ASYNC251 - blocks the loop the sender runs on
            await asyncio.sleep(0.002)

    w = workload(kind="open_loop", arrivals="constant", rate=100, duration_s=1.0, prompt_tokens=100, output_tokens=1)
    with sim() as s, caplog.at_level(logging.WARNING):
        outcome, records = run_on(s, [w], during=hog)
    assert outcome.ok
    summary = summary_of(records, [w])["open_loop"]
    assert summary["phases"]["rate_100"]["figures"]["client_bound"] is True
    assert summary["derived"]["client_bound"] == 1.0 and summary["derived"]["schedule_lag_p99_ms"] > 1.0
    assert "open_loop/rate_100 is CLIENT-BOUND" in caplog.text

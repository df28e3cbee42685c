"""multi_turn_clients: N chat clients x rounds (bench_multiturn). Each round's prompt is the
conversation so far plus a new turn; think time, a per-client rate or a cap on requests in
flight pace them; conversations end at max_context_tokens. On the simulator with a GPU pool the
conversations outgrow: later rounds are host-tier hits with HiCache ON and recomputed OFF."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from harness.analysis.summary import summarize
from harness.workloads.kinds.multi_turn_clients import first_host_round, ttft_growth
from tests.factories import MS, make_record
from tests.sim_workloads import max_in_flight, run_on, sim, summary_of, workload

CLIENTS = dict(kind="multi_turn_clients", clients=6, rounds=6, first_turn_tokens=600, turn_tokens=200, output_tokens=16)


def by_client(records):
    out = {}
    for r in sorted(records, key=lambda r: int(r.phase[5:])):
        out.setdefault(r.index, []).append(r)
    return out


def test_config_sizes_and_pace():
    w = workload(**CLIENTS)
    # the last round's prompt: 600 + 5 x (16 + 200), and its output
    assert w.full_context_tokens(4096) == 1680 and w.longest_request_tokens(4096) == 1696
    capped = workload(**CLIENTS, max_context_tokens=1200)
    assert capped.longest_request_tokens(4096) == 1200
    assert workload(**CLIENTS, max_context_tokens="0.25x pool").longest_request_tokens(4096) == 1024
    with pytest.raises(ValidationError, match="think_time_s or client_rate"):
        workload(**CLIENTS, think_time_s=1, client_rate=2)


def test_figures_per_round():
    def rec(k, ttft, device, host):
        return make_record(
            workload="m",
            phase=f"round{k}",
            ttft_ms=ttft,
            prompt_tokens=1000,
            cached_tokens=device + host,
            cached_device=device,
            cached_host=host,
        )

    records = [rec(1, 100, 0, 0), rec(2, 40, 900, 0), rec(3, 60, 300, 700), rec(4, 80, 0, 1000)]
    w = summarize(records, {"m": "multi_turn_clients"})["workloads"]["m"]
    assert first_host_round(w["phases"]) == 3.0  # host tokens outnumber GPU tokens from round 3
    assert ttft_growth(w["phases"]) == pytest.approx(0.8)
    assert w["derived"]["later_rounds_cached_fraction"] == pytest.approx((0.9 + 1.0 + 1.0) / 3)
    assert w["derived"]["later_rounds_host_fraction"] == pytest.approx((0 + 0.7 + 1.0) / 3)
    assert first_host_round({"round1": {"hits": {"host_tokens": 0, "device_tokens": 5}}}) is None


def test_later_rounds_come_from_the_host_tier_with_hicache_and_are_recomputed_without():
    w = workload(**CLIENTS, think_time_s=0.02)
    results = {}
    for arm, extra in (("on", ("--enable-hierarchical-cache", "--hicache-ratio", "4")), ("off", ())):
        with sim(4096, *extra, time_scale=0.05) as s:
            outcome, records = run_on(s, [w])
        assert outcome.ok and len(records) == 36
        results[arm] = (records, summary_of(records, [w])["multi_turn_clients"])
    records, on = results["on"]
    for rounds in by_client(records).values():  # each round: the conversation so far + a new turn
        assert [r.phase for r in rounds] == [f"round{k}" for k in range(1, 7)]
        assert all(b.prompt_len == a.prompt_len + 16 + 200 for a, b in zip(rounds, rounds[1:]))
        # the next round is due one think time after the answer came, and never sent before that
        assert all(
            b.scheduled_ns == a.done_ns + 20 * MS and b.sent_ns >= b.scheduled_ns for a, b in zip(rounds, rounds[1:])
        )
    _, off = results["off"]
    hits = {arm: {ph: p["hits"]["host_tokens"] for ph, p in s["phases"].items()} for arm, (_, s) in results.items()}
    assert hits["on"]["round1"] == 0 and sum(hits["on"][f"round{k}"] for k in range(3, 7)) > 0, hits
    assert all(v == 0 for v in hits["off"].values()), hits
    assert on["derived"]["first_host_round"] is not None and off["derived"]["first_host_round"] is None
    assert on["derived"]["later_rounds_cached_fraction"] > off["derived"]["later_rounds_cached_fraction"] + 0.3
    assert all("lag_p99_ms" in p["figures"] for p in on["phases"].values())


def test_a_conversation_ends_at_its_context_and_the_cap_holds():
    w = workload(**CLIENTS, max_context_tokens=1100, max_parallel=2, gaps="exponential", think_time_s=0.01)
    with sim(time_scale=0.05) as s:
        outcome, records = run_on(s, [w])
    assert outcome.ok
    # rounds 1-3 fit (600, 816, 1032 tokens + 16 out), round 4 (1248) would not
    assert sorted({r.phase for r in records}) == ["round1", "round2", "round3"] and len(records) == 18
    assert max(r.prompt_len + 16 for r in records) <= 1100
    assert max_in_flight(records) <= 2


def test_a_client_rate_paces_each_clients_rounds():
    w = workload(**{**CLIENTS, "clients": 3, "rounds": 4}, client_rate=5.0)
    with sim(time_scale=0.05) as s:
        outcome, records = run_on(s, [w])
    assert outcome.ok and len(records) == 12
    for rounds in by_client(records).values():
        for a, b in zip(rounds, rounds[1:]):
            # due one gap (200 ms) after the last round was due, or when its answer came if later
            assert b.scheduled_ns == max(a.scheduled_ns + 200 * MS, a.done_ns)

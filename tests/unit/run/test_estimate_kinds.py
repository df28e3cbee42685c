"""Each workload kind's estimate hook (`WorkloadKind.estimate`): estimate.py names no kind, every
kind declares one, and the kinds that send on a clock (open_loop, multi_turn_clients,
dataset_replay) and prefix_sharing_fanout get real numbers, worked out by hand below."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.run.estimate import estimate_run
from harness.scenario import load_scenario
from harness.workloads import kinds
from tests.conftest import write_scenario

ROOT = Path(__file__).resolve().parents[3]
DATASETS = ROOT / "tests" / "fixtures" / "datasets"

# P = 10,000 tokens; ON at ratio 2 -> H = 20,001. One repeat.
HEAD = """
name: est_kinds
seed: 0
repeats: {repeats}
server:
  backend: sim
  model_path: models/llama-tiny
  args: {{--max-total-tokens: 10000, --context-length: 16384}}
  liveness_idle_s: 0
  sim: {{mem_available_gib: 64}}
sampling: {{enabled: false}}
variants:
  - name: "off"
  - name: "on"
    hicache: {{ratio: 2, write_policy: write_through}}
workloads:
"""


def _estimate(tmp_path, workloads: str, repeats: int = 1, **speeds):
    scn = load_scenario(write_scenario(tmp_path, HEAD.format(repeats=repeats) + workloads))
    return estimate_run(scn, prefill_tok_s=speeds.pop("prefill", 1000.0), **speeds)


def _work(run, variant: str = "off", i: int = 0):
    return next(v for v in run.variants if v.name == variant).work[i]


def test_every_kind_declares_an_estimate_and_estimate_py_names_none():
    assert all(k.estimate is not None for k in kinds().values()), [n for n, k in kinds().items() if k.estimate is None]
    text = (ROOT / "harness" / "run" / "estimate.py").read_text()
    for name in kinds():
        assert f"harness.workloads.kinds.{name}" not in text and f"harness.workloads.{name}" not in text


def test_open_loop_counts_rate_times_duration_and_its_clock(tmp_path):
    run = _estimate(
        tmp_path,
        """
  - kind: open_loop
    rate: [2, 4]
    duration_s: 10
    prompt_tokens: 1000
    prefix_tokens: 400
    prefixes: 2
    output_tokens: 8
""",
        repeats=2,
    )
    w = _work(run)
    # 2 x 10 + 4 x 10 = 60 requests a repeat, 2 repeats
    assert w.requests == 120 and w.sent_tokens == 120 * 1000
    # each computes its own 600 tokens; the two 400-token prefixes once (they fit P): 60 x 600 + 800
    assert w.computed_tokens == (60 * 600 + 800) * 2 and w.expected_tokens == w.computed_tokens
    assert w.clock_s == 2 * 10 * 2  # two points of 10 s, two repeats
    v = next(v for v in run.variants if v.name == "off")
    # the serving (73,600 tokens at 1000 tok/s = 73.6 s) is longer than the clock (40 s)
    assert v.seconds == pytest.approx(73.6 + v.overhead_s)
    slow_clock = _estimate(tmp_path / "b", "  - {kind: open_loop, rate: 1, duration_s: 100, prompt_tokens: 100}\n")
    v = next(v for v in slow_clock.variants if v.name == "off")
    assert v.seconds == pytest.approx(100 + v.overhead_s)  # 10,000 tokens take 10 s: the clock (100 s) wins
    assert not any("no estimate" in m for m in v.all_warnings)


def test_an_open_loop_rate_past_the_stated_speed_is_named(tmp_path):
    run = _estimate(
        tmp_path,
        """
  - kind: open_loop
    rate: [1, 8]
    duration_s: 5
    prompt_tokens: 500
    output_tokens: 1
""",
    )
    w = _work(run)
    assert w.requests == 45 and w.clock_s == 10
    # 8 req/s x 500 tokens = 4000 tok/s against 1000 tok/s stated: past the knee; 1 req/s is not
    assert any(m.startswith("rate_8:") and "queues" in m for m in w.warnings), w.warnings
    assert not any(m.startswith("rate_1:") for m in w.warnings)


def test_a_closed_loop_is_counted_from_the_stated_speeds(tmp_path):
    run = _estimate(
        tmp_path,
        """
  - kind: open_loop
    max_concurrency: 4
    duration_s: 10
    prompt_tokens: 500
    output_tokens: 11
""",
        decode_tok_s=100.0,
    )
    # one request: 0.5 s prefill + 10 tokens at 100 tok/s = 0.6 s; 4 senders: 6.67 req/s, but
    # prefill alone caps it at 2 req/s -> 20 requests in 10 s
    assert _work(run).requests == 20


def test_multi_turn_clients_rounds_context_limit_and_the_host_window(tmp_path):
    text = """
  - kind: multi_turn_clients
    clients: 4
    rounds: 5
    first_turn_tokens: 1000
    turn_tokens: 200
    output_tokens: 50
    think_time_s: 2
"""
    run = _estimate(tmp_path, text)
    off, on = _work(run, "off"), _work(run, "on")
    # round r sends 1000 + (r-1) x 250: 1000, 1250, 1500, 1750, 2000 -> 7500 per client
    assert off.requests == 20 and off.sent_tokens == 4 * 7500
    # all conversations: 4 x (2000 + 50) = 8200 <= P: every history cached, each round its new turn
    assert off.computed_tokens == 4 * (1000 + 4 * 250)
    assert off.idle_s == 4 * 2.0  # four think times between five rounds
    limited = _estimate(tmp_path / "b", text + "    max_context_tokens: 1600\n")
    assert _work(limited).requests == 4 * 3  # 1500 + 50 fits 1600, 1750 + 50 does not
    big = _estimate(tmp_path / "c", text.replace("clients: 4", "clients: 8"))
    off, on = _work(big, "off"), _work(big, "on")
    # 8 x 2050 = 16,400 > P (10,000) but <= H (20,001): ON expects host-tier hits, OFF recomputes
    assert off.computed_tokens == off.sent_tokens == 8 * 7500
    assert on.expected_tokens == 8 * 2000 and on.computed_tokens == on.sent_tokens
    assert not any("stays on the GPU" in m for m in on.warnings)


def test_dataset_replay_reads_the_trace_and_runs_on_its_clock(tmp_path):
    rows = [json.loads(line) for line in (DATASETS / "mooncake_mini.jsonl").read_text().splitlines() if line.strip()]
    first = rows[:20]
    run = _estimate(
        tmp_path,
        f"""
  - kind: dataset_replay
    format: mooncake
    path: {DATASETS / "mooncake_mini.jsonl"}
    arrivals: trace
    speed: 2
    max_requests: 20
    output_tokens: 4
""",
    )
    w = _work(run)
    assert w.requests == 20 and w.sent_tokens == sum(r["input_length"] for r in first)
    assert w.computed_tokens == w.sent_tokens  # the upper bound
    assert w.expected_tokens < w.sent_tokens  # shared leading hash ids are computed once
    assert w.clock_s == pytest.approx((first[-1]["timestamp"] - first[0]["timestamp"]) / 1000 / 2)
    swept = _estimate(
        tmp_path / "b",
        f"""
  - kind: dataset_replay
    format: sharegpt
    path: {DATASETS / "sharegpt_mini.json"}
    rate: [5, 10]
    max_requests: 10
    mode: token_ids
""",
    )
    s = _work(swept)
    assert s.requests == 20 and s.clock_s == pytest.approx(10 / 5 + 10 / 10)
    assert any("word counts" in m for m in s.notes)
    missing = _estimate(
        tmp_path / "c", "  - {kind: dataset_replay, format: mooncake, path: nowhere.jsonl, arrivals: trace}\n"
    )
    assert _work(missing).sent_tokens is None and "cannot read the dataset" in _work(missing).warnings[0]


def test_prefix_sharing_fanout_computes_the_prefix_once(tmp_path):
    run = _estimate(
        tmp_path,
        """
  - kind: prefix_sharing_fanout
    prefix_tokens: 2000
    suffix_tokens: 100
    fanout: 8
""",
    )
    w = _work(run)
    assert w.requests == 9 and w.sent_tokens == 2000 + 8 * 2100 and w.computed_tokens == 2000 + 8 * 100

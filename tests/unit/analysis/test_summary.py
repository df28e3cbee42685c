"""summarize(): statistics per workload/phase, exclusions, derived ratios, failed variants."""

import json
from pathlib import Path

import pytest

from harness.analysis.summary import failed, stats, summarize, summary_rows
from harness.store import versions
from harness.store.summary import Summary
from tests.factories import MS, make_failed, make_record


def test_stats_known_values():
    s = stats([1, 2, 3, 4, None, float("nan")])
    assert s == {
        "n": 4,
        "mean": 2.5,
        "p50": 2.5,
        "p90": pytest.approx(3.7),
        "p95": pytest.approx(3.85),
        "p99": pytest.approx(3.97),
        "min": 1.0,
        "max": 4.0,
    }
    assert stats([]) is None and stats([None]) is None


def test_warmup_and_errors_excluded_and_counted():
    rs = [
        make_record(workload="cold_prefill", phase="cold", ttft_ms=t, index=i)
        for i, t in enumerate([100.0, 200.0, 300.0])
    ]
    rs.append(make_record(workload="cold_prefill", phase="warmup", ttft_ms=5000.0, warmup=True))
    rs.append(make_failed(workload="cold_prefill", phase="cold", error="timeout", index=9))
    s = summarize(rs)
    ph = s["workloads"]["cold_prefill"]["phases"]["cold"]
    assert ph["n"] == 3 and ph["n_errors"] == 1 and ph["errors"] == {"timeout": 1}
    assert ph["metrics"]["ttft_ms"]["p50"] == pytest.approx(200.0)
    assert ph["metrics"]["ttft_ms"]["max"] == pytest.approx(300.0)
    assert ph["metrics"]["decode_tok_s"] is None  # one token each: nothing to measure, not 0
    assert s["workloads"]["cold_prefill"]["phases"]["warmup"]["n_warmup"] == 1
    assert s["n_requests"] == 4 and s["n_errors"] == 1
    json.dumps(s)  # JSON-ready


def test_parallel_prefixes_second_pass_speedup():
    rs = []
    for p, ttft in ((1, 500.0), (2, 125.0)):
        base = p * 10_000 * MS
        rs += [
            make_record(
                workload="parallel_prefixes",
                phase=f"pass{p}",
                index=i,
                sent_ns=base,
                ttft_ms=ttft * (i + 1) / 8,
                concurrency_group=f"parallel_prefixes/pass{p}/r0",
                cached_tokens=0 if p == 1 else 900,
                cached_device=0 if p == 1 else 100,
                cached_host=0 if p == 1 else 800,
            )
            for i in range(8)
        ]
    s = summarize(rs)["workloads"]["parallel_prefixes"]
    w1 = s["phases"]["pass1"]["metrics"]["pass_wall_s"]["p50"]
    w2 = s["phases"]["pass2"]["metrics"]["pass_wall_s"]["p50"]
    assert w1 == pytest.approx(0.5) and w2 == pytest.approx(0.125)
    assert s["derived"]["second_pass_speedup"] == pytest.approx(4.0)
    assert s["phases"]["pass2"]["hits"]["requests_with_host_hit"] == 8
    assert s["phases"]["pass1"]["hits"]["requests_with_host_hit"] == 0
    assert s["phases"]["pass2"]["metrics"]["host_hit_fraction"]["mean"] == pytest.approx(0.8)


def test_repeat_prefill_speedups_and_filler():
    rs = [
        make_record(workload="rp", phase="cold", ttft_ms=100.0),
        make_record(workload="rp", phase="repeat_device", ttft_ms=10.0, cached_tokens=990),
        make_record(workload="rp", phase="evict", ttft_ms=100.0),
        make_record(
            workload="rp", phase="repeat_after_evict", ttft_ms=20.0, cached_tokens=990, cached_device=0, cached_host=990
        ),
    ]
    s = summarize(rs, {"rp": "repeat_prefill"})["workloads"]["rp"]
    assert s["derived"]["device_speedup"] == pytest.approx(10.0)
    assert s["derived"]["host_speedup"] == pytest.approx(5.0)
    assert s["derived"]["prefill_tok_s"] == pytest.approx(10000.0)
    assert s["phases"]["evict"]["filler"] is True and s["phases"]["cold"]["filler"] is False


def test_short_ttft_interference_and_decode():
    rs = [make_record(workload="s", phase="alone", ttft_ms=t) for t in (10.0, 12.0, 14.0)]
    rs += [make_record(workload="s", phase="during_long", ttft_ms=t) for t in (30.0, 36.0, 42.0)]
    rs += [make_record(workload="d", phase="decode", output_tokens=11, itl_ms=20.0)]
    s = summarize(rs, {"s": "short_ttft", "d": "decode"})["workloads"]
    assert s["s"]["derived"]["interference"] == pytest.approx(3.0)
    assert s["d"]["derived"]["decode_tok_s"] == pytest.approx(50.0)
    assert s["d"]["phases"]["decode"]["metrics"]["itl_ms"]["n"] == 10  # pooled chunk gaps


def test_failed_variant_is_null_not_zero():
    f = failed("server_died")
    assert f["workloads"] is None and f["cause"] == "server_died"


def test_summary_rows_flat():
    summary = summarize([make_record(workload="w", phase="cold")], {"w": "cold_prefill"})
    typed = Summary.from_json(Path("summary.json"), {"schema_version": versions.CURRENT[versions.SUMMARY], **summary})
    rows = summary_rows("on", typed)
    ttft = next(r for r in rows if r["metric"] == "ttft_ms" and r["phase"] == "cold")
    assert ttft["unit"] == "ms" and ttft["higher_is_better"] is False and ttft["p50"] == pytest.approx(100)
    derived = [r for r in rows if r["phase"] == "*"]
    assert {r["metric"] for r in derived} >= {"prefill_tok_s"}


def test_derived_figures_per_repeat():
    """The kind's declarations applied to each repeat's records alone, aligned with ``repeats``;
    the pooled figure is unchanged (additive)."""
    rs = []
    for rep, (alone, during) in enumerate(((10.0, 30.0), (10.0, 20.0), (20.0, 20.0))):
        rs += [make_record(workload="s", phase="alone", repeat=rep, index=i, ttft_ms=alone) for i in range(2)]
        rs += [make_record(workload="s", phase="during_long", repeat=rep, index=i, ttft_ms=during) for i in range(2)]
    s = summarize(rs, {"s": "short_ttft"})
    w = s["workloads"]["s"]
    assert s["repeats"] == [0, 1, 2]
    assert w["derived_by_repeat"]["interference"] == pytest.approx([3.0, 2.0, 1.0])
    assert w["derived"]["interference"] == pytest.approx(2.0)  # pooled medians: 20 / 10
    assert w["history_stats_by_repeat"] == {
        "alone.ttft_ms_p50": pytest.approx([10.0, 10.0, 20.0]),
        "during_long.ttft_ms_p50": pytest.approx([30.0, 20.0, 20.0]),
    }
    json.dumps(s)


def test_per_pass_walls_and_a_repeat_without_the_phase():
    """parallel_prefixes: one pass wall per repeat through the concurrency groups; a repeat that
    lacks a phase has null for the figure (never 0)."""
    rs = []
    for rep, (w1, w2) in enumerate(((400.0, 100.0), (600.0, 100.0))):
        for p, ttft in ((1, w1), (2, w2)):
            rs += [
                make_record(
                    workload="pp",
                    phase=f"pass{p}",
                    repeat=rep,
                    index=i,
                    sent_ns=(rep * 100 + p * 10) * 1000 * MS,
                    ttft_ms=ttft,
                    concurrency_group=f"pp/pass{p}/r{rep}",
                )
                for i in range(2)
            ]
    rs += [make_record(workload="pp", phase="pass1", repeat=2, index=0, ttft_ms=500.0, concurrency_group="pp/pass1/r2")]
    w = summarize(rs, {"pp": "parallel_prefixes"})["workloads"]["pp"]
    assert w["derived_by_repeat"]["second_pass_speedup"] == pytest.approx([4.0, 6.0, None])

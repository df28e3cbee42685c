"""Metric declarations and their formulas: definitions on hand-built records (tests/factories.py),
and — generated from the declaration list — the per-record path (what the summary uses) and the
vectorised path (harness.analysis.frames, what compare and the report use) agreeing for every metric, on
the golden runs' records and on edge cases."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import pytest

from harness.analysis.frames import groups_frame, requests_frame
from harness.measures import metrics as m
from harness.store.records import RequestRecord
from harness.workloads import derived_figures
from tests.conftest import GOLDEN_RUNS
from tests.factories import MS, make_failed, make_record


def value(name: str, r: RequestRecord) -> float | None:
    return m.METRICS[name].of_record(r)


def test_ttft_e2e_and_prefill_rates():
    r = make_record(ttft_ms=250.0, output_tokens=1, prompt_tokens=75000, cached_tokens=0)
    assert value("ttft_ms", r) == pytest.approx(250.0)
    assert value("e2e_ms", r) == pytest.approx(250.0)
    assert value("prefill_total_tok_s", r) == pytest.approx(300000.0)
    assert value("prefill_tok_s", r) == pytest.approx(300000.0)
    hit = make_record(ttft_ms=100.0, prompt_tokens=1000, cached_tokens=900)
    assert value("prefill_tok_s", hit) == pytest.approx(1000.0)  # 100 uncached tokens in 0.1 s
    assert value("prefill_total_tok_s", hit) == pytest.approx(10000.0)


def test_decode_itl_tpot_single_token_chunks():
    r = make_record(ttft_ms=50.0, output_tokens=11, itl_ms=20.0)
    assert value("tpot_ms", r) == pytest.approx(20.0)
    assert value("itl_ms", r) == pytest.approx(20.0)
    assert value("decode_tok_s", r) == pytest.approx(50.0)
    assert value("e2e_ms", r) == pytest.approx(50.0 + 10 * 20.0)
    assert len(m.itl_values_ms(r)) == 10


def test_multi_token_chunks_are_normalised_per_token():
    r = make_record(ttft_ms=10.0, output_tokens=9, itl_ms=5.0, tokens_per_chunk=4)
    # chunks: 4 tokens @10ms, 4 @30ms, 1 @35ms → 5 tokens after the first chunk in 25 ms
    assert r.chunk_new_tokens == [4, 4, 1]
    assert value("tpot_ms", r) == pytest.approx(5.0)
    assert m.itl_values_ms(r) == pytest.approx([5.0, 5.0])
    assert value("itl_ms", r) == pytest.approx(5.0)


def test_one_token_has_no_decode_metrics():
    r = make_record(output_tokens=1)
    assert value("tpot_ms", r) is None and value("decode_tok_s", r) is None and value("itl_ms", r) is None


def test_hit_fractions_and_unreported_tiers():
    r = make_record(prompt_tokens=1000, cached_tokens=800, cached_device=200, cached_host=600)
    assert value("cached_fraction", r) == pytest.approx(0.8)
    assert value("device_hit_fraction", r) == pytest.approx(0.2)
    assert value("host_hit_fraction", r) == pytest.approx(0.6)
    unknown = make_record(prompt_tokens=1000, cached_tokens=800)
    unknown.cached_device = unknown.cached_host = None
    assert value("host_hit_fraction", unknown) is None and value("cached_fraction", unknown) == pytest.approx(0.8)


def test_prompt_tokens_fall_back_to_what_was_sent():
    r = make_record(prompt_tokens=1000)
    r.prompt_tokens, r.prompt_len = None, 500
    assert m.prompt_token_count(r) == 500 and isinstance(m.prompt_token_count(r), int)
    r.prompt_len = 0
    assert m.prompt_token_count(r) is None and value("prefill_total_tok_s", r) is None


def test_group_walls():
    base = 10_000 * MS
    rs = [
        make_record(sent_ns=base + i * MS, ttft_ms=100.0 * (i + 1), concurrency_group="g1", phase="pass1")
        for i in range(4)
    ]
    rs.append(make_record(sent_ns=base, ttft_ms=5.0, concurrency_group="g1", warmup=True))
    (w,) = m.group_walls(rs)
    assert w.n == 4 and w.phase == "pass1"
    assert w.wall_s == pytest.approx((3 * MS + 400 * MS) / 1e9)


def test_every_metric_is_declared_once_with_unit_and_direction():
    assert m.METRICS["ttft_ms"].higher_is_better is False
    assert m.METRICS["prefill_tok_s"].higher_is_better is True
    assert m.METRICS["pass_wall_s"].per == "group"
    assert all(x.unit and x.description and x.per in ("request", "group") for x in m.METRICS.values())
    assert set(m.DERIVATIONS) == set(m.REQUEST_METRICS)
    assert all(x.compared or x.compared_when is None for x in m.METRICS.values())
    # a workload's derived figures live in its kind's declaration, and mean the same there
    for name, d in derived_figures().items():
        if name in m.METRICS:
            assert (d.unit, d.higher_is_better) == (m.METRICS[name].unit, m.METRICS[name].higher_is_better)


# ------------------------------------------------------ both paths agree, for every declared metric


def _edge_cases() -> list[RequestRecord]:
    """Records at the edges of every formula, each metric both defined and undefined somewhere."""
    rs: list[RequestRecord] = []

    def add(r: RequestRecord, **changes) -> None:
        rs.append(dataclasses.replace(r, index=len(rs), **changes))

    add(make_record())  # one chunk, one token
    add(make_record(output_tokens=9, itl_ms=5.0, tokens_per_chunk=4))  # multi-token chunks
    add(make_record(output_tokens=6, itl_ms=4.0, tokens_per_chunk=2, cached_tokens=300))
    add(make_failed())  # no chunks, an error
    add(make_failed("timeout"))
    add(make_record(output_tokens=5, error="server_died"))  # chunks and an error
    add(make_record(prompt_tokens=100, cached_tokens=150))  # cached > prompt
    add(make_record(cached_tokens=None))  # no cache report at all
    add(
        make_record(cached_tokens=800, cached_device=None, cached_host=None), cached_device=None, cached_host=None
    )  # tiers not reported
    add(make_record(cached_tokens=0, cached_host=10, cached_device=5))
    add(make_record(prompt_tokens=1000), prompt_tokens=None, prompt_len=700)  # server count missing
    add(make_record(prompt_tokens=0, ttft_ms=5.0))  # no prompt tokens: fractions undefined
    add(make_record(ttft_ms=0.0))  # TTFT 0: rates undefined
    add(make_record(output_tokens=4, itl_ms=0.0))  # all chunks at once: decode span 0
    r = make_record(output_tokens=3, itl_ms=7.0)
    add(r, chunk_ns=[r.chunk_ns[0] - MS, *r.chunk_ns, r.chunk_ns[-1] + MS], chunk_new_tokens=[0, 1, 1, 1, 0])
    add(make_record(output_tokens=5), done_ns=None)  # tokens but no [DONE]
    # concurrency groups: ok, one with an error, one where nothing finished, a warm-up, two phases
    for i in range(3):
        add(make_record(phase="pass1", concurrency_group="w/pass1/r0", sent_ns=(5 + i) * MS, ttft_ms=50.0 + i))
        add(make_record(phase="pass2", concurrency_group="w/pass2/r0", sent_ns=(9 + i) * MS, ttft_ms=20.0 + i))
        add(
            make_record(
                phase="pass1",
                concurrency_group="w/pass1/r1",
                sent_ns=(1 + i) * MS,
                ttft_ms=30.0,
                error="timeout" if i == 1 else None,
            )
        )
        add(make_failed(phase="pass1", concurrency_group="w/pass1/r2", sent_ns=i * MS))
    add(make_record(phase="pass1", concurrency_group="w/pass1/r0", warmup=True, ttft_ms=1.0))
    return rs


def _golden_requests() -> list[Path]:
    return sorted(GOLDEN_RUNS.glob("*/*/requests.jsonl"))


SOURCES = ["edge_cases", *[str(p.relative_to(GOLDEN_RUNS)) for p in _golden_requests()]]


def _records_and_file(source: str, tmp_path: Path) -> tuple[list[RequestRecord], Path]:
    if source == "edge_cases":
        path = tmp_path / "requests.jsonl"
        recs = _edge_cases()
        path.write_text("".join(r.to_json() + "\n" for r in recs))
        return recs, path
    path = GOLDEN_RUNS / source
    return [RequestRecord.from_json(line) for line in path.read_text().splitlines() if line.strip()], path


def _nan(v: float | None) -> float:
    return math.nan if v is None else v


def per_record_and_vectorised(name: str, recs: list[RequestRecord], path: Path) -> tuple[np.ndarray, np.ndarray]:
    """The metric by both paths, aligned: per request, or per (workload, phase, group) — the
    frame takes a group's phases apart, so the per-record path gets each phase's records."""
    metric = m.METRICS[name]
    req = requests_frame(path, "v")
    if metric.per == "request":
        return np.array([_nan(metric.of_record(r)) for r in recs]), req[name].to_numpy(dtype=float)
    assert metric.per == "group", f"{name}: a new kind of metric needs its two paths compared here"
    phases = {(r.workload, r.phase) for r in recs}
    walls = {
        (w.workload, w.phase, w.group): _nan(w.wall_s)
        for wl, ph in phases
        for w in m.group_walls(r for r in recs if (r.workload, r.phase) == (wl, ph))
    }
    g = groups_frame(req)
    keys = list(zip(g["workload"], g["phase"], g["concurrency_group"]))
    assert set(keys) == set(walls)
    return np.array([walls[k] for k in keys]), g[name].to_numpy(dtype=float)


@pytest.mark.parametrize("source", SOURCES)
@pytest.mark.parametrize("name", list(m.METRICS))
def test_per_record_and_vectorised_paths_agree(name, source, tmp_path):
    recs, path = _records_and_file(source, tmp_path)
    one, many = per_record_and_vectorised(name, recs, path)
    np.testing.assert_array_equal(one, many, err_msg=f"{name} on {source}")  # bit for bit, NaN where undefined
    if source == "edge_cases":  # the edge cases reach both branches of every formula
        assert np.isnan(one).any() and np.isfinite(one).any(), name


def test_ns_past_2_to_the_53(tmp_path):
    """A host up for more than ~104 days: ns timestamps past 2**53 lose their last bits in the
    frames' float64 columns; the per-record path keeps them (integer differences). They agree to
    a few ns."""
    big = 2**54  # float64 steps of 4 ns here
    recs = [make_record(sent_ns=big + i * 3, ttft_ms=1.0 + i, output_tokens=4, itl_ms=1.0) for i in range(5)]
    path = tmp_path / "requests.jsonl"
    path.write_text("".join(r.to_json() + "\n" for r in recs))
    for name in m.REQUEST_METRICS:
        one, many = per_record_and_vectorised(name, recs, path)
        np.testing.assert_allclose(one, many, rtol=1e-5, err_msg=name)

"""Metric derivations from hand-built records (tests/factories.py)."""

import math

import pytest

from harness import metrics as m
from tests.factories import MS, make_failed, make_record


def test_ttft_e2e_and_prefill_rates():
    r = make_record(ttft_ms=250.0, output_tokens=1, prompt_tokens=75000, cached_tokens=0)
    assert m.ttft_ms(r) == pytest.approx(250.0)
    assert m.e2e_ms(r) == pytest.approx(250.0)
    assert m.prefill_total_tok_s(r) == pytest.approx(300000.0)
    assert m.prefill_tok_s(r) == pytest.approx(300000.0)
    hit = make_record(ttft_ms=100.0, prompt_tokens=1000, cached_tokens=900)
    assert m.prefill_tok_s(hit) == pytest.approx(1000.0)  # 100 uncached tokens in 0.1 s
    assert m.prefill_total_tok_s(hit) == pytest.approx(10000.0)


def test_decode_itl_tpot_single_token_chunks():
    r = make_record(ttft_ms=50.0, output_tokens=11, itl_ms=20.0)
    assert m.tpot_ms(r) == pytest.approx(20.0)
    assert m.itl_ms(r) == pytest.approx(20.0)
    assert m.decode_tok_s(r) == pytest.approx(50.0)
    assert m.e2e_ms(r) == pytest.approx(50.0 + 10 * 20.0)
    assert len(m.itl_values_ms(r)) == 10


def test_multi_token_chunks_are_normalised_per_token():
    r = make_record(ttft_ms=10.0, output_tokens=9, itl_ms=5.0, tokens_per_chunk=4)
    # chunks: 4 tokens @10ms, 4 @30ms, 1 @35ms → 5 tokens after the first chunk in 25 ms
    assert r.chunk_new_tokens == [4, 4, 1]
    assert m.tpot_ms(r) == pytest.approx(5.0)
    assert m.itl_values_ms(r) == pytest.approx([5.0, 5.0])


def test_one_token_has_no_decode_metrics():
    r = make_record(output_tokens=1)
    assert m.tpot_ms(r) is None and m.decode_tok_s(r) is None and m.itl_ms(r) is None


def test_hit_fractions_and_unreported_tiers():
    r = make_record(prompt_tokens=1000, cached_tokens=800, cached_device=200, cached_host=600)
    assert m.cached_fraction(r) == pytest.approx(0.8)
    assert m.device_hit_fraction(r) == pytest.approx(0.2)
    assert m.host_hit_fraction(r) == pytest.approx(0.6)
    unknown = make_record(prompt_tokens=1000, cached_tokens=800, cached_device=None, cached_host=None)
    unknown.cached_device = unknown.cached_host = None
    assert m.host_hit_fraction(unknown) is None and m.cached_fraction(unknown) == pytest.approx(0.8)


def test_records_frame_has_one_row_per_request_and_nan_for_missing():
    df = m.records_frame([make_record(index=0), make_failed(index=1)])
    assert len(df) == 2
    assert set(m.REQUEST_METRICS) <= set(df.columns)
    assert df.loc[0, "ttft_ms"] == pytest.approx(100.0)
    assert math.isnan(df.loc[1, "ttft_ms"]) and df.loc[1, "error"] == "server_died"


def test_group_walls():
    base = 10_000 * MS
    rs = [make_record(sent_ns=base + i * MS, ttft_ms=100.0 * (i + 1), concurrency_group="g1",
                      phase="pass1") for i in range(4)]
    rs.append(make_record(sent_ns=base, ttft_ms=5.0, concurrency_group="g1", warmup=True))
    (w,) = m.group_walls(rs)
    assert w.n == 4 and w.phase == "pass1"
    assert w.wall_s == pytest.approx((3 * MS + 400 * MS) / 1e9)


def test_every_metric_declares_unit_and_direction():
    assert m.METRICS["ttft_ms"].higher_is_better is False
    assert m.METRICS["prefill_tok_s"].higher_is_better is True
    assert m.METRICS["pass_wall_s"].per == "group"
    assert set(m.DERIVATIONS) == set(m.REQUEST_METRICS)

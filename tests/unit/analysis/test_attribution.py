"""A host/storage hit's time split (`harness.analysis.attribution.phase_attribution`): queueing
from sglang's meta_info.queue_time where the server sent it (and said so where it did not),
host→device from the sampled load-back seconds, the rest; sglang's storage prefetch waits in its
queue, so a storage read is not taken off twice."""

from __future__ import annotations

import pytest

from harness.analysis.attribution import QUEUE_NOT_REPORTED, phase_attribution
from harness.store.phase_samples import PhaseSamples

SAMPLED = PhaseSamples.from_json(
    {"counter_deltas": {"sglang:load_back_tokens_total": 4000.0, "sglang:load_back_duration_seconds_sum": 0.1}}
)
ROOF = {"hit_requests": 2, "host_tokens": 4000, "storage_tokens": 0, "achieved_ms": 200.0}


def test_the_queueing_sglang_reported_is_split_off_the_rest():
    a = phase_attribution({**ROOF, "queue_ms": 30.0, "queue_reported": 2}, SAMPLED)
    assert a["queue_ms"] == 30.0 and a["queue"] == "sglang's meta_info.queue_time"
    assert a["host_to_device_ms"] == pytest.approx(50.0)  # 0.1 s over 2 hit requests
    assert a["rest_ms"] == pytest.approx(200 - 30 - 50)


def test_without_queue_time_the_split_says_not_reported_and_keeps_it_in_the_rest():
    a = phase_attribution({**ROOF, "queue_ms": None, "queue_reported": 0}, SAMPLED)
    assert a["queue_ms"] is None and a["queue"] == QUEUE_NOT_REPORTED
    assert a["rest_ms"] == pytest.approx(200 - 50)
    # an old summary (before queue_ms existed) reads the same
    assert phase_attribution(ROOF, SAMPLED)["queue"] == QUEUE_NOT_REPORTED


def test_a_partly_reported_phase_names_how_many_hits_had_it():
    a = phase_attribution({**ROOF, "queue_ms": 10.0, "queue_reported": 1}, SAMPLED)
    assert a["queue"] == "sglang's meta_info.queue_time on 1 of 2 hit requests"


def test_a_storage_read_inside_the_queue_is_taken_off_once():
    roof = {**ROOF, "host_tokens": 0, "storage_tokens": 2000, "kv_bytes_per_token": 1e6, "queue_reported": 2}
    sampled = PhaseSamples.from_json(
        {"counter_deltas": {"sglang:load_back_duration_seconds_sum": 0.0}, "storage": {"prefetch_gbs": 100.0}}
    )
    # 2,000 tokens x 1 MB at 100 GB/s = 20 ms, 10 ms a request; sglang's queue of 40 ms holds it
    a = phase_attribution({**roof, "queue_ms": 40.0}, sampled)
    assert a["storage_read_ms"] == pytest.approx(10.0) and a["rest_ms"] == pytest.approx(160.0)
    # the simulator costs it in the batch (queue 0): the read itself comes off
    a = phase_attribution({**roof, "queue_ms": 0.0}, sampled)
    assert a["rest_ms"] == pytest.approx(190.0)

"""Pure: where a host or storage hit's time went, from what sglang 0.5.17 emits, and the hits it
reported but recomputed.

Read from sglang 0.5.17's source (the wheel's ``srt/mem_cache/hiradix_cache.py``,
``srt/managers/schedule_batch.py``, ``srt/observability/metrics_collector.py`` and
``req_time_stats.py``):

- host → device: ``sglang:load_back_tokens_total`` and the ``sglang:load_back_duration_seconds``
  histogram (one observation per finished load-back, `HiRadixCache` on its ack) — the sampler's
  per-phase deltas give the phase's loaded-back tokens and seconds;
- storage read: ``sglang:prefetched_tokens_total`` and the ``sglang:prefetch_bandwidth`` histogram
  (GB/s per prefetch) — the sampler's ``storage.prefetch_gbs``;
- queueing: sglang puts ``queue_time`` (seconds from the scheduler's wait-queue entry to the
  first prefill batch it is in: ``SchedulerReqTimeStats.get_queueing_time``) and
  ``forward_entry_time`` / ``prefill_finished_time`` into a request's ``meta_info`` only with
  ``--enable-metrics`` (``TokenizerManager`` merges them into every output while
  ``enable_metrics``), and only on ``/generate`` (the OpenAI endpoints keep a few counts of
  ``meta_info``). The client keeps it as ``RequestRecord.queue_time_s``; the roofline's
  ``queue_ms`` is its median over the hit units (`harness.measures.roofline.unit_queue_s`). A phase
  whose hit requests came without it says so (``queue``), never a guess. The storage prefetch
  runs while a request waits (the scheduler skips a request whose prefetch is not done), so on
  sglang the storage read is inside ``queue_time``; the simulator costs it in the batch: the time
  before the forward is the larger of the two;
- no HiCache trace events are emitted per request (``--enable-trace`` spans the scheduler, not a
  load-back), and nothing says why a load-back was declined except one log line.

"Hit reported, tokens recomputed": `ScheduleBatch.prepare_for_extend` reports
``cached_tokens_details.host = host_hit_length`` whatever `HiRadixCache.load_back` did, while
``cached_tokens`` counts only the prefix it really reused. load_back declines (returns None) when
the host hit is under ``load_back_threshold`` (10 tokens), over the memory quota, or when the device
has no room even after eviction — the one that logs
``load_back: FAILED to load N tokens for node M even after eviction`` (`logscan.declined_load_backs`).
A phase whose requests' breakdown exceeds their cached tokens by more than a page recomputed what it
reported; the load-back counter's tokens are shown beside it (``not_loaded_per_counters``) but not
judged: the sampler's per-phase deltas can land in a neighbouring phase when a phase is shorter than
its interval.

`attribute(summary)` gives each hit phase (one with a ``roofline``) its split and those flags.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from harness.store.phase_samples import PhaseSamples, SamplingSummary

QUEUE_NOT_REPORTED = (
    "not reported: the server sent no meta_info.queue_time (sglang 0.5.17 sends it only with --enable-metrics, "
    "and only on /generate)"
)


def _delta(deltas: Mapping[str, float], prefix: str) -> float | None:
    """A counter's delta over the phase; 0 where /metrics was sampled but the counter is absent
    (sglang's labelled counters appear only after their first increment); None without /metrics."""
    vals = [v for k, v in deltas.items() if k.startswith(prefix + "{") or k == prefix]
    if vals:
        return float(sum(vals))
    return 0.0 if any(k.startswith("sglang:") for k in deltas) else None


def phase_attribution(
    roof: Mapping[str, Any], sampled: PhaseSamples | None, unit: int = 1, declined_in_log: int = 0
) -> dict[str, Any]:
    """One hit phase's split (ms per hit request, medians of the roofline and the phase's counter
    means) and its "reported but recomputed" figures."""
    deltas = sampled.counter_deltas if sampled is not None else {}
    n = max(1, int(roof.get("hit_requests") or 1))
    loaded = _delta(deltas, "sglang:load_back_tokens_total")
    lb_s = _delta(deltas, "sglang:load_back_duration_seconds_sum")
    load_ms = lb_s * 1e3 / n if lb_s is not None else None
    storage_ms = None
    st = sampled.storage if sampled is not None else None
    gbs, bpt = st.gbs["prefetch"] if st is not None else None, roof.get("kv_bytes_per_token")
    if roof.get("storage_tokens") and gbs and bpt:
        storage_ms = roof["storage_tokens"] * bpt / (gbs * 1e9) * 1e3 / n
    achieved = roof.get("achieved_ms")
    queue_ms = roof.get("queue_ms")
    reported, hits = int(roof.get("queue_reported") or 0), int(roof.get("hit_requests") or 0)
    if queue_ms is None:
        queue = QUEUE_NOT_REPORTED
    elif reported < hits:
        queue = f"sglang's meta_info.queue_time on {reported} of {hits} hit requests"
    else:
        queue = "sglang's meta_info.queue_time"
    rest = None
    if achieved is not None and (load_ms is not None or storage_ms is not None or queue_ms is not None):
        # sglang's storage prefetch waits in the queue: the larger of the two is before the forward
        before = max(queue_ms or 0.0, storage_ms or 0.0)
        rest = max(0.0, achieved - (load_ms or 0.0) - before)
    reported = int(roof.get("host_tokens") or 0) + int(roof.get("storage_tokens") or 0)
    not_loaded = reported - int(loaded) if loaded is not None else None
    recomputed = int(roof.get("recomputed_tokens") or 0)
    # judged on the records alone: the sampler's per-phase counter deltas can fall in a neighbouring
    # phase when a phase is shorter than the sampling interval, so the counters are shown, not judged
    flag = recomputed > unit
    return {
        "achieved_ms": achieved,
        "queue_ms": queue_ms,
        "queue": queue,
        "storage_read_ms": storage_ms,
        "host_to_device_ms": load_ms,
        "rest_ms": rest,  # suffix prefill and the first token (and the queueing where not reported)
        "reported_hit_tokens": reported,
        "loaded_back_tokens": int(loaded) if loaded is not None else None,
        "not_loaded_per_counters": not_loaded,
        "recomputed_tokens": recomputed,
        "declined_in_log": declined_in_log,
        "hit_recomputed": flag,
        "load_back_source": "sampled /metrics deltas" if loaded is not None else "not sampled (no /metrics)",
    }


def attribute(summary: Mapping[str, Any], unit: int = 1, declined_in_log: int = 0) -> list[dict[str, Any]]:
    """Every hit phase's attribution (`phase_attribution`), with its workload and phase; a flagged
    one carries ``text`` (what the verdict warns)."""
    phases_sampled = SamplingSummary.from_json(summary.get("sampling")).phases
    out = []
    for wl, w in summary["workloads"].items():
        for phase, p in w["phases"].items():
            roof = p.get("roofline")
            if not roof:
                continue
            sampled = phases_sampled.get(f"{wl}/{phase}")
            a = {"workload": wl, "phase": phase, **phase_attribution(roof, sampled, unit, declined_in_log)}
            if a["hit_recomputed"]:
                loaded = a["loaded_back_tokens"]
                a["text"] = (
                    f"hit reported, tokens recomputed: {wl}/{phase} reported {a['reported_hit_tokens']:,} host/storage "
                    f"tokens, of which {a['recomputed_tokens']:,} were not in cached_tokens"
                    + (f" and sglang loaded back {loaded:,}" if loaded is not None else "")
                    + (
                        f"; the server log has {declined_in_log} declined load-back(s) "
                        "('load_back: FAILED to load ... even after eviction': no device room)"
                        if declined_in_log
                        else "; sglang declines a load-back under 10 tokens, over its memory quota, or without device room"
                    )
                )
            out.append(a)
    return out

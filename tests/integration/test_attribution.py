"""Load-back attribution (`harness.analysis.attribution`): a host hit's time split from what
sglang 0.5.17 emits (load-back seconds and tokens from the sampled /metrics; queueing from each
request's meta_info.queue_time, which --enable-metrics turns on), and "hit reported, tokens recomputed" — the simulator's ``declined_host_load``
reports host hits the way sglang does for a declined load_back (host = host_hit_length, cached
tokens only what was reused, its FAILED log line) — flagged in the summary, the verdict's
warnings and the console."""

from __future__ import annotations

import json

import pytest

from harness.cli import main
from harness.server.logscan import declined_load_backs
from tests.conftest import write_scenario

SCENARIO = """\
name: attribution
server:
  backend: sim
  model_path: models/llama-tiny
  args: {--max-total-tokens: 8192, --skip-tokenizer-init: true, --enable-metrics: true}
  startup_timeout_s: 30
  request_timeout_s: 20
  liveness_idle_s: 0.1
  sim: {time_scale: 1, startup_s: 0, host_mem_scale: 0.001, mem_available_gib: 16}
sampling: {enabled: true, interval_s: 0.1, idle_window_s: 0.2, gpu: false, server_metrics: true, cooldown_timeout_s: 1}
variants:
  - name: "off"
  - name: on
    hicache: {ratio: 2, mem_layout: page_first}
  - name: on-declined
    hicache: {ratio: 2, mem_layout: page_first}
    sim_faults: [declined_host_load]
workloads:
  - kind: repeat_prefill
    n: 2
    prompt_tokens: 2000
    eviction_tokens: "1.2x pool"
"""


def test_the_log_line_of_a_declined_load_back_is_counted():
    text = "x\n[w] load_back: FAILED to load 1999 tokens for node 7 even after eviction (evictable_size=0)\ny"
    assert declined_load_backs(text) == [1999]
    assert declined_load_backs("load_back: loaded 1999 tokens") == []


def test_a_declined_load_back_is_a_hit_reported_and_recomputed(tmp_path, capsys):
    path = write_scenario(tmp_path, SCENARIO)
    pytest.importorskip("jinja2")
    main(["run", str(path), "--results-dir", str(tmp_path / "r"), "--reports-dir", str(tmp_path / "rep")])
    out = capsys.readouterr().out
    (run,) = (tmp_path / "r" / "attribution").iterdir()
    on = json.loads((run / "on" / "summary.json").read_text())
    bad = json.loads((run / "on-declined" / "summary.json").read_text())
    (a,) = on["attribution"]
    assert (a["workload"], a["phase"]) == ("repeat_prefill", "repeat_after_evict")
    assert a["reported_hit_tokens"] == 2 * 1999 and a["recomputed_tokens"] == 0 and not a["hit_recomputed"]
    assert a["loaded_back_tokens"] is not None and a["host_to_device_ms"] is not None  # /metrics sampled
    # over the whole run sglang's counter loaded back what was reported (one phase's deltas may land
    # in its neighbour's when the phase is shorter than the sampling interval: not judged per phase)
    loaded = sum(
        v
        for ph in on["sampling"]["phases"].values()
        for k, v in (ph.get("counter_deltas") or {}).items()
        if k.startswith("sglang:load_back_tokens_total")
    )
    assert loaded == 2 * 1999
    # --enable-metrics: every hit request came with sglang's queue_time, and the split adds up
    rows = [json.loads(x) for x in (run / "on" / "requests.jsonl").read_text().splitlines()]
    hits = [r for r in rows if r["phase"] == "repeat_after_evict" and not r["warmup"]]
    assert hits and all(r["queue_time_s"] is not None and r["queue_time_s"] >= 0 for r in hits)
    assert a["queue"] == "sglang's meta_info.queue_time" and a["queue_ms"] is not None
    parts = a["queue_ms"] + a["host_to_device_ms"] + a["rest_ms"]
    assert a["rest_ms"] == 0 or parts == pytest.approx(a["achieved_ms"])
    assert "text" not in a
    (b,) = bad["attribution"]
    assert b["hit_recomputed"] and b["reported_hit_tokens"] == 2 * 1999
    assert b["recomputed_tokens"] == 2 * 1999 and b["loaded_back_tokens"] == 0 and b["declined_in_log"] == 2
    assert "hit reported, tokens recomputed: repeat_prefill/repeat_after_evict reported 3,998" in b["text"]
    # the roofline of the phase counts them too (per request: breakdown over cached_tokens)
    roof = bad["workloads"]["repeat_prefill"]["phases"]["repeat_after_evict"]["roofline"]
    assert (roof["recomputed_tokens"], roof["recomputed_requests"]) == (3998, 2)
    verdict = json.loads((run / "verdict.json").read_text())
    assert [w["variant"] for w in verdict["warnings"] if w["code"] == "hit_recomputed"] == ["on-declined"]
    assert "warning: on-declined: hit reported, tokens recomputed: repeat_prefill/repeat_after_evict" in out
    # the report: the split beside the roofline, the recomputed tokens marked
    (page,) = (tmp_path / "rep").rglob("index.html")
    html = page.read_text()
    assert html.index('id="roofline"') < html.index('id="attribution"')
    assert 'class="num fail">3998</td>' in html  # the recomputed tokens, marked

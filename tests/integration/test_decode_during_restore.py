"""decode_during_restore: running decodes' ITL/TPOT while a large prompt comes back from the host
tier, ON vs OFF. On the simulator a slow load-back (``slow_host_load``) holds the decodes' steps
behind it, as a long prefill holds short_ttft's prompts: the during/alone ratios say so."""

from __future__ import annotations

import json

from harness.cli import main
from tests.conftest import write_sim_scenario

VARIANTS = """\
- name: "off"
- name: on
  hicache: {ratio: 2, mem_layout: page_first}
- name: on-slow
  hicache: {ratio: 2, mem_layout: page_first}
  sim_faults: [slow_host_load=400]
"""
WORKLOADS = """\
- kind: decode_during_restore
  batch: 2
  prompt_tokens: 64
  output_tokens: 96
  restore_tokens: 4000
  eviction_tokens: "1.2x pool"
"""


def test_decodes_during_a_restore_are_measured_and_a_slow_load_back_stalls_them(tmp_path, capsys):
    path = write_sim_scenario(tmp_path, VARIANTS, WORKLOADS, name="ddr", max_total_tokens=8192, time_scale=1)
    rc = main(["run", str(path), "--results-dir", str(tmp_path / "r"), "--no-report"])
    capsys.readouterr()
    (run,) = (tmp_path / "r" / "ddr").iterdir()
    s = {
        v: json.loads((run / v / "summary.json").read_text())["workloads"]["decode_during_restore"]
        for v in ("off", "on", "on-slow")
    }
    ph = s["on"]["phases"]
    assert ph["restore"]["hits"]["host_tokens"] == 3999  # the restore: a host hit with HiCache
    assert s["off"]["phases"]["restore"]["hits"]["host_tokens"] == 0  # a recompute without
    assert ph["alone"]["n"] == ph["during_restore"]["n"] == 2 and ph["evict"]["filler"]
    assert ph["during_restore"]["metrics"]["itl_ms"]["n"] > 0
    # the during/alone ratios are derived and compared (gateable)
    assert {"restore_tpot_ratio", "restore_itl_p99_ratio", "restore_ttft_ms"} <= set(s["on"]["derived"])
    # 4,000 tokens x 16 KiB at 55/400 GB/s: ~0.48 s of load-back inside the decodes' window
    # (the modelled time is a floor: a loaded machine only makes the stall longer)
    assert s["on-slow"]["phases"]["during_restore"]["metrics"]["itl_ms"]["max"] >= 400
    assert s["on-slow"]["phases"]["alone"]["metrics"]["itl_ms"]["max"] < 400  # alone: no stall of that size
    assert rc == 0

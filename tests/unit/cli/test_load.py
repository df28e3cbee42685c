"""harness.analysis.frames and ``harness load``: the request, group and sample tables of a run (the golden
runs), NaN for what is missing, a torn last line skipped."""

from __future__ import annotations

import json
from argparse import Namespace

import numpy as np
import pandas as pd

from harness.analysis.frames import groups_frame, load_frames, samples_frame
from harness.cli.load import cli_main
from harness.measures import metrics as M


def test_load_frames_of_a_golden_run(golden_run):
    req, smp = load_frames(golden_run("healthy"))
    assert isinstance(req, pd.DataFrame) and set(req["variant"]) == {"off", "on-r2"}  # on-200gb never served
    assert set(M.REQUEST_METRICS) <= set(req.columns) and {"output_len", "n_chunks"} <= set(req.columns)
    assert set(smp["variant"]) == {"off", "on-r2", "on-200gb"} and smp["t_s"].min() == 0
    failed = req[req["error"].notna()]
    assert failed["ttft_ms"].isna().all() if len(failed) else True


def test_groups_frame(golden_run):
    req, _ = load_frames(golden_run("healthy"))
    g = groups_frame(req)
    measured = req[(req["warmup"] != True) & req["concurrency_group"].notna()]
    keys = ["variant", "workload", "phase", "concurrency_group"]
    sizes = measured.groupby(keys).size()
    pd.testing.assert_series_equal(
        g.set_index(keys)["n"].sort_index(), sizes.sort_index(), check_names=False, check_dtype=False
    )
    assert (g["pass_wall_s"] > 0).all()
    spanning = measured.groupby(["variant", "concurrency_group"])["phase"].nunique()
    assert (spanning > 1).any()  # a group over two phases (short_ttft: the long prefill and the shorts): a row each
    assert groups_frame(req.iloc[:0]).empty


def test_torn_last_line_is_skipped(tmp_path):
    path = tmp_path / "samples.jsonl"
    path.write_text(
        json.dumps(
            {
                "t_ns": 1_000_000_000,
                "phase": "idle",
                "mem_available_kib": 5,
                "gpus": [{"index": 0, "mem_used_mib": 10}, {"index": 1, "mem_used_mib": 20}],
                "counters": {
                    'sglang:load_back_bytes_total{tp_rank="0"}': 7.0,
                    'sglang:load_back_bytes_total{tp_rank="1"}': 3.0,
                },
            }
        )
        + "\n"
        + '{"t_ns": 2'
    )
    df = samples_frame(path, "v")
    assert len(df) == 1 and df["gpu_mem_used_mib"][0] == 30 and df["load_back_bytes"][0] == 10
    assert np.isnan(df["cached_kib"][0])  # missing is NaN, never 0


def test_load_command(golden_run, tmp_path, capsys):
    run = golden_run("merged")
    req, _ = load_frames(run)
    assert cli_main(Namespace(run=str(run))) == 0
    out = capsys.readouterr().out
    assert f"requests: {len(req)} rows" in out and "from harness.api import load_run" in out
    assert cli_main(Namespace(run=str(tmp_path / "missing"))) == 2
    assert "missing" in capsys.readouterr().err

"""harness.load: the fast frames agree with harness.metrics' definitions on factory records."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pandas as pd

from harness import metrics as M
from harness.load import load_frames, requests_frame, samples_frame
from tests.factories import make_failed, make_record


def test_request_metrics_match_records_frame(tmp_path):
    recs = [make_record(ttft_ms=50, output_tokens=6, itl_ms=4, tokens_per_chunk=2, cached_tokens=300),
            make_record(ttft_ms=80, output_tokens=1, cached_tokens=None),
            make_record(ttft_ms=20, output_tokens=5, itl_ms=7, cached_tokens=0, cached_host=10, cached_device=5),
            make_failed(), make_record(prompt_tokens=0, ttft_ms=5)]
    path = tmp_path / "requests.jsonl"
    path.write_text("".join(json.dumps(dataclasses.asdict(r)) + "\n" for r in recs))
    fast = requests_frame(path)
    ref = M.records_frame(recs)
    for col in list(M.DERIVATIONS) + ["output_len", "n_chunks"]:
        np.testing.assert_allclose(fast[col].to_numpy(float), ref[col].to_numpy(float), rtol=1e-12, err_msg=col)


def test_torn_last_line_is_skipped(tmp_path):
    path = tmp_path / "samples.jsonl"
    path.write_text(json.dumps({"t_ns": 1_000_000_000, "phase": "idle", "mem_available_kib": 5,
                                "gpus": [{"index": 0, "mem_used_mib": 10}, {"index": 1, "mem_used_mib": 20}],
                                "counters": {'sglang:load_back_bytes_total{tp_rank="0"}': 7.0,
                                             'sglang:load_back_bytes_total{tp_rank="1"}': 3.0}})
                    + "\n" + '{"t_ns": 2')
    df = samples_frame(path, "v")
    assert len(df) == 1 and df["gpu_mem_used_mib"][0] == 30 and df["load_back_bytes"][0] == 10
    assert np.isnan(df["cached_kib"][0])  # missing is NaN, never 0


def test_load_frames_and_cli(tmp_path, capsys):
    from argparse import Namespace

    from harness.load import cli_main
    from tests.test_compare import noisy, records, write_run

    run = write_run(tmp_path, "20260101T000000Z-aaaaaa", {"off": records(noisy(100, 3), "off"),
                                                          "on": records(noisy(100, 4))})
    req, smp = load_frames(run)
    assert isinstance(req, pd.DataFrame) and len(req) == 7 and set(req["variant"]) == {"off", "on"}
    assert len(smp) == 0
    assert cli_main(Namespace(run=str(run))) == 0
    assert "requests: 7 rows" in capsys.readouterr().out
    assert cli_main(Namespace(run=str(tmp_path / "missing"))) == 2

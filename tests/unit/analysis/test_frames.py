"""The columnar copy beside a large JSONL (`harness.analysis.frames`): the same frames as parsing the JSONL,
rebuilt when the JSONL changed or the copy is damaged, no copy where the folder is read-only,
metric columns recomputed from stored inputs."""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pandas as pd
import pytest

from harness.analysis import frames
from harness.measures import metrics as M
from tests.factories import make_record


@pytest.fixture
def always_copy(monkeypatch):
    """Copy files of every size (the golden runs are small)."""
    monkeypatch.setattr(frames, "COLUMNS_MIN_BYTES", 0)


def parsed(path, kind, variant="v"):
    """The frame as parsing the JSONL gives it (no copy read or written)."""
    saved = frames.COLUMNS_MIN_BYTES
    frames.COLUMNS_MIN_BYTES = 1 << 62
    try:
        return frames.requests_frame(path, variant) if kind == "requests" else frames.samples_frame(path, variant)
    finally:
        frames.COLUMNS_MIN_BYTES = saved


def test_the_copy_gives_the_same_frames_as_the_jsonl(golden_run, tmp_path, always_copy):
    src = golden_run("healthy")
    for v in ("off", "on-r2"):
        for kind in ("requests", "samples"):
            path = tmp_path / f"{v}.{kind}.jsonl"
            shutil.copy(src / v / f"{kind}.jsonl", path)
            want = parsed(path, kind)
            first = frames.requests_frame(path, "v") if kind == "requests" else frames.samples_frame(path, "v")
            assert frames.columns_path(path).exists()
            again = frames.requests_frame(path, "v") if kind == "requests" else frames.samples_frame(path, "v")
            pd.testing.assert_frame_equal(first, want)
            pd.testing.assert_frame_equal(again, want)


def test_labels_of_every_kind_survive_the_copy(tmp_path, always_copy):
    """None, booleans, numbers and many distinct strings (rids) come back as they were."""
    path = tmp_path / "requests.jsonl"
    rows = []
    for i in range(6000):
        r = make_record(
            index=i,
            warmup=(i % 3 == 0),
            concurrency_group=None if i % 2 else f"g{i % 5}",
            error=None if i % 7 else "timeout",
        )
        d = r.to_dict()
        d["rid"] = f"rid-é-{i}"
        if i == 5:
            d["finish_reason"] = 3  # a hand-edited row: a number where a string belongs
        if i == 8:
            d["repeat"] = None  # an integer label missing
        rows.append(json.dumps(d))
    path.write_text("\n".join(rows) + "\n")
    want = parsed(path, "requests")
    frames.requests_frame(path, "v")
    got = frames.requests_frame(path, "v")
    pd.testing.assert_frame_equal(got, want)
    assert got["rid"][4] == "rid-é-4" and bool(got["warmup"][3]) and got["finish_reason"][5] == 3
    assert pd.isna(got["concurrency_group"][1]) and got["concurrency_group"][0] == "g0"
    assert pd.isna(got["repeat"][8]) and got["index"][5999] == 5999


def test_integers_beyond_64_bits_survive_the_copy(tmp_path, always_copy):
    path = tmp_path / "requests.jsonl"
    rows = [make_record(index=i).to_dict() for i in range(3)]
    rows[1]["index"] = 2**70
    path.write_text("".join(json.dumps(d) + "\n" for d in rows))
    frames.requests_frame(path, "v")
    assert frames.requests_frame(path, "v")["index"].tolist() == [0, 2**70, 2]


def test_a_changed_jsonl_rebuilds_the_copy(golden_run, tmp_path, always_copy):
    path = tmp_path / "requests.jsonl"
    shutil.copy(golden_run("healthy") / "off" / "requests.jsonl", path)
    n = len(frames.requests_frame(path, "v"))
    with open(path, "a") as f:
        d = make_record(index=99999).to_dict()
        d["rid"] = "late"
        f.write(json.dumps(d) + "\n")
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1))
    df = frames.requests_frame(path, "v")
    assert len(df) == n + 1 and df["rid"].iloc[-1] == "late"


def test_a_damaged_copy_is_ignored_and_rewritten(golden_run, tmp_path, always_copy):
    path = tmp_path / "samples.jsonl"
    shutil.copy(golden_run("healthy") / "on-r2" / "samples.jsonl", path)
    want = parsed(path, "samples")
    frames.columns_path(path).write_bytes(b"PK\x03\x04 not a zip at all")
    pd.testing.assert_frame_equal(frames.samples_frame(path, "v"), want)
    pd.testing.assert_frame_equal(frames.samples_frame(path, "v"), want)  # the rewritten copy
    with np.load(frames.columns_path(path)) as z:
        assert "t_ns" in z.files


def test_a_copy_holds_inputs_only_and_metrics_are_recomputed(golden_run, tmp_path, always_copy, monkeypatch):
    path = tmp_path / "requests.jsonl"
    shutil.copy(golden_run("healthy") / "off" / "requests.jsonl", path)
    frames.requests_frame(path, "v")
    with np.load(frames.columns_path(path)) as z:
        assert not set(M.REQUEST_METRICS) & set(z.files)
    fixed = M.Metric(
        "ttft_ms", "ms", False, "a changed definition", lambda c: c["first_token_ns"] * 0 + 7.0, compared=True
    )
    monkeypatch.setitem(M.METRICS, "ttft_ms", fixed)
    df = frames.requests_frame(path, "v")
    assert (df["ttft_ms"] == 7.0).all()


def test_a_read_only_folder_parses_every_time(golden_run, tmp_path, always_copy):
    folder = tmp_path / "ro"
    folder.mkdir()
    path = folder / "requests.jsonl"
    shutil.copy(golden_run("healthy") / "off" / "requests.jsonl", path)
    folder.chmod(0o555)
    try:
        if os.access(folder, os.W_OK):
            pytest.skip("running as a user who can write anywhere")
        df = frames.requests_frame(path, "v")
        assert len(df) and not frames.columns_path(path).exists()
    finally:
        folder.chmod(0o755)


def test_small_files_get_no_copy(golden_run, tmp_path):
    path = tmp_path / "requests.jsonl"
    shutil.copy(golden_run("healthy") / "off" / "requests.jsonl", path)
    frames.requests_frame(path, "v")
    assert not frames.columns_path(path).exists()
    assert frames.write_columns(path) and frames.columns_path(path).exists()

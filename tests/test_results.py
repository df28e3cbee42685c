"""Run-folder writes are atomic, JSONL survives a torn last line, names cannot escape (P7)."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from harness import results


def test_safe_name_cannot_escape(tmp_path):
    for bad in ["../../x", "..", ".", "a/b", "a\\b", "", "\x00evil", "on r2 <script>"]:
        name = results.safe_name(bad)
        assert "/" not in name and "\\" not in name and not name.startswith(".")
        target = (tmp_path / name).resolve()
        assert target.parent == tmp_path.resolve()
    assert results.safe_name("on-r2-page_first") == "on-r2-page_first"


def test_write_json_atomic_roundtrip(tmp_path):
    p = tmp_path / "a" / "x.json"
    results.write_json_atomic(p, {"k": [1, 2]})
    assert results.read_json(p) == {"k": [1, 2]}
    assert not [f for f in p.parent.iterdir() if f.name.endswith(".tmp")]


def test_read_jsonl_skips_torn_last_line(tmp_path, caplog):
    p = tmp_path / "r.jsonl"
    with results.JsonlWriter(p) as w:
        w.append({"i": 1})
        w.append({"i": 2})
    with open(p, "a") as f:
        f.write('{"i": 3, "trunc')
    assert [r["i"] for r in results.read_jsonl(p)] == [1, 2]
    assert "torn last line" in caplog.text


def test_read_jsonl_corruption_in_middle_names_file_and_line(tmp_path):
    p = tmp_path / "r.jsonl"
    p.write_text('{"i": 1}\nnot json\n{"i": 3}\n')
    with pytest.raises(results.ResultsError, match=r"r.jsonl:2"):
        list(results.read_jsonl(p))


def test_load_run_refuses_other_schema_version(tmp_path):
    run = results.create_run_dir(tmp_path, "s", "r1")
    results.write_json_atomic(run.manifest, {"schema_version": 99, "variants": []})
    with pytest.raises(results.ResultsError, match="schema_version 99"):
        results.load_run(run.root)
    with pytest.raises(results.ResultsError, match="no such run folder"):
        results.load_run(tmp_path / "missing")


WRITER = textwrap.dedent(
    """
    import sys
    from harness import results
    from pathlib import Path
    d = Path(sys.argv[1])
    w = results.JsonlWriter(d / "rows.jsonl")
    i = 0
    while True:
        i += 1
        results.write_json_atomic(d / "summary.json", {"i": i, "pad": "x" * 20000})
        w.append({"i": i, "pad": "y" * 5000})
    """
)


def test_sigkill_during_writes_leaves_parseable_files(tmp_path):
    """P7: SIGKILL the writer at random moments; every file parses as old or new."""
    env = dict(os.environ, PYTHONPATH=os.getcwd())
    for attempt in range(5):
        d = tmp_path / str(attempt)
        d.mkdir()
        proc = subprocess.Popen([sys.executable, "-c", WRITER, str(d)], env=env)
        time.sleep(0.4 + 0.07 * attempt)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        if (d / "summary.json").exists():
            data = json.loads((d / "summary.json").read_text())
            assert data["i"] >= 1 and len(data["pad"]) == 20000
        rows = list(results.read_jsonl(d / "rows.jsonl"))
        assert all(len(r["pad"]) == 5000 for r in rows)
        assert [r["i"] for r in rows] == list(range(1, len(rows) + 1))


def test_run_lock_refuses_a_second_writer(tmp_path):
    lock = results.hold_run_lock(tmp_path)
    with pytest.raises(results.RunLocked, match="another harness process is writing this run"):
        results.hold_run_lock(tmp_path)
    lock.close()
    results.hold_run_lock(tmp_path).close()  # released: the next writer gets it

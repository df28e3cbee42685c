"""Run-folder writes are atomic, JSONL survives a torn last line, names cannot escape (P7)."""

import fcntl
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from harness.store import results, run_folder


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


def test_background_writer_keeps_every_line_in_order_and_off_the_callers_thread(tmp_path, monkeypatch):
    """The request records' writer (serving window): append never fsyncs in the caller's thread
    (the client's event loop); the thread writes every line, in order, and fsyncs before close
    returns."""
    import threading

    synced_in = []
    real_fsync = os.fsync
    monkeypatch.setattr(results.os, "fsync", lambda fd: (synced_in.append(threading.current_thread()), real_fsync(fd)))
    p = tmp_path / "r.jsonl"
    w = results.JsonlWriter(p, background=True, sync_interval_s=60)
    for i in range(500):
        w.append({"i": i})
    w.close()
    assert [r["i"] for r in results.read_jsonl(p)] == list(range(500)) and w.count == 500
    assert synced_in and threading.main_thread() not in synced_in  # the final fsync, in the thread
    with pytest.raises(ValueError, match="after close"):
        w.append({"i": 500})


def test_background_writer_raises_a_write_error_to_the_caller(tmp_path):
    if not Path("/dev/full").exists():
        pytest.skip("no /dev/full")
    w = results.JsonlWriter(Path("/dev/full"), fsync=False, background=True)
    with pytest.raises(OSError):
        for _ in range(10_000):  # the thread's write fails; a later append or close says so
            w.append({"pad": "x" * 1000})
        w.close()
    try:
        w.close()
    except OSError:
        pass


def test_read_jsonl_corruption_in_middle_names_file_and_line(tmp_path):
    p = tmp_path / "r.jsonl"
    p.write_text('{"i": 1}\nnot json\n{"i": 3}\n')
    with pytest.raises(results.ResultsError, match=r"r.jsonl:2"):
        list(results.read_jsonl(p))


def test_load_run_refuses_other_schema_version(tmp_path):
    run = results.create_run_dir(tmp_path, "s", "r1")
    results.write_json_atomic(run.manifest, {"schema_version": 99, "variants": []})
    with pytest.raises(results.ResultsError, match="schema_version 99"):
        run_folder.load_run(run.root)
    with pytest.raises(results.ResultsError, match="no such run folder"):
        run_folder.load_run(tmp_path / "missing")


WRITER = textwrap.dedent(
    """
    import sys
    from harness.store import results
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


def _locked(root: Path) -> bool:
    """Someone (this process included) holds the run's flock: a second open file cannot take it."""
    fd = os.open(results.RunPaths(root).lock, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:
        return True
    finally:
        os.close(fd)
    return False


def _hold_in_another_process(root: Path) -> subprocess.Popen:
    code = (
        "import sys, time; from harness.store import results; lock = results.hold_run_lock(sys.argv[1]); "
        "print('held', flush=True); time.sleep(60)"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code, str(root)],
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parents[3],
    )
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_run_lock_refuses_a_second_writer_and_names_it(tmp_path):
    other = _hold_in_another_process(tmp_path)
    try:
        assert _locked(tmp_path)
        with pytest.raises(
            results.RunLocked, match=rf"another harness process is writing this run \(pid {other.pid} on "
        ):
            results.hold_run_lock(tmp_path)
    finally:
        other.kill()
        other.wait()
    assert not _locked(tmp_path)  # its holder died: the lock went with it
    results.hold_run_lock(tmp_path).close()  # the next writer gets it


def test_run_lock_is_reentrant_within_a_process_and_released_by_the_last_hold(tmp_path):
    """A resume holds the lock from reopening the folder to the end of the run, and the runner
    takes it again for the run itself: the flock stays until both let go."""
    outer = results.hold_run_lock(tmp_path)
    inner = results.hold_run_lock(tmp_path)
    inner.close()
    inner.close()  # closing twice counts once
    assert _locked(tmp_path)
    other = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from harness.store import results; results.hold_run_lock(sys.argv[1])",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parents[3],
    )
    assert other.returncode != 0 and "another harness process is writing this run" in other.stderr
    outer.close()
    assert not _locked(tmp_path)


def test_rewrite_lines_atomic_transforms_whole_lines_and_keeps_bytes_and_mode(tmp_path):
    path = tmp_path / "server.log"
    lines = [f"line {i} secret-{i % 7}\n".encode() for i in range(5000)] + [
        b"\xff\xfe not utf-8 secret-3\n",
        b"no newline at the end secret-1",
    ]
    path.write_bytes(b"".join(lines))
    os.chmod(path, 0o640)
    seen = []

    def transform(text: str) -> str:
        seen.append(text)
        return text.replace("secret-3", "***")

    results.rewrite_lines_atomic(path, transform, chunk_bytes=1000)
    out = path.read_bytes()
    assert out == b"".join(lines).replace(b"secret-3", b"***")
    assert len(seen) > 10 and all(chunk.endswith("\n") for chunk in seen[:-1])  # a run of whole lines each time
    assert os.stat(path).st_mode & 0o777 == 0o640
    assert [p.name for p in tmp_path.iterdir()] == ["server.log"]  # no temporary file left

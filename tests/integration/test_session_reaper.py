"""A pytest killed mid-test (a time limit's SIGTERM runs no finalizer; SIGKILL) leaves no server
behind: tests/session_reaper.py, started by tests/conftest.py, kills what carries the session's
mark once pytest is gone. The test inside starts a process in a session of its own, as
`ServerProcess` starts a server, and hangs; the outer test kills that pytest."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from tests.conftest import REPO, alive, harness_env

INNER = """\
import os, subprocess, sys, time

def test_starts_a_server_and_hangs():
    server = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
    with open(os.environ["SERVER_PID_FILE"] + ".tmp", "w") as f:
        f.write(str(server.pid))
    os.replace(os.environ["SERVER_PID_FILE"] + ".tmp", os.environ["SERVER_PID_FILE"])
    time.sleep(600)
"""


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
def test_a_pytest_killed_mid_test_leaves_no_server(tmp_path, sig):
    (tmp_path / "test_inner.py").write_text(INNER)
    pid_file = tmp_path / "server.pid"
    inner = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-p", "tests.conftest", "-p", "no:cacheprovider", "-p", "no:randomly"]
        + ["-q", str(tmp_path / "test_inner.py")],
        cwd=REPO,
        env=harness_env({"SERVER_PID_FILE": str(pid_file)}),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    deadline = time.monotonic() + 180
    while not pid_file.exists() and inner.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert pid_file.exists(), inner.communicate(timeout=60)[0][-3000:] if inner.poll() is not None else "no start"
    server = int(pid_file.read_text())
    assert alive(server)
    inner.send_signal(sig)
    out = inner.communicate(timeout=60)[0]
    deadline = time.monotonic() + 60  # the reaper polls pytest once a second
    while alive(server) and time.monotonic() < deadline:
        time.sleep(0.05)
    if alive(server):
        os.kill(server, signal.SIGKILL)  # not left to the next test
        pytest.fail(f"the server {server} outlived the killed pytest: {out[-2000:]}")
    assert f"killed 1 process(es) the test session left: [{server}]" in out  # named on pytest's stderr

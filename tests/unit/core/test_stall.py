"""`harness.core.stall`: the time this process was not running is counted, as the client's time
limits and the hang watch need (tests/integration/test_hang.py pauses a whole run)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from tests.conftest import harness_env

CHILD = """\
import sys, time
from harness.core import stall
stall.stalled_s()
print("ready", flush=True)
sys.stdin.readline()  # the test pauses this process, continues it, then writes a line
before = stall.stalled_s()  # the stall is counted at once, before the meter's thread ticked again
time.sleep(0.3)
print(before, stall.stalled_s(), flush=True)
"""


def test_a_sigstopped_process_counts_its_stall():
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD],
        env=harness_env(),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout.readline().strip() == "ready"
        time.sleep(0.2)
        os.kill(proc.pid, signal.SIGSTOP)
        time.sleep(2.0)
        os.kill(proc.pid, signal.SIGCONT)
        proc.stdin.write("go\n")
        proc.stdin.flush()
        before, after = map(float, proc.stdout.readline().split())
    finally:
        proc.kill()
        proc.wait()
    assert 1.5 <= before <= after, (before, after)

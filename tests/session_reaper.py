"""The test session's reaper: a process of its own session, started by tests/conftest.py when
pytest configures, that outlives pytest. When pytest is gone -- its pipe closed, however it ended:
a normal exit, SIGTERM from a time limit (Python's default: no finalizer runs), SIGKILL -- it kills
every process still carrying this session's mark (``HARNESS_TEST_SESSION=<mark>`` in its
environment, inherited by whatever a test started: harness runs, simulated servers in sessions of
their own, their children), each by its own id, and names them on stderr.

    python tests/session_reaper.py MARK PYTEST_PID   (stdin: the pipe pytest holds open)
"""

from __future__ import annotations

import os
import select
import signal
import sys
import time

VAR = "HARNESS_TEST_SESSION"


def marked(needle: bytes, skip: set[int]) -> list[int]:
    """The live processes whose environment holds ``needle`` (``VAR=mark``) as one entry."""
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) in skip:
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                env = f.read()
        except OSError:
            continue
        if needle in env.split(b"\0"):
            out.append(int(name))
    return out


def main(mark: str, parent: int) -> None:
    for sig in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM):  # the terminal's ^C is pytest's to handle
        signal.signal(sig, signal.SIG_IGN)
    while True:  # until the pipe closes or pytest is gone (a forked child may hold the pipe)
        ready, _, _ = select.select([0], [], [], 1.0)
        if ready and not os.read(0, 4096):
            break
        try:
            os.kill(parent, 0)
        except ProcessLookupError:
            break
        except PermissionError:
            pass
    needle = f"{VAR}={mark}".encode()
    killed: list[int] = []
    for _ in range(3):  # a tree being killed may still be starting a child
        pids = marked(needle, {os.getpid(), parent})
        if not pids:
            break
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
            except OSError:
                pass
        time.sleep(0.2)
    if killed:
        print(
            f"tests/session_reaper.py: killed {len(killed)} process(es) the test session left: {killed}",
            file=sys.stderr,
        )


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))

"""A reader that goes away (``harness schema | head -1``) ends the command with one line and
exit 3, never a traceback (it was ``BrokenPipeError`` and its traceback, from `print`)."""

from __future__ import annotations

import subprocess

from tests.conftest import REPO, harness_command, harness_env


def test_a_closed_stdout_is_one_line_not_a_traceback():
    args = ["schema"]  # 100 KB: more than a pipe holds, so the write meets the closed end
    proc = subprocess.Popen(
        harness_command(*args), cwd=REPO, env=harness_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert proc.stdout.read(1)  # the reader takes a byte, then goes away (as head does)
    proc.stdout.close()
    err = proc.stderr.read().decode()
    rc = proc.wait(timeout=60)
    assert "Traceback" not in err and "Exception ignored" not in err, err
    assert rc == 3, err
    assert len(err.strip().splitlines()) == 1 and "standard output" in err, err

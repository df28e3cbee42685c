"""The harness's exit codes, one home for every command (run, compare, merge, history, ...)."""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    OK = 0  # pass
    FAILED = 1  # a regression, a failed expectation or an unexpected variant failure
    BAD_INPUT = 2  # bad scenario, arguments or result files: the message names what
    BROKEN = 3  # the harness or its environment broke
    INCONCLUSIVE = 4  # nothing failed, but the harness cannot tell (e.g. parity not exercised)
    INTERRUPTED = 130  # SIGINT/SIGTERM: servers stopped, run marked INTERRUPTED

"""The harness's exit codes, one home for every command (run, compare, merge, history, ...), and
the signals that end a command with 130 (``terminations_interrupt``)."""

from __future__ import annotations

import signal
import threading
from enum import IntEnum


class ExitCode(IntEnum):
    OK = 0  # pass
    FAILED = 1  # a regression, a failed expectation or an unexpected variant failure
    BAD_INPUT = 2  # bad scenario, arguments or result files: the message names what
    BROKEN = 3  # the harness or its environment broke
    INCONCLUSIVE = 4  # nothing failed, but the harness cannot tell (e.g. parity not exercised)
    INTERRUPTED = 130  # SIGINT/SIGTERM: servers stopped, run marked INTERRUPTED


def _interrupt(signum, _frame) -> None:
    raise KeyboardInterrupt(signal.Signals(signum).name)


def terminations_interrupt() -> dict:
    """SIGTERM and SIGHUP act as Ctrl-C (a KeyboardInterrupt: exit 130) for the whole command, not
    only while a run's `Signals` is on: a command waiting elsewhere (validate, compare, report, a
    run before its first file) was killed by them, exit -15. A signal somebody set to be ignored
    (``nohup``) stays ignored; only the main thread can set handlers. The handlers replaced, to
    give back to ``restore_handlers``."""
    if threading.current_thread() is not threading.main_thread():
        return {}
    old = {}
    for sig in (signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(sig) is signal.SIG_DFL:
            old[sig] = signal.signal(sig, _interrupt)
    return old


def restore_handlers(old: dict) -> None:
    for sig, handler in old.items():
        signal.signal(sig, handler)

"""A run's signals: SIGTERM and SIGHUP act like Ctrl-C while a run is on, and a signal while a
server is being spawned waits until the spawn is recorded (`Signals`; P15).
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext

from harness.core.errors import in_context_chain
from harness.run import lanes


class Signals:
    """While a run is on: SIGTERM and SIGHUP act like SIGINT — a ``KeyboardInterrupt`` at whatever
    the main thread is doing (starting a server, inside a stream, quality, cooldown, the report),
    never a value some ``except Exception`` could record as a request error. ``hold()`` turns
    later signals into notes while the run is being stopped, so a second Ctrl-C or a repeated
    ``docker stop`` cannot leave a server behind; whoever catches the interrupt calls it.

    Python runs a handler between any two bytecodes, finalizers included, and an exception raised
    inside a weakref callback or ``__del__`` is printed and dropped ("Exception ignored in ...").
    So until ``hold()`` acknowledges it, the interrupt is raised again every ``REMIND_S`` (a
    SIGALRM interval timer) whenever no KeyboardInterrupt is on its way up or being handled: a
    signal is never lost, the run never goes on after one, and a slow unwinding is never cut.
    Nested uses share the outer one."""

    HANDLED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    REMIND_S = 1.0
    _active: Signals | None = None

    def __init__(self) -> None:
        self.received: int | None = None
        self._old: dict[int, object] = {}
        self._holding = False  # hold() was called: the run is being stopped
        self._noted = False  # a signal arrived while deferred
        self._taken: tuple[int, ...] = ()  # the signals handled (not those set to be ignored)

    def __enter__(self) -> Signals:
        if Signals._active is not None:
            return Signals._active
        Signals._active = self
        # A signal set to be ignored stays ignored (nohup's SIGHUP, the SIGINT of a script's `cmd &`)
        self._taken = tuple(sig for sig in self.HANDLED if signal.getsignal(sig) is not signal.SIG_IGN)
        for sig in self._taken:
            self._old[sig] = signal.getsignal(sig)
            signal.signal(sig, self._interrupt)
        self._old[signal.SIGALRM] = signal.getsignal(signal.SIGALRM)
        signal.signal(signal.SIGALRM, self._remind)
        return self

    def __exit__(self, *exc) -> bool:
        if Signals._active is self:
            signal.setitimer(signal.ITIMER_REAL, 0)
            for sig, old in self._old.items():
                signal.signal(sig, old)
            Signals._active = None
        return False

    @property
    def name(self) -> str:
        return signal.Signals(self.received).name if self.received else "KeyboardInterrupt"

    def _interrupt(self, signum, _frame) -> None:
        self.received = signum
        signal.setitimer(signal.ITIMER_REAL, self.REMIND_S, self.REMIND_S)  # until hold() answers
        raise KeyboardInterrupt(signal.Signals(signum).name)

    def _remind(self, signum, _frame) -> None:
        if self._holding or self.received is None:
            signal.setitimer(signal.ITIMER_REAL, 0)
            return
        if _unwinding(sys.exc_info()[1]):
            return  # still on its way up (or being handled before hold()): not dropped
        raise KeyboardInterrupt(self.name)  # the first one was dropped (raised inside a finalizer)

    def _note(self, signum, _frame) -> None:
        self.received = signum
        self._noted = True

    def hold(self) -> None:
        """The interrupt was caught: later signals are only noted, and it is not raised again."""
        self._holding = True
        signal.setitimer(signal.ITIMER_REAL, 0)
        for sig in self._taken:
            signal.signal(sig, self._note)

    @contextmanager
    def deferred(self) -> Iterator[None]:
        """A signal arriving inside is noted and raised (``KeyboardInterrupt``) on leaving: spawning
        a server and recording who it is happen whole or not at all. (Python runs signal handlers
        in the main thread between bytecodes, so this holds whichever thread the kernel picked;
        blocking the signals with ``pthread_sigmask`` would not, and the server would inherit the
        blocked mask.)"""
        if self._holding or Signals._active is not self:
            yield
            return
        self._noted = False
        for sig in self._taken:
            signal.signal(sig, self._note)
        try:
            yield
        finally:
            if not self._holding:
                for sig in self._taken:
                    signal.signal(sig, self._interrupt)
        if self._noted:
            raise KeyboardInterrupt(self.name)

    @classmethod
    def defer(cls):
        """The active run's :meth:`deferred`, or nothing outside a run; in a side-by-side
        variant's thread its lane's spawn guard (`harness.run.lanes.Lane.spawning`: signals are the
        main thread's, and its interrupt waits for the spawn to be recorded)."""
        guard = lanes.current_spawn_guard()
        if guard is not None:
            return guard
        return cls._active.deferred() if cls._active is not None else nullcontext()


def _unwinding(exc: BaseException | None) -> bool:
    """Whether the exception being handled is the interrupt on its way up: the KeyboardInterrupt
    itself, an error raised while handling it, or the CancelledError with which the event loop's
    close cancels the run's tasks after it — inside a task's ``finally`` (a load point writing its
    answered rows, `harness.workloads.arrivals.send_on_clock`) the innermost exception is that
    CancelledError, and a reminder raised there cut the writing short: beside 4 CPU burners an
    interrupted open-loop point lost every row (the rows test of tests/integration/test_signals.py)."""
    import asyncio

    return in_context_chain(exc, (KeyboardInterrupt, asyncio.CancelledError)) is not None

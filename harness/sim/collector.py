"""The simulated server's cyclic garbage collection, run inside modelled batch time.

CPython collects its older generations when allocation counts cross thresholds, and a collection
stops the process for as long as a pass over everything it tracks takes. The simulator's page
tree is one ``Page`` and one child set per cached page (page size 1: a token), 250-320 K objects
once the twin's 105K-token pool is full, and a full collection of it took 0.2-0.55 s on an idle
2-core box, more under load. The thresholds are crossed at the same allocation every night, so a
collection landed in the same requests every night: the 3rd and 8th cold 8K prompt of the twin's
``off`` (a 0.55 s full collection began 22 ms after the 3rd was sent, before its admission; the
sent-age credit covers only 0.5 s) took +11 % idle and +25-64 % at load 13-29, night after
night, and the ``off`` prefill row could not decide (docs/simulator.md, "Clock and machine load").

`BatchCollector` keeps CPython's rules but moves the expensive passes to where they cost nothing
modelled: the automatic collector keeps only its youngest generation (bounded by its threshold,
microseconds), and the scheduler calls `BatchCollector.during` with the time left until the
batch it just started ends, before it sleeps to that deadline. There the middle generation is
collected when due (CPython's count rule), and a full collection when due (the count rule and
CPython's 25 % rule: the objects promoted to the oldest generation since the last full collection
are over a quarter of the ones that survived it) and the batch has at least twice its expected
duration left: the objects in the oldest generation x the seconds per object the last full
collection took (the first: one at `install`, when the process holds little). A due full
collection that does not fit waits for a batch that has room (a long prefill), at most
`MAX_POSTPONED_S`: then it runs anyway, so memory stays bounded by CPython's own rule on a
server that only decodes. Garbage is collected as before, only at other instants.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable

NEVER = 1 << 30  # a threshold the automatic collector never reaches
MAX_POSTPONED_S = 60.0  # how long a due full collection may wait for a batch with room for it
FULL_MARGIN = 2.0  # a full collection runs in a batch with this many times its expected duration left


class BatchCollector:
    """Collects the older generations between batches' starts and deadlines (module docstring).
    `install` takes them from the automatic collector, `uninstall` gives them back."""

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self._clock = clock
        self._thresholds = gc.get_threshold()
        self._long_lived = 0  # objects in the oldest generation after the last full collection
        self._oldest = 0  # ... and at the last 25 % check
        self._checked_at = -1  # count2 at the last 25 % check (each check lists the oldest generation)
        self._ripe = False
        self._due_since: float | None = None  # when the due full collection was first postponed
        self.s_per_object = 0.0  # what the last full collection took per object it looked at
        self.collections = [0, 0, 0]  # collections run here, by generation

    def install(self) -> None:
        self._thresholds = gc.get_threshold()
        self._full()
        gc.set_threshold(self._thresholds[0], NEVER, NEVER)

    def uninstall(self) -> None:
        gc.set_threshold(*self._thresholds)

    def expected_full_s(self) -> float:
        """How long a full collection would take now (from the last one's seconds per object)."""
        return self.s_per_object * self._oldest

    def _full(self) -> None:
        looked_at = len(gc.get_objects())
        t = self._clock()
        gc.collect(2)
        self.s_per_object = (self._clock() - t) / max(1, looked_at)
        self._long_lived = self._oldest = len(gc.get_objects(generation=2))
        self._checked_at, self._ripe, self._due_since = -1, False, None

    def _full_due(self, count2: int) -> bool:
        if count2 <= self._thresholds[2]:
            return False
        if count2 != self._checked_at:  # a new middle-generation collection since the last look
            self._checked_at = count2
            self._oldest = len(gc.get_objects(generation=2))
            self._ripe = self._oldest - self._long_lived > self._long_lived // 4
        return self._ripe

    def during(self, budget_s: float) -> int | None:
        """Run the collection that is due, if any, within a batch that has ``budget_s`` seconds
        left; returns the generation collected (None: none was due or fitted)."""
        _, count1, count2 = gc.get_count()
        if self._full_due(count2):
            now = self._clock()
            self._due_since = now if self._due_since is None else self._due_since
            if self.expected_full_s() * FULL_MARGIN <= budget_s or now - self._due_since >= MAX_POSTPONED_S:
                self._full()
                self.collections[2] += 1
                return 2
        if count1 > self._thresholds[1]:
            gc.collect(1)
            self.collections[1] += 1
            return 1
        return None

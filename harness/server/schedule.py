"""Open-loop sending: requests go out at instants fixed in advance, not when earlier ones finish,
and the run measures how well the client kept to them.

- `sleep_until_ns(t_ns)`: wait for a `time.perf_counter_ns()` instant. asyncio's timers wake up
  to ~1 ms late (epoll's millisecond timeout, the loop's other work), so the wait sleeps until
  `SPIN_NS` before the instant and then yields to the loop turn by turn until it has come.
- `send_schedule(send, items)`: one task per item, each started `LEAD_NS` before its instant and
  calling `send(t_ns, ...)` (e.g. `StreamingClient.generate_at`, which builds the request first
  and writes it at its instant); returns the records in item order. Each result is collected as
  its task ends (no `gather` over every task once the last one is started: that took 5-8 ms for
  6,000 tasks, in one turn of the loop, just when the last 20 ms of sends were due).
- `young_collections_only()`: `send_schedule` runs inside it. Python's cyclic garbage collector
  stops the process for a time that grows with everything the process holds: 1-5 ms for its
  middle generation and 18-32 ms for a full collection of the harness (measured at 2,000
  requests/s on the 2-core box, docs/client-fidelity.md section 2), each time sends due then
  going out late by as much. Inside, only the youngest generation is collected (~0.3 ms, bounded
  by its threshold: young garbage is still freed); the older ones wait for the end of the window.
- `schedule_lag(records)`: sent_ns − scheduled_ns over the records that carry a schedule (pure):
  p50/p99/max in ms and `client_bound` when p99 is beyond `LAG_LIMIT_MS` (then the client, not
  the server, set the offered load, and latency figures of the run are suspect).
- `offsets_ns(rate_per_s, n, poisson, seed)`: constant-rate or Poisson arrival offsets.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import math
import random
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from harness.store.records import RequestRecord

SPIN_NS = 2_000_000  # the last 2 ms before an instant are waited for turn by turn
LEAD_NS = 20_000_000  # send_schedule starts each request this long before its instant
LAG_LIMIT_MS = 1.0  # schedule lag p99 beyond this: the run is client-bound
_NEVER = 1 << 30  # a collection threshold that is never reached

_young_only_depth = 0  # open windows of `young_collections_only` (they may overlap)
_saved_thresholds: tuple[int, ...] = ()

R = TypeVar("R")


async def sleep_until_ns(t_ns: int, *, spin_ns: int = SPIN_NS) -> None:
    """Return at the first turn of the event loop at or after `t_ns` (perf_counter_ns); at once
    when it has passed."""
    clock = time.perf_counter_ns
    left = t_ns - clock()
    if left > spin_ns:
        await asyncio.sleep((left - spin_ns) / 1e9)
    while clock() < t_ns:
        await asyncio.sleep(0)


def offsets_ns(rate_per_s: float, n: int, *, poisson: bool = False, seed: int = 0) -> list[int]:
    """`n` send offsets (ns from the start) at `rate_per_s`: evenly spaced, or exponential gaps
    (a Poisson process, seeded)."""
    if rate_per_s <= 0 or not math.isfinite(rate_per_s):
        raise ValueError(f"rate_per_s must be a positive number, not {rate_per_s!r}")
    gap = 1e9 / rate_per_s
    if not poisson:
        return [round(i * gap) for i in range(n)]
    rng = random.Random(seed)
    out, t = [], 0.0
    for _ in range(n):
        out.append(round(t))
        t += rng.expovariate(1.0) * gap
    return out


@contextlib.contextmanager
def young_collections_only() -> Iterator[None]:
    """While inside, the cyclic garbage collector collects its youngest generation only (as often
    as before); its older generations, whose collections take milliseconds, are left until the
    last of the overlapping windows ends, when the thresholds are restored as they were (the next
    automatic collection then catches up). A collector that was disabled stays disabled."""
    global _young_only_depth, _saved_thresholds
    if _young_only_depth == 0:
        _saved_thresholds = gc.get_threshold()
        gc.set_threshold(_saved_thresholds[0], _NEVER, _NEVER)
    _young_only_depth += 1
    try:
        yield
    finally:
        _young_only_depth -= 1
        if _young_only_depth == 0:
            gc.set_threshold(*_saved_thresholds)


async def send_schedule(
    send: Callable[..., Awaitable[R]],
    items: Iterable[tuple[int, tuple, dict]],
    *,
    start_ns: int | None = None,
    lead_ns: int = LEAD_NS,
) -> list[R]:
    """Call `send(start_ns + offset, *args, **kwargs)` for each `(offset, args, kwargs)`; the
    results in item order. Each call starts `lead_ns` before its instant (in time order), not all
    at once: building thousands of requests up front would itself make the first ones late.
    `start_ns` defaults to `lead_ns` from now. After a stall of the process (a loaded box), calls
    already due go out in the order the loop resumes them, not by instant: those started after the
    stall run before earlier ones still waiting on their timers (each record's lag says how late
    it went out). A call that raises (or is cancelled) ends the
    schedule: nothing more is started, the calls in progress are cancelled, the error is raised.
    Runs inside `young_collections_only`."""
    clock = time.perf_counter_ns
    base = clock() + lead_ns if start_ns is None else start_ns
    items = list(items)
    order = sorted(range(len(items)), key=lambda i: items[i][0])
    results: list[Any] = [None] * len(items)
    tasks: list[asyncio.Future | None] = [None] * len(items)
    over = asyncio.get_running_loop().create_future()  # every call returned, or one failed
    left = len(items) + 1  # the calls, and the starting of them

    def collect(i: int, task: asyncio.Future) -> None:
        nonlocal left
        if task.cancelled():
            failure: BaseException | None = asyncio.CancelledError()
        else:
            failure = task.exception()  # retrieved, as gather would
        if over.done():
            return
        if failure is not None:
            over.set_exception(failure)
            return
        results[i] = task.result()
        tasks[i] = None  # nothing left to cancel: let the task go
        left -= 1
        if left == 0:
            over.set_result(None)

    with young_collections_only():
        try:
            for i in order:
                if over.done():  # a call failed: start no more
                    break
                off, args, kwargs = items[i]
                due = base + off
                early = due - lead_ns - clock()
                if early > 0:
                    await asyncio.sleep(early / 1e9)
                task = asyncio.ensure_future(send(due, *args, **kwargs))
                task.add_done_callback(lambda t, i=i: collect(i, t))
                tasks[i] = task
            left -= 1
            if left == 0 and not over.done():
                over.set_result(None)
            await over
            return results
        except BaseException:
            if over.done() and not over.cancelled():
                over.exception()  # retrieved: the error raised here is the one that counts
            else:  # the calls cancelled below must not leave their CancelledError on it unretrieved
                over.cancel()
            for t in tasks:
                if t is not None:
                    t.cancel()
            raise


@dataclass(frozen=True)
class ScheduleLag:
    """How late the requests went out against their schedule (ms)."""

    n: int
    p50_ms: float | None
    p99_ms: float | None
    max_ms: float | None
    limit_ms: float
    client_bound: bool

    def to_dict(self) -> dict[str, Any]:
        return {
            "n": self.n,
            "p50_ms": self.p50_ms,
            "p99_ms": self.p99_ms,
            "max_ms": self.max_ms,
            "limit_ms": self.limit_ms,
            "client_bound": self.client_bound,
        }

    def line(self) -> str:
        if not self.n:
            return "schedule lag: no scheduled requests"
        verdict = "CLIENT-BOUND" if self.client_bound else "kept"
        return (
            f"schedule lag over {self.n} requests: p50 {self.p50_ms:.3f} ms, p99 {self.p99_ms:.3f} ms, "
            f"max {self.max_ms:.3f} ms (limit p99 {self.limit_ms:g} ms): {verdict}"
        )


def _quantile(sorted_values: Sequence[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default)."""
    pos = (len(sorted_values) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def schedule_lag(records: Iterable[RequestRecord], *, limit_ms: float = LAG_LIMIT_MS) -> ScheduleLag:
    """Lag = sent_ns − scheduled_ns of every record with a `scheduled_ns`. Early sends (negative
    lag) count as 0: a request is never sent before its instant."""
    lags = []
    for r in records:
        sched, sent = r.scheduled_ns, r.sent_ns
        if sched is None or sent is None:
            continue
        lags.append(max(0, sent - sched) / 1e6)
    if not lags:
        return ScheduleLag(0, None, None, None, limit_ms, False)
    lags.sort()
    p99 = _quantile(lags, 0.99)
    return ScheduleLag(
        len(lags), round(_quantile(lags, 0.5), 6), round(p99, 6), round(lags[-1], 6), limit_ms, p99 > limit_ms
    )

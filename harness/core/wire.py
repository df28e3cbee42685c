"""What the harness's HTTP client adds to every request beyond sglang's API, declared once for the
client (`harness.server.http1`) and the simulated server (`harness.sim.app`).

``SENT_HEADER``: the client's ``time.perf_counter_ns()`` at the instant it wrote the request — the
same instant ``sent_ns`` records, on Linux's system-wide CLOCK_MONOTONIC. sglang ignores it. The
simulator starts the request's modelled time there (`sent_age_s`), so its own CPU work before
the scheduler sees the request (HTTP parsing, JSON, validation, the previous request's cache
insert on the one event loop) is inside the modelled time, as a GPU server's host work is inside
its GPU time, instead of adding to it: on a loaded 2-core box that work is many times the
modelled time of a short prompt or a host hit, and it is what a twin night measured
(docs/simulator.md, "Time and a loaded box").
"""

from __future__ import annotations

SENT_HEADER = b"x-harness-sent-ns"
MAX_SENT_AGE_S = 0.5  # the most credited: the simulator's timeline never runs further behind (MAX_LAG_S)


def sent_age_s(value: str | bytes | None, now_ns: int) -> float:
    """How long ago (seconds) the client wrote a request whose `SENT_HEADER` is ``value``, read at
    ``now_ns`` (perf_counter_ns), at most `MAX_SENT_AGE_S`; 0 for a missing, malformed or future
    stamp. Pure."""
    if value is None:
        return 0.0
    try:
        sent = int(value)
    except (TypeError, ValueError):
        return 0.0
    age = (now_ns - sent) / 1e9
    return min(age, MAX_SENT_AGE_S) if age >= 0.0 else 0.0

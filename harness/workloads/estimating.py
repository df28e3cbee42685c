"""What a workload kind's estimate hook works with (`WorkloadKind.estimate`): the variant's pools
as the estimate sees them (`EstimateContext`), the result of one workload on one variant over
all repeats (`WorkEstimate`), and the token arithmetic they share. Pure; a leaf of the workload
package, so a kind can declare its estimate without importing `harness.run.estimate` (which reads
the kinds' declarations).

A hook is ``estimate(cfg, ctx) -> WorkEstimate`` (see `harness.run.estimate` for what "sent",
"computed" and "expected" mean). A kind that sends on a clock also says how long its clock
runs (``clock_s``: the run lasts at least that long whatever the server's speed) and how long
it waits on top of the serving (``idle_s``: think times).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.spec.values import TokenSize, resolve_tokens

MAMBA_TRACK_INTERVAL = 64  # sglang 0.5.17's mamba radix cache: states at 64-token boundaries


@dataclass(frozen=True)
class WorkEstimate:
    """One workload (or the quality arm) on one variant, all repeats together."""

    name: str
    kind: str
    requests: int
    sent_tokens: int | None  # None: unknown (a size needs the pool, or an unknown kind)
    computed_tokens: int | None  # upper bound: nothing comes back from the host tier
    expected_tokens: int | None  # a healthy stack: host-tier hits where the pools allow them
    output_tokens: int
    decode_s: float | None  # None: no decode speed given
    working_set_tokens: int | None = None
    # what the run will and will not exercise (no cache hit at all, no host-tier hit, refused
    # prompts): the design warnings, which need no speed (`harness.run.estimate.design_warnings`)
    warnings: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()  # what this estimate could not count (a size needs the pool, no speed)
    churn_requests: int = 0  # of ``requests``: the quality arm's churn, sent but never recorded
    clock_s: float = 0.0  # seconds its own clock runs (load points x duration, a trace's span), all repeats
    idle_s: float = 0.0  # seconds it waits on top of the serving (think times), all repeats

    def wall_s(self, tokens: int | None, prefill_tok_s: float | None) -> float | None:
        """Its duration when ``tokens`` of it are computed at ``prefill_tok_s``: the serving
        (prefill + decode) or its own clock, whichever is longer, plus its waits (None: no
        speed or no token count)."""
        if tokens is None or not prefill_tok_s:
            return None
        return max(self.clock_s, tokens / prefill_tok_s + (self.decode_s or 0.0)) + self.idle_s

    @property
    def recorded_requests(self) -> int:
        """The rows it appends to requests.jsonl / quality.jsonl (the churn is not recorded)."""
        return self.requests - self.churn_requests


class EstimateContext:
    """What every workload's arithmetic needs about its variant: the GPU pool ``P`` and host pool
    ``H`` (tokens; None when unknown), the context length, HiCache on or off, a hybrid model,
    the repeats, the decode speed and the scenario's folder (relative dataset paths)."""

    def __init__(
        self,
        gpu_tokens: int | None,
        host_tokens: int | None,
        context_tokens: int | None,
        hicache: bool,
        hybrid: bool,
        repeats: int,
        decode_tok_s: float | None,
        scenario_dir: Path | None = None,
        prefill_tok_s: float | None = None,
    ) -> None:
        self.hicache, self.hybrid = hicache, hybrid
        self.repeats, self.decode_tok_s, self.prefill_tok_s = repeats, decode_tok_s, prefill_tok_s
        self.P = gpu_tokens
        self.H = host_tokens if hicache else None
        self.scenario_dir = scenario_dir
        limits = [x for x in (context_tokens, self.P) if x is not None]
        self.max_input = min(limits) - 1 if limits else None  # sglang's max_req_input_len

    def size(self, value: Any) -> int | None:
        """Tokens of a scenario size, or None when it is "x pool" and the pool is unknown."""
        return size(value, self.P)

    def decode_s(self, steps: int) -> float | None:
        """Seconds to generate ``steps`` tokens one after another (None: no decode speed)."""
        return None if self.decode_tok_s is None else max(0, steps) / self.decode_tok_s

    def too_long(self, *lengths: int | None) -> list[str]:
        return [
            f"a {n:,}-token prompt exceeds what the server accepts (min(context, GPU pool) - 1 = "
            f"{self.max_input:,}): it will be refused"
            for n in lengths
            if n is not None and self.max_input is not None and n > self.max_input
        ]

    def aligned(self, what: str, n: int | None) -> list[str]:
        if self.hybrid and n is not None and n > 0 and n % MAMBA_TRACK_INTERVAL == 0:
            return [
                f"{what} {n:,} is a multiple of {MAMBA_TRACK_INTERVAL} on a hybrid model: its "
                f"repeats get no cache hit at all (sglang 0.5.17); use a length off the multiple"
            ]
        return []

    def evicted(self, traffic: int | None) -> bool:
        """Pushed out of the GPU pool by ``traffic`` tokens since its last use (itself included);
        True when the pool is unknown (the upper bound)."""
        return self.P is None or traffic is None or traffic > self.P

    def host_window(self, what: str, traffic: int | None) -> tuple[bool, list[str]]:
        """Can something come back from the host tier after ``traffic`` tokens since its last use
        (itself included)? (host hit expected, warnings) -- warnings only for HiCache variants."""
        if not self.hicache or traffic is None or self.P is None:
            return False, []
        x = traffic / self.P
        if traffic <= self.P:
            return False, [f"{what} {x:.2f}x GPU pool: stays on the GPU, no host-tier hits expected"]
        if self.H is None:
            return False, []
        hx = self.H / self.P
        if self.H <= self.P + max(1, self.P // 1000):
            return False, [
                f"{what} {x:.2f}x GPU pool, but the host pool is only {hx:.2f}x and keeps a copy "
                f"of every GPU page: no room for host-only pages, host-tier hits only by "
                f"accident of concurrency"
            ]
        if traffic > self.H:
            return False, [
                f"{what} {x:.2f}x GPU pool exceeds the host pool ({hx:.2f}x): pushed out of the "
                f"host tier too (LRU), no host-tier hits expected"
            ]
        return True, []


def point_requests(
    rate: float | None,
    cap: int | None,
    duration_s: float,
    computed_per_request: int,
    output_tokens: int,
    c: EstimateContext,
) -> tuple[int | None, list[str]]:
    """(requests, warnings) of one load point of ``duration_s``: ``rate`` x duration offered; a
    closed loop (no rate) of ``cap`` senders, or a capped rate, reaches at most what the stated
    speeds serve: prefill one request after another (``computed_per_request`` tokens each), decode
    together. None when that needs a prefill speed the caller did not give (the caller notes it:
    an estimate's gap, not a design warning)."""
    warn: list[str] = []
    serve_rps = None
    if c.prefill_tok_s:
        prefill_s = computed_per_request / c.prefill_tok_s
        decode_s = (max(0, output_tokens - 1) / c.decode_tok_s) if c.decode_tok_s else 0.0
        per_request_s = max(prefill_s + decode_s, 1e-6)
        serve_rps = min(cap / per_request_s if cap else math.inf, 1.0 / max(prefill_s, 1e-9))
    if rate is None:
        if serve_rps is None:
            return None, []  # a closed loop's count needs a prefill speed: the caller notes it
        return max(1, round(serve_rps * duration_s)), warn
    offered = rate * duration_s
    if serve_rps is not None and rate > serve_rps:
        warn.append(
            f"{rate:g} req/s offers {rate * computed_per_request:,.0f} prompt tok/s to compute, over what the "
            f"stated speeds serve (~{serve_rps:.3g} req/s): this point queues (past the knee)"
        )
        if cap is not None:  # the cap holds back what the server cannot take
            offered = min(offered, serve_rps * duration_s)
    return max(1, round(offered)), warn


NEEDS_POOL = '"x pool" sizes need the GPU pool: not counted'
NEEDS_SPEED = "a closed loop's request count needs a prefill speed: not counted"


def size(value: Any, pool: int | None) -> int | None:
    """Tokens of a scenario size, or None when it is "x pool" and the pool is unknown."""
    if value is None:
        return None
    ts = value if isinstance(value, TokenSize) else TokenSize.parse(value)
    if ts.relative and pool is None:
        return None
    return resolve_tokens(ts, pool)


def mul(*xs: int | None) -> int | None:
    out = 1
    for x in xs:
        if x is None:
            return None
        out *= x
    return out


def add(*xs: int | None) -> int | None:
    return None if any(x is None for x in xs) else sum(xs)  # type: ignore[arg-type]


def est(
    name: str,
    kind: str,
    requests: int,
    sent: int | None,
    computed: int | None,
    expected: int | None,
    outputs: int,
    decode_s: float | None,
    warnings: Iterable[str] = (),
    working_set: int | None = None,
    clock_s: float = 0.0,
    idle_s: float = 0.0,
    notes: Iterable[str] = (),
) -> WorkEstimate:
    return WorkEstimate(
        name=name,
        kind=kind,
        requests=requests,
        sent_tokens=sent,
        computed_tokens=computed,
        expected_tokens=expected,
        output_tokens=outputs,
        decode_s=decode_s,
        working_set_tokens=working_set,
        warnings=tuple(dict.fromkeys(warnings)),
        notes=tuple(dict.fromkeys(notes)),
        clock_s=clock_s,
        idle_s=idle_s,
    )

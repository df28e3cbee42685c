"""One simulated generation request: its sampling parameters, everything the scheduler learns
about it (`SimRequest`), and the error sglang answers with HTTP 400 (`RequestError`).
"""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass, field

from harness.sim.cache import Page


@dataclass
class SamplingParams:
    max_new_tokens: int = 128
    temperature: float = 1.0
    ignore_eos: bool = False
    sampling_seed: int | None = None


# an aborted request's finish_reason, as sglang's FINISH_ABORT().to_json() has it
ABORT_REASON = {"type": "abort", "message": "Aborted", "status_code": None, "err_type": None}


class RequestError(Exception):
    """A request sglang would answer with HTTP 400."""


@dataclass(eq=False)
class SimRequest:
    """One generation request and everything the scheduler learns about it."""

    rid: str
    input_ids: list[int]
    sampling: SamplingParams
    return_logprob: bool = False
    top_logprobs_num: int = 0
    internal: bool = False  # /health_generate and warm-up: not counted anywhere
    crash: bool = False  # the crash_at_request fault picked this one
    hang: bool = False  # the hang_at_request fault picked this one
    stall: bool = False  # the stall_every fault picked this one: its first-token batch takes 2x
    # filled by the scheduler
    updates: asyncio.Queue = field(default_factory=asyncio.Queue)
    created: float = field(default_factory=time.perf_counter)
    arrived: float = 0.0  # loop time the client sent it (submit() less its age): the earliest its prefill may start
    first_token_at: float | None = None
    finished_at: float | None = None
    locked: list[Page] = field(default_factory=list)
    prefilled: int = 0
    cached_device: int = 0
    cached_host: int = 0
    cached_storage: int = 0
    reported_cached: int | None = None  # declined_host_load: cached_tokens is this, not the breakdown's sum
    storage_bytes: int = 0  # prefetched from storage at admission (costed in its first batch)
    reserved: int = 0
    load_bytes: int = 0
    admitted: bool = False
    ckpts: set[int] = field(default_factory=set)
    state: int = 0
    ref_state: int | None = None  # uncorrupted state, for corrupt_host_load
    noise: random.Random | None = None  # near_tie_flips: this request's kernel noise (cache hits only)
    rng: random.Random | None = None
    output_ids: list[int] = field(default_factory=list)
    output_logprobs: list[float] = field(default_factory=list)
    output_top: list[list[tuple[float, int]]] = field(default_factory=list)
    finish_reason: dict | None = None
    error: str | None = None
    abort_requested: bool = False  # the client went away (`Engine.abort`): finished at its next step
    # sglang's scheduler time stats (loop time; `queue_time` = forward_entry - arrived):
    forward_entry_at: float | None = None  # the modelled start of the first prefill batch it is in
    prefill_finished_at: float | None = None  # the modelled end of the batch that finished its prompt

    @property
    def cached_tokens(self) -> int:
        if self.reported_cached is not None:
            return self.reported_cached
        return self.cached_device + self.cached_host + self.cached_storage

    @property
    def done(self) -> bool:
        return self.finish_reason is not None or self.error is not None

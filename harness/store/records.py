"""Typed per-request records: what one request sent, when each chunk came back, what the server said.

Timestamps are raw integer nanoseconds from `time.perf_counter_ns` (CLOCK_MONOTONIC on Linux,
epoch-free); `wall_start` is the unix time at send, for lining rows up with samples and logs.
Metrics (TTFT, ITL, hit fractions, ...) are derived from these fields by `harness.measures.metrics`;
nothing derived is stored here, so a fixed metric definition recomputes from old runs.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any


@dataclass
class RequestRecord:
    """One request, as measured by `harness.server.client` and labelled by a workload.

    cached_device/cached_host/cached_storage are None when the server did not report tiers
    (see docs in harness/server/client.py: a null `cached_tokens_details` with `cached_tokens == 0`
    is a miss and gives 0/0/0; with `cached_tokens > 0` it gives None: "not reported").
    `top_logprobs` is one list per output position of `[token_id, logprob]` pairs.
    """

    variant: str
    workload: str
    phase: str
    repeat: int
    index: int
    rid: str
    warmup: bool = False
    concurrency_group: str | None = None
    prompt_len: int = 0
    input_hash: str = ""
    wall_start: float = 0.0
    sent_ns: int = 0
    first_token_ns: int | None = None
    chunk_ns: list[int] = field(default_factory=list)
    chunk_new_tokens: list[int] = field(default_factory=list)
    done_ns: int | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int | None = None
    cached_device: int | None = None
    cached_host: int | None = None
    cached_storage: int | None = None
    output_ids: list[int] = field(default_factory=list)
    text: str | None = None
    output_logprobs: list[float] | None = None
    top_logprobs: list[list[list[float]]] | None = None
    finish_reason: str | None = None
    error: str | None = None
    # perf_counter_ns the request was scheduled for (open-loop sends, `StreamingClient.generate_at`);
    # None when it was sent as soon as it could be. sent_ns - scheduled_ns is the client's lag.
    scheduled_ns: int | None = None
    # sglang's meta_info.queue_time: its scheduler's first prefill batch − wait-queue entry, seconds
    # (the request's queueing, storage prefetch included); sent only with --enable-metrics, None
    # when the server did not send it
    queue_time_s: float | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def to_json(self) -> str:
        """One JSONL line (no trailing newline)."""
        return json.dumps(self.to_dict(), separators=(",", ":"), ensure_ascii=False)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "RequestRecord":
        """Build from a stored row; unknown keys are ignored (forward-compatible readers),
        missing optional keys take their defaults."""
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})

    @classmethod
    def from_json(cls, line: str) -> "RequestRecord":
        return cls.from_dict(json.loads(line))

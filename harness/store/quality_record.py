"""The QualityRecord: one quality question asked once of one server (a quality.jsonl line).

One job: the typed, serialisable record. Raw outputs only (ids, logprobs, top-k, cache tiers);
parity and accuracy summaries are derived from these by `harness.quality.parity`.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from harness.store.stored_fields import from_keys

QUALITY_RECORD_VERSION = 1

SampleKey = tuple[str, int, int, int]  # (task, length_target, index, seed)


@dataclass
class QualityRecord:
    """One ask of one sample. ``ask`` 0 is the cold ask; 1.. are re-asks after churn.
    ``arm_role`` is ``on`` (a HiCache variant), ``off`` (the baseline) or ``control`` (the
    baseline's second pass, the OFF-vs-OFF nondeterminism floor). ``correct``/``score`` are None
    in token-id mode or when nothing could be decoded.

    ``churn`` is what was sent before this ask to push the sample out of the GPU pool (None for
    ask 0 and the control's re-asks): ``{"tokens", "accepted", "requests", "failed", "error",
    "chunk"}``. ``churn_plan`` is the arm's `harness.quality.churn.ChurnPlan` as a dict (pool
    sizes, the window, the note); parity quotes both when the re-asks missed the host tier."""

    variant: str
    arm_role: str
    task: str
    length_target: int
    index: int
    seed: int
    ask: int
    mode: str = "token_ids"
    prompt_tokens: int = 0
    input_hash: str = ""
    rid: str = ""
    output_ids: list[int] = field(default_factory=list)
    output_logprobs: list[float] | None = None
    top_logprobs: list[list[list[float]]] | None = None
    cached_tokens: int | None = None
    cached_device: int | None = None
    cached_host: int | None = None
    cached_storage: int | None = None
    text: str | None = None
    answer: str | list[str] | None = None
    correct: bool | None = None
    score: float | None = None
    finish_reason: str | None = None
    error: str | None = None
    sent_ns: int = 0
    first_token_ns: int | None = None
    done_ns: int | None = None
    churn: dict[str, Any] | None = None
    churn_plan: dict[str, Any] | None = None

    @property
    def sample_key(self) -> SampleKey:
        return (self.task, self.length_target, self.index, self.seed)

    @property
    def host_hit(self) -> bool:
        """KV came back through the host tier: from the host pool, or from storage (L3), whose
        pages sglang prefetches into the host pool and loads back from there."""
        return bool(self.cached_host) or bool(self.cached_storage)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def to_json(self) -> str:
        """One JSONL line (no trailing newline)."""
        return json.dumps(self.to_dict(), separators=(",", ":"), ensure_ascii=False)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> QualityRecord:
        """From a stored row; unknown keys ignored, missing optional keys defaulted."""
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})


@dataclass(frozen=True)
class ParityFloor:
    """The parity verdict's test as stored (``floor`` of the summary's ``quality.parity``, or of
    parity.json; `harness.quality.floor`): its name, p against alpha, the paired keys it counted,
    and the ON-vs-OFF and OFF-vs-OFF (control) spreads, each {figure: value} as written."""

    test: Any
    p_value: Any
    alpha: Any
    significant: Any
    keys: Any
    on_worse: Any
    control_worse: Any
    ties: Any
    min_keys: Any
    on: Mapping[str, Any]
    control: Mapping[str, Any]

    @classmethod
    def from_json(cls, data: Any) -> ParityFloor | None:
        """None for a floor that is absent or empty."""
        if not data or not isinstance(data, Mapping):
            return None
        on, control = data.get("on"), data.get("control")
        return from_keys(
            cls, data, on=on if isinstance(on, Mapping) else {}, control=control if isinstance(control, Mapping) else {}
        )

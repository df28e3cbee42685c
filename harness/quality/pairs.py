"""One compared pair: a sample's reference (OFF) output against a candidate's (ON or the control).
A leaf of the quality package: the floor test and the parity verdict both read it."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Literal

Kind = Literal["equal", "tie_flip", "divergence"]


@dataclass(frozen=True)
class PairComparison:
    """One sample and ask: the reference (OFF) output against the candidate (ON or control)."""

    task: str
    length_target: int
    index: int
    seed: int
    ask: int
    token_equal: bool
    compared_tokens: int
    first_divergence: int | None
    ref_token: int | None
    cand_token: int | None
    cand_in_ref_topk: bool | None
    ref_in_cand_topk: bool | None
    ref_margin: float | None
    tie_flip: bool
    max_abs_dlogprob: float | None
    kind: Kind
    ref_correct: bool | None
    cand_correct: bool | None
    cand_cached_host: int | None = None
    noise: bool = False

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

"""One compared pair: a sample's reference (OFF) output against a candidate's (ON or the control),
and how two outputs are compared (`compare_outputs`: first divergence, top-k membership, tie flips,
|Δ logprob|). A leaf of the quality package: the floor test and the parity verdict both read it."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from harness.store.quality_record import QualityRecord

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


def _topk_map(top: Any, pos: int, k: int) -> dict[int, float] | None:
    if not top or pos >= len(top) or top[pos] is None:
        return None
    pairs = sorted(((int(p[0]), float(p[1])) for p in top[pos]), key=lambda x: -x[1])[:k]
    return dict(pairs)


def compare_outputs(ref: Any, cand: Any, tie_epsilon: float = 0.05, top_k: int = 5) -> PairComparison:
    """Compare two records of the same sample and ask (``ref`` is the OFF arm). Each needs
    ``output_ids``, ``output_logprobs``, ``top_logprobs``, ``correct`` and the sample fields."""
    a, b = list(ref.output_ids), list(cand.output_ids)
    n = min(len(a), len(b))
    d = next((i for i in range(n) if a[i] != b[i]), None)
    if d is None and len(a) != len(b):
        d = n
    equal = d is None
    upto = n if d is None else d
    la, lb = ref.output_logprobs, cand.output_logprobs
    dlp: float | None = None
    if la is not None and lb is not None:
        m = min(upto, len(la), len(lb))
        dlp = max((abs(float(la[i]) - float(lb[i])) for i in range(m)), default=0.0)
    ref_tok = cand_tok = None
    cand_in_ref = ref_in_cand = None
    margin = None
    tie = False
    if d is not None:
        ref_tok = a[d] if d < len(a) else None
        cand_tok = b[d] if d < len(b) else None
        ref_top = _topk_map(ref.top_logprobs, d, top_k)
        cand_top = _topk_map(cand.top_logprobs, d, top_k)
        if ref_top is not None and cand_tok is not None:
            cand_in_ref = cand_tok in ref_top
        if cand_top is not None and ref_tok is not None:
            ref_in_cand = ref_tok in cand_top
        if ref_top is not None and len(ref_top) >= 2:
            lps = sorted(ref_top.values(), reverse=True)
            margin = lps[0] - lps[1]
            if cand_tok is not None and cand_tok in ref_top:
                tie = margin <= tie_epsilon and lps[0] - ref_top[cand_tok] <= tie_epsilon
    kind: Kind = "equal" if equal else ("tie_flip" if tie else "divergence")
    return PairComparison(
        task=ref.task,
        length_target=ref.length_target,
        index=ref.index,
        seed=ref.seed,
        ask=ref.ask,
        token_equal=equal,
        compared_tokens=n,
        first_divergence=d,
        ref_token=ref_tok,
        cand_token=cand_tok,
        cand_in_ref_topk=cand_in_ref,
        ref_in_cand_topk=ref_in_cand,
        ref_margin=margin,
        tie_flip=tie,
        max_abs_dlogprob=dlp,
        kind=kind,
        ref_correct=ref.correct,
        cand_correct=cand.correct,
        cand_cached_host=_through_host(cand),
    )


def _through_host(rec: QualityRecord) -> int | None:
    """Tokens whose KV came back through the host tier: host hits plus storage (L3) hits, which
    sglang prefetches into the host pool first. None when the server reported neither."""
    host, storage = rec.cached_host, rec.cached_storage
    return None if host is None and storage is None else (host or 0) + (storage or 0)

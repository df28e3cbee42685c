"""ON-vs-OFF output parity: per-sample comparison, per task × length aggregation, verdicts.

One job, pure: two arms' QualityRecords (and optionally the OFF-vs-OFF control) → ParityReport.

Per compared pair (same sample, same ask; OFF is the reference arm):
- ``token_equal``; ``first_divergence`` (index of the first differing output token, or of the
  shorter output's end);
- ``cand_in_ref_topk`` / ``ref_in_cand_topk``: whether each side's token at the divergence is in
  the other side's top-k (k = ``top_k``, 5) logprobs there;
- ``tie_flip``: at the divergence OFF's top-1 and top-2 logprobs are within ``tie_epsilon`` and
  ON's token is one of OFF's tokens within ``tie_epsilon`` of OFF's top-1 — a near-tie that a
  numerically different (but correct) kernel may resolve the other way;
- ``max_abs_dlogprob``: max |Δ logprob| of the chosen tokens before the divergence (the whole
  output when token-equal) — non-zero on equal tokens shows numerical drift;
- ``kind``: ``equal`` | ``tie_flip`` | ``divergence`` (anything else: a token outside the
  other's top-k, or a flip between tokens that were not near-tied);
- correctness: ``ref_correct`` / ``cand_correct`` (None in token-id mode);
- ``noise``: the control (OFF asked again) also differs from OFF for this sample and ask, at or
  before this divergence — the difference is within the baseline's own nondeterminism (P13).

Per task × length group, verdicts, first rule that applies:
1. ``FAIL``: a ``divergence`` not labelled noise (unless the group's differences are within
   the control's floor, rule 4), or a significant accuracy loss: McNemar's exact test on the
   discordant pairs (OFF right/ON wrong vs OFF wrong/ON right) with p < ``alpha`` and more
   losses than gains.
2. ``NOT_EXERCISED``: no ON request of the group had host-tier hits (parity was not tested;
   never PASS, P12).
3. ``PASS``: every pair token-equal.
4. ``PASS`` with ``baseline_noise``: all differences are labelled noise, or the group has no
   more differing pairs than the control and none of a worse kind than the control's worst.
5. ``WARN``: the remaining differences are tie flips only (no significant accuracy loss).

Overall: ``FAIL`` if any group fails; else ``NOT_EXERCISED`` if the ON arm got zero host-tier
hits at all; else ``WARN`` if any exercised group warns; else ``PASS`` (``baseline_noise`` set
when any group passed only as noise). Groups that were not exercised are listed either way.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Iterable, Literal

from harness.quality.record import QualityRecord

Verdict = Literal["PASS", "WARN", "FAIL", "NOT_EXERCISED"]
Kind = Literal["equal", "tie_flip", "divergence"]
VERDICTS: tuple[str, ...] = ("PASS", "WARN", "FAIL", "NOT_EXERCISED")
_SEVERITY = {"equal": 0, "tie_flip": 1, "divergence": 2}


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


@dataclass(frozen=True)
class GroupReport:
    task: str
    length_target: int
    verdict: Verdict
    baseline_noise: bool
    pairs: int
    token_equal: int
    tie_flips: int
    divergences: int
    outside_topk: int
    noise_pairs: int
    first_divergence_min: int | None
    max_abs_dlogprob: float | None
    host_hit_requests: int
    on_requests: int
    accuracy_on: float | None
    accuracy_off: float | None
    on_lost: int
    on_gained: int
    mcnemar_p: float | None
    control_pairs: int
    control_differing: int
    control_worst: Kind | None
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class ParityReport:
    verdict: Verdict
    baseline_noise: bool
    host_hit_requests: int
    on_requests: int
    reasks: int
    reasks_with_host_hit: int
    pairs: int
    unmatched_on: int
    errors: int
    groups: tuple[GroupReport, ...]
    not_exercised_groups: tuple[tuple[str, int], ...]
    comparisons: tuple[PairComparison, ...]
    control_comparisons: tuple[PairComparison, ...] = field(default=())
    tie_epsilon: float = 0.05
    top_k: int = 5
    reason: str = ""

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


# ---------------------------------------------------------------------------------------------


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
        cand_cached_host=getattr(cand, "cached_host", None),
    )


def mcnemar_exact_p(lost: int, gained: int) -> float:
    """Two-sided exact McNemar p-value: binomial test of ``lost`` out of the ``lost + gained``
    discordant pairs against p = 0.5. 1.0 when there are no discordant pairs."""
    n = lost + gained
    if n == 0:
        return 1.0
    from scipy.stats import binomtest

    return float(binomtest(lost, n, 0.5).pvalue)


def _as_record(r: Any) -> QualityRecord:
    return r if isinstance(r, QualityRecord) else QualityRecord.from_dict(r)


def _cfg(cfg: Any, name: str, default: Any) -> Any:
    if cfg is None:
        return default
    v = cfg.get(name, default) if isinstance(cfg, dict) else getattr(cfg, name, default)
    return default if v is None else v


def _pairs(
    ref_recs: list[QualityRecord], cand_recs: list[QualityRecord], eps: float, k: int
) -> tuple[list[PairComparison], int, int]:
    """Compare matching (sample, ask) records; returns (pairs, unmatched cand, errored)."""
    ref_by = {(r.sample_key, r.ask): r for r in ref_recs if r.error is None}
    out: list[PairComparison] = []
    unmatched = errors = 0
    for c in cand_recs:
        if c.error is not None:
            errors += 1
            continue
        r = ref_by.get((c.sample_key, c.ask))
        if r is None:
            unmatched += 1
            continue
        out.append(compare_outputs(r, c, eps, k))
    return out, unmatched, errors


def _group_verdict(
    comps: list[PairComparison], controls: list[PairComparison], host_hits: int, alpha: float
) -> tuple[Verdict, bool, str, int, int, float | None]:
    lost = sum(1 for c in comps if c.ref_correct is True and c.cand_correct is False)
    gained = sum(1 for c in comps if c.ref_correct is False and c.cand_correct is True)
    scored = any(c.ref_correct is not None and c.cand_correct is not None for c in comps)
    p = mcnemar_exact_p(lost, gained) if scored else None
    diffs = [c for c in comps if c.kind != "equal"]
    ctrl_diffs = [c for c in controls if c.kind != "equal"]
    worst = max((_SEVERITY[c.kind] for c in diffs), default=0)
    ctrl_worst = max((_SEVERITY[c.kind] for c in ctrl_diffs), default=0)
    within_floor = bool(ctrl_diffs) and len(diffs) <= len(ctrl_diffs) and worst <= ctrl_worst
    real = [c for c in diffs if c.kind == "divergence" and not c.noise]
    if p is not None and p < alpha and lost > gained:
        return "FAIL", False, f"accuracy loss: {lost} lost vs {gained} gained, McNemar p={p:.3g}", lost, gained, p
    if real and not within_floor:
        c = min(real, key=lambda x: x.first_divergence or 0)
        where = "outside the other's top-k" if c.cand_in_ref_topk is False or c.ref_in_cand_topk is False else "not a near-tie"
        return (
            "FAIL",
            False,
            f"{len(real)} real divergence(s); first at token {c.first_divergence} "
            f"(sample {c.index}, ask {c.ask}): {where}",
            lost,
            gained,
            p,
        )
    if host_hits == 0:
        return "NOT_EXERCISED", False, "no ON request had host-tier hits", lost, gained, p
    if not diffs:
        return "PASS", False, "token-equal", lost, gained, p
    if all(c.noise for c in diffs) or within_floor:
        return "PASS", True, f"{len(diffs)} difference(s) within the OFF-vs-OFF control (baseline noise)", lost, gained, p
    return "WARN", False, f"{sum(1 for c in diffs if c.kind == 'tie_flip' and not c.noise)} tie flip(s)", lost, gained, p


def _mean(xs: list[bool]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def evaluate_parity(
    on_records: Iterable[Any],
    off_records: Iterable[Any],
    control_records: Iterable[Any] | None = None,
    cfg: Any = None,
    *,
    alpha: float = 0.05,
) -> ParityReport:
    """Compare an ON variant's quality records with the OFF baseline's (same sample, same ask).

    Records may be QualityRecords or their dicts (quality.jsonl rows). If ``control_records``
    is None, baseline records with ``arm_role == "control"`` among ``off_records`` are used.
    ``cfg`` (the scenario's quality block, or a dict) gives ``tie_epsilon`` and
    ``top_logprobs`` (top-k, capped at 5)."""
    eps = float(_cfg(cfg, "tie_epsilon", 0.05))
    k = min(5, int(_cfg(cfg, "top_logprobs", 5)) or 5)
    on = [_as_record(r) for r in on_records]
    off_all = [_as_record(r) for r in off_records]
    off = [r for r in off_all if r.arm_role != "control"]
    ctrl = (
        [_as_record(r) for r in control_records]
        if control_records is not None
        else [r for r in off_all if r.arm_role == "control"]
    )

    comps, unmatched, errors = _pairs(off, on, eps, k)
    ctrl_comps, _, _ = _pairs(off, ctrl, eps, k)
    ctrl_by = {(c.task, c.length_target, c.index, c.seed, c.ask): c for c in ctrl_comps}

    def label(c: PairComparison) -> PairComparison:
        cc = ctrl_by.get((c.task, c.length_target, c.index, c.seed, c.ask))
        if c.kind == "equal" or cc is None or cc.kind == "equal":
            return c
        noisy = (cc.first_divergence or 0) <= (c.first_divergence or 0)
        return dataclasses.replace(c, noise=noisy)

    comps = [label(c) for c in comps]
    by_group: dict[tuple[str, int], list[PairComparison]] = defaultdict(list)
    for c in comps:
        by_group[(c.task, c.length_target)].append(c)
    ctrl_group: dict[tuple[str, int], list[PairComparison]] = defaultdict(list)
    for c in ctrl_comps:
        ctrl_group[(c.task, c.length_target)].append(c)
    on_group: dict[tuple[str, int], list[QualityRecord]] = defaultdict(list)
    for r in on:
        on_group[(r.task, r.length_target)].append(r)

    groups: list[GroupReport] = []
    for key in sorted(set(by_group) | set(on_group)):
        cs, ctl, ors = by_group.get(key, []), ctrl_group.get(key, []), on_group.get(key, [])
        hh = sum(1 for r in ors if r.error is None and r.host_hit)
        verdict, noise, reason, lost, gained, p = _group_verdict(cs, ctl, hh, alpha)
        if not cs:
            verdict, noise, reason = "NOT_EXERCISED", False, "no comparable pairs (missing OFF records or errors)"
        fds = [c.first_divergence for c in cs if c.first_divergence is not None]
        dl = [c.max_abs_dlogprob for c in cs if c.max_abs_dlogprob is not None]
        ctrl_diff = [c for c in ctl if c.kind != "equal"]
        groups.append(
            GroupReport(
                task=key[0],
                length_target=key[1],
                verdict=verdict,
                baseline_noise=noise,
                pairs=len(cs),
                token_equal=sum(c.token_equal for c in cs),
                tie_flips=sum(c.kind == "tie_flip" for c in cs),
                divergences=sum(c.kind == "divergence" for c in cs),
                outside_topk=sum(c.cand_in_ref_topk is False or c.ref_in_cand_topk is False for c in cs),
                noise_pairs=sum(c.noise for c in cs),
                first_divergence_min=min(fds) if fds else None,
                max_abs_dlogprob=max(dl) if dl else None,
                host_hit_requests=hh,
                on_requests=len(ors),
                accuracy_on=_mean([c.cand_correct for c in cs if c.cand_correct is not None]),
                accuracy_off=_mean([c.ref_correct for c in cs if c.ref_correct is not None]),
                on_lost=lost,
                on_gained=gained,
                mcnemar_p=p,
                control_pairs=len(ctl),
                control_differing=len(ctrl_diff),
                control_worst=max((c.kind for c in ctrl_diff), key=_SEVERITY.__getitem__, default=None),
                reason=reason,
            )
        )

    host_hits = sum(1 for r in on if r.error is None and r.host_hit)
    reasks = [r for r in on if r.ask >= 1 and r.error is None]
    not_ex = tuple((g.task, g.length_target) for g in groups if g.verdict == "NOT_EXERCISED")
    exercised = [g for g in groups if g.verdict != "NOT_EXERCISED"]
    if any(g.verdict == "FAIL" for g in groups):
        overall: Verdict = "FAIL"
        reason = "; ".join(f"{g.task}@{g.length_target}: {g.reason}" for g in groups if g.verdict == "FAIL")
    elif host_hits == 0 or not comps or not exercised:
        overall = "NOT_EXERCISED"
        if host_hits == 0:
            reason = "the ON arm got no host-tier hits"
        elif not comps:
            reason = "no comparable pairs"
        else:
            reason = "no group had both host-tier hits and comparable pairs"
    elif any(g.verdict == "WARN" for g in exercised):
        overall = "WARN"
        reason = "; ".join(f"{g.task}@{g.length_target}: {g.reason}" for g in exercised if g.verdict == "WARN")
    else:
        overall = "PASS"
        reason = "all exercised groups pass"
        if not_ex:
            reason += f"; not exercised: {', '.join(f'{t}@{n}' for t, n in not_ex)}"
    return ParityReport(
        verdict=overall,
        baseline_noise=overall == "PASS" and any(g.baseline_noise for g in exercised),
        host_hit_requests=host_hits,
        on_requests=len(on),
        reasks=len(reasks),
        reasks_with_host_hit=sum(1 for r in reasks if r.host_hit),
        pairs=len(comps),
        unmatched_on=unmatched,
        errors=errors,
        groups=tuple(groups),
        not_exercised_groups=not_ex,
        comparisons=tuple(comps),
        control_comparisons=tuple(ctrl_comps),
        tie_epsilon=eps,
        top_k=k,
        reason=reason,
    )

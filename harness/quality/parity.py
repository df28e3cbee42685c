"""ON-vs-OFF output parity: per-sample comparison, the test against the control, verdicts.

One job, pure: two arms' QualityRecords (and the OFF-vs-OFF control) → ParityReport.

Per compared pair (same sample, same ask; OFF is the reference arm):
- ``token_equal``; ``first_divergence`` (index of the first differing output token, or of the
  shorter output's end);
- ``cand_in_ref_topk`` / ``ref_in_cand_topk``: whether each side's token at the divergence is in
  the other side's top-k (k = ``top_k``, 5) logprobs there;
- ``tie_flip``: at the divergence OFF's top-1 and top-2 logprobs are within ``tie_epsilon`` and
  ON's token is one of OFF's tokens within ``tie_epsilon`` of OFF's top-1;
- ``max_abs_dlogprob``: max |Δ logprob| of the chosen tokens before the divergence (the whole
  output when token-equal);
- ``kind``: ``equal`` | ``tie_flip`` | ``divergence`` (anything else);
- correctness: ``ref_correct`` / ``cand_correct`` (None in token-id mode);
- ``noise``: the control also differs from OFF for this sample and ask, at or before this
  divergence (descriptive; the verdict does not read single pairs).

The decision reads distributions, never a single pair (`harness.quality.floor`): every ON pair
is set against the control pair of the same (sample, ask) -- which of the two strays further
from OFF -- and a one-sided exact sign test asks whether ON strays further more often than
chance. Overall verdict, first rule that applies (alpha = ``ALPHA``, 0.01):
1. ``FAIL``: the sign test is significant (p < alpha) and at least one key where ON strayed
   further is a real divergence (not a near-tie flip); or the control is exact (bit-identical:
   a deterministic server) and some host-hit key diverges outside the top-k, whatever the count
   of keys; or ON's real-divergence rate over its host-hit re-asks exceeds the control's over
   its re-asks (Fisher exact, every key, paired or not); or a significant accuracy loss (McNemar
   exact p < alpha over all pairs, more losses than gains). Reported even without host hits.
2. ``NOT_EXERCISED``: no ON request had host-tier hits (the reason names the cause), or no
   comparable pairs, or no group with both.
3. ``PASS``: every pair token-equal with |Δ logprob| <= 1e-3 (a deterministic server: exact,
   with or without a control).
4. ``INCONCLUSIVE``: ON differs and there is no control, or fewer than ``min_keys(alpha)`` (7)
   paired keys had host hits and the rate test's counts cannot reach alpha either -- too few
   for any outcome to be significant.
5. ``WARN``: significant, but every key where ON strayed further is a near-tie flip or
   logprob drift.
6. ``PASS`` with ``baseline_noise``: ON differs, not significantly more than the control.
Groups (task × length) carry the same counts and their own p-value for reading; a group is
FAIL / WARN where the overall test's ON-worse keys fall, NOT_EXERCISED without host hits.
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from statistics import median
from typing import Any, Literal

from harness.quality.config import Quality
from harness.quality.floor import (
    DLOGPROB_TOL,
    FloorTest,
    RateTest,
    differs,
    exact_control,
    exact_divergences,
    floor_test,
    outside_topk,
    pair_key,
    rate_test,
    real_divergence,
)
from harness.quality.pairs import Kind, PairComparison, compare_outputs
from harness.store.quality_record import QualityRecord

Verdict = Literal["PASS", "WARN", "FAIL", "NOT_EXERCISED", "INCONCLUSIVE"]
VERDICTS: tuple[str, ...] = ("PASS", "WARN", "FAIL", "NOT_EXERCISED", "INCONCLUSIVE")
ALPHA = 0.01  # significance a FAIL needs: ~1% false FAILs on a healthy nondeterministic server
_SEVERITY = {"equal": 0, "tie_flip": 1, "divergence": 2}


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
    on_worse: int  # keys where ON strayed further from OFF than the control
    control_worse: int
    p_value: float | None  # the group's own sign test (for reading; the verdict uses the pooled one)
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
    alpha: float = ALPHA
    host_keys: int = 0  # paired (sample, ask) keys whose ON ask had host hits
    on_lost: int = 0
    on_gained: int = 0
    mcnemar_p: float | None = None
    floor: FloorTest | None = None  # the test's numbers: name, p, n per arm, both spreads
    rate: RateTest | None = None  # ON's real-divergence rate vs the control's, every key
    control_exact: bool = False  # the OFF-vs-OFF control has pairs and is bit-identical

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


# ---------------------------------------------------------------------------------------------


def mcnemar_exact_p(lost: int, gained: int) -> float:
    """Two-sided exact McNemar p-value: binomial test of ``lost`` out of the ``lost + gained``
    discordant pairs against p = 0.5. 1.0 when there are no discordant pairs."""
    n = lost + gained
    if n == 0:
        return 1.0
    # X ~ Binomial(n, 1/2) is symmetric: the outcomes as unlikely as min(lost, gained) are both
    # tails (scipy's binomtest two-sided, exactly, without scipy in the run's dependencies)
    tail = math.fsum(math.comb(n, i) for i in range(min(lost, gained) + 1)) / 2.0**n
    return min(1.0, 2.0 * tail)


def _as_record(r: Any) -> QualityRecord:
    return r if isinstance(r, QualityRecord) else QualityRecord.from_dict(r)


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


def _mode_error(recs: list[QualityRecord]) -> tuple[str, int]:
    errs = Counter(r.error for r in recs if r.error is not None)
    return errs.most_common(1)[0] if errs else ("", 0)


def host_miss_cause(on: list[QualityRecord]) -> str:
    """Why none of these ON records had host-tier hits, from their churn and cache fields:
    e.g. "0 of 8 re-asks hit the host tier: churn 6144 tokens < GPU pool 8192: ..."."""
    reasks = [r for r in on if r.ask >= 1]
    hits = sum(1 for r in reasks if r.error is None and r.host_hit)
    head = f"{hits} of {len(reasks)} re-asks hit the host tier"
    if not reasks:
        return "no re-asks were made" if on else "no ON records"
    ok = [r for r in reasks if r.error is None]
    plan = next((r.churn_plan for r in on if r.churn_plan), None) or {}
    limit = plan.get("max_input")
    longest = max((r.prompt_tokens for r in on), default=0)
    if not ok:
        err, n = _mode_error(reasks)
        why = (
            f" (prompts of {longest} tokens; the server takes at most {limit + 1})"
            if limit and longest > limit + 1
            else ""
        )
        return f"{head}: every re-ask failed ({err} x{n}){why}"
    if all(r.cached_host is None for r in ok) and any(r.cached_tokens for r in ok):
        return (
            f"{head}: the server does not report cache tiers (meta_info.cached_tokens_details missing), "
            "so host hits cannot be seen"
        )
    if plan and not plan.get("tokens"):
        return f"{head}: {plan.get('note') or 'no churn'}"
    churns = [r.churn for r in reasks if r.churn]
    failed = sum(int(c.get("failed") or 0) for c in churns)
    requests = sum(int(c.get("requests") or 0) for c in churns)
    accepted = [int(c.get("accepted") or 0) for c in churns]
    first_err = next((c.get("error") for c in churns if c.get("error")), None)
    limit_txt = f"; the server takes at most {limit + 1} tokens per prompt" if limit else ""
    if churns and failed and not any(accepted):
        return f"{head}: churn requests rejected: {first_err} ({failed} of {requests} failed{limit_txt})"
    low, high = plan.get("low"), plan.get("high")
    if low is not None and high is not None and high < low:
        return f"{head}: {plan.get('note')}"
    if plan.get("host_pool") == 0:
        return f"{head}: the server has no host tier (HiCache off)"
    pool, host = plan.get("device_pool"), plan.get("host_pool")
    churn = int(median(accepted)) if accepted else 0
    gpu = [r for r in ok if (r.cached_device or 0) * 2 >= max(1, r.prompt_tokens)]
    cold = [r for r in ok if not (r.cached_tokens or 0)]
    failed_txt = f"; {failed} of {requests} churn requests failed: {first_err}" if failed else ""
    if len(gpu) * 2 >= len(ok):
        if pool and churn < pool:
            return f"{head}: churn {churn} tokens < GPU pool {pool}: the re-asks were GPU-cache hits{failed_txt}"
        return f"{head}: the re-asks were GPU-cache hits after churn {churn} tokens (GPU pool {pool}){failed_txt}"
    if len(cold) * 2 >= len(ok):
        occupied = longest + churn
        if host and occupied > host:
            return (
                f"{head}: churn {churn} + prompt {longest} tokens > host pool {host}: the host tier evicted "
                f"the prompts too (the re-asks were cold prefills){failed_txt}"
            )
        if host:
            return (
                f"{head}: the re-asks were cold prefills although churn {churn} + prompt {longest} tokens fit "
                f"the host pool {host}: host copies were not matched{failed_txt}"
            )
        return f"{head}: the re-asks were cold prefills (host pool size unknown){failed_txt}"
    return (
        f"{head}: re-asks after churn {churn} tokens: {len(gpu)} GPU-cache hits, {len(cold)} cold, "
        f"{len(ok) - len(gpu) - len(cold)} partial{failed_txt}"
    )


def _fmt(x: float | None, nd: int = 3) -> str:
    return "-" if x is None else f"{x:.{nd}g}"


def floor_line(t: FloorTest) -> str:
    """The floor test's numbers in one sentence, ON next to the control."""
    p = "n/a (no control)" if t.p_value is None else f"{t.p_value:.3g}"
    excess = "n/a" if t.excess_p_value is None else f"{t.excess_p_value:.3g}"
    return (
        f"paired sign test over {t.keys} (sample, ask) keys: ON further from OFF in {t.on_worse}, control "
        f"further in {t.control_worse}, tied {t.ties}; p={p}, beyond the {t.tolerance:.0%} tolerance "
        f"p={excess} (alpha {t.alpha:g}); differing pairs ON "
        f"{t.on.differing}/{t.on.pairs} vs control {t.control.differing}/{t.control.pairs}; first divergence "
        f"median ON {_fmt(t.on.first_divergence_median)} vs control {_fmt(t.control.first_divergence_median)}; "
        f"max |dlogprob| ON {_fmt(t.on.dlogprob_max)} vs control {_fmt(t.control.dlogprob_max)}"
    )


def rate_line(t: RateTest) -> str:
    """The rate test's numbers in one sentence."""
    p = "n/a" if t.p_value is None else f"{t.p_value:.3g}"
    return (
        f"real divergences (outside top-k) ON {t.on_divergent}/{t.on_keys} host-hit re-asks vs control "
        f"{t.control_divergent}/{t.control_keys} re-asks, Fisher exact p={p} (alpha {t.alpha:g})"
    )


def _first_real(comps: list[PairComparison]) -> str:
    c = min(comps, key=lambda x: (x.first_divergence or 0, x.ask, x.index))
    where = "outside the other's top-k" if outside_topk(c) else "not a near-tie"
    return f"first at token {c.first_divergence} ({c.task}@{c.length_target} sample {c.index}, ask {c.ask}): {where}"


def _mean(xs: list[bool]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def _lost_gained(comps: list[PairComparison]) -> tuple[int, int, float | None]:
    lost = sum(1 for c in comps if c.ref_correct is True and c.cand_correct is False)
    gained = sum(1 for c in comps if c.ref_correct is False and c.cand_correct is True)
    scored = any(c.ref_correct is not None and c.cand_correct is not None for c in comps)
    return lost, gained, (mcnemar_exact_p(lost, gained) if scored else None)


def evaluate_parity(
    on_records: Iterable[Any],
    off_records: Iterable[Any],
    control_records: Iterable[Any] | None = None,
    cfg: Quality | None = None,
    *,
    alpha: float = ALPHA,
) -> ParityReport:
    """Compare an ON variant's quality records with the OFF baseline's (same sample, same ask),
    and decide against the OFF-vs-OFF control (the rules: module docstring, docs/quality.md).

    Records may be QualityRecords or their dicts (quality.jsonl rows). If ``control_records``
    is None, baseline records with ``arm_role == "control"`` among ``off_records`` are used.
    ``cfg`` (the scenario's ``quality:`` block; None: its defaults) gives ``tie_epsilon`` and
    ``top_logprobs`` (top-k, capped at 5). ``alpha``: the significance a FAIL needs."""
    cfg = cfg if cfg is not None else Quality()
    eps = cfg.tie_epsilon
    k = min(5, cfg.top_logprobs)
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
    ctrl_by = {pair_key(c): c for c in ctrl_comps}

    def label(c: PairComparison) -> PairComparison:
        cc = ctrl_by.get(pair_key(c))
        if c.kind == "equal" or cc is None or cc.kind == "equal":
            return c
        return dataclasses.replace(c, noise=(cc.first_divergence or 0) <= (c.first_divergence or 0))

    comps = [label(c) for c in comps]
    test = floor_test(comps, ctrl_comps, alpha)
    # An exact control (a deterministic server) leaves no room: any excess is a defect. Otherwise
    # ON may stray further than the control in up to `tolerance` of the untied keys.
    control_exact = test.control.differing == 0
    ctrl_exact = exact_control(ctrl_comps)  # with pairs: a deterministic server's control
    exact_bad = exact_divergences(comps) if ctrl_exact else []
    rate = rate_test(comps, ctrl_comps, alpha)
    rate_bad = [c for c in comps if c.ask >= 1 and (c.cand_cached_host or 0) > 0 and real_divergence(c)]
    rate_fail = rate.significant and not exact_bad
    beyond = test.significant if control_exact else test.exceeds_tolerance
    keys_needed = test.min_keys if control_exact else test.min_excess_keys
    worse = set(test.worse_keys)
    real = [c for c in comps if pair_key(c) in worse and c.kind == "divergence"]
    lost, gained, mcn_p = _lost_gained(comps)
    accuracy_loss = mcn_p is not None and mcn_p < alpha and lost > gained
    host_hits = sum(1 for r in on if r.error is None and r.host_hit)
    host_keys = sum(1 for c in comps if c.cand_cached_host and pair_key(c) in ctrl_by)
    host_keys_all = sum(1 for c in comps if c.cand_cached_host)
    exact = not any(differs(c) for c in comps)

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
        gt = floor_test(cs, ctl, alpha)
        g_real = [c for c in real if (c.task, c.length_target) == key]
        g_lost, g_gained, g_p = _lost_gained(cs)
        g_diff = [c for c in cs if differs(c)]
        noise = False
        if not cs:
            verdict, reason = "NOT_EXERCISED", "no comparable pairs (missing OFF records or errors)"
        elif beyond and g_real:
            verdict, reason = "FAIL", f"{len(g_real)} real divergence(s) beyond the control; {_first_real(g_real)}"
        elif g_exact := [c for c in exact_bad if (c.task, c.length_target) == key]:
            verdict, reason = (
                "FAIL",
                f"{len(g_exact)} real divergence(s) at host-hit keys, exact control; {_first_real(g_exact)}",
            )
        elif rate_fail and (g_rate := [c for c in rate_bad if (c.task, c.length_target) == key]):
            verdict, reason = (
                "FAIL",
                f"{len(g_rate)} real divergence(s) beyond the control's rate; {_first_real(g_rate)}",
            )
        elif accuracy_loss and g_lost > g_gained:
            verdict, reason = (
                "FAIL",
                f"accuracy loss: {g_lost} lost vs {g_gained} gained (pooled McNemar p={mcn_p:.3g})",
            )
        elif hh == 0:
            verdict, reason = "NOT_EXERCISED", f"no ON request had host-tier hits: {host_miss_cause(ors)}"
        elif not g_diff:
            verdict, reason = "PASS", "token-equal"
        elif not ctl:
            verdict, reason = "INCONCLUSIVE", f"{len(g_diff)} difference(s) and no OFF-vs-OFF control"
        elif test.significant and gt.on_worse:
            verdict, reason = (
                "WARN",
                (
                    f"ON further from OFF than the control in {gt.on_worse} of {gt.keys} keys, "
                    "near-tie flips / logprob drift only"
                ),
            )
        else:
            verdict, noise = "PASS", True
            reason = (
                f"{len(g_diff)} difference(s) within the OFF-vs-OFF control (ON further in {gt.on_worse}, "
                f"control further in {gt.control_worse} of {gt.keys} keys)"
            )
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
                outside_topk=sum(outside_topk(c) for c in cs),
                noise_pairs=sum(c.noise for c in cs),
                first_divergence_min=gt.on.first_divergence_min,
                max_abs_dlogprob=gt.on.dlogprob_max,
                host_hit_requests=hh,
                on_requests=len(ors),
                accuracy_on=_mean([c.cand_correct for c in cs if c.cand_correct is not None]),
                accuracy_off=_mean([c.ref_correct for c in cs if c.ref_correct is not None]),
                on_lost=g_lost,
                on_gained=g_gained,
                mcnemar_p=g_p,
                control_pairs=len(ctl),
                control_differing=gt.control.differing,
                control_worst=max((c.kind for c in ctrl_diff), key=_SEVERITY.__getitem__, default=None),
                on_worse=gt.on_worse,
                control_worse=gt.control_worse,
                p_value=gt.p_value,
                reason=reason,
            )
        )

    reasks = [r for r in on if r.ask >= 1 and r.error is None]
    not_ex = tuple((g.task, g.length_target) for g in groups if g.verdict == "NOT_EXERCISED")
    exercised = [g for g in groups if g.verdict != "NOT_EXERCISED"]
    line = floor_line(test)
    noise = False
    if beyond and real:
        overall: Verdict = "FAIL"
        reason = f"ON strays further from OFF than OFF-vs-OFF does: {line}; {len(real)} real divergence(s), {_first_real(real)}"
        if test.control.differing == 0 and test.on.outside_topk == 0:
            reason += (
                "; the control is exact: if only the ON server runs without "
                "--enable-deterministic-inference, the arms are not comparable"
            )
    elif exact_bad:
        overall = "FAIL"
        reason = (
            f"the OFF-vs-OFF control is exact (0 of {test.control.pairs} pairs differ), yet ON diverges (no "
            f"near-tie flip) at {len(exact_bad)} of {host_keys_all} host-hit key(s): {_first_real(exact_bad)}; {line}"
        )
    elif rate_fail:
        overall = "FAIL"
        reason = f"ON's real-divergence rate exceeds the control's: {rate_line(rate)}; {_first_real(rate_bad)}; {line}"
    elif accuracy_loss:
        overall = "FAIL"
        reason = f"accuracy loss: {lost} lost vs {gained} gained over {len(comps)} pairs, McNemar p={mcn_p:.3g} (alpha {alpha:g})"
    elif host_hits == 0:
        overall, reason = "NOT_EXERCISED", f"the ON arm got no host-tier hits: {host_miss_cause(on)}"
    elif not comps:
        overall, reason = "NOT_EXERCISED", "no comparable pairs"
    elif not exercised:
        overall, reason = "NOT_EXERCISED", "no group had both host-tier hits and comparable pairs"
    elif exact:
        overall, reason = "PASS", f"token-equal (and |dlogprob| <= {DLOGPROB_TOL:g}) on every pair"
    elif not ctrl_comps:
        n_diff = sum(differs(c) for c in comps)
        overall, reason = (
            "INCONCLUSIVE",
            (
                f"ON differs from OFF in {n_diff} of {len(comps)} pairs and there is no "
                "OFF-vs-OFF control to tell nondeterminism from a defect (quality.control)"
            ),
        )
    elif host_keys < keys_needed and not rate.can_decide:
        overall, reason = (
            "INCONCLUSIVE",
            (
                f"only {host_keys} (sample, ask) keys with host hits and a control partner: "
                f"the paired test needs >= {keys_needed} to reach alpha {alpha:g}, and "
                f"{rate.on_keys} ON host-hit re-asks against {rate.control_keys} control re-asks cannot "
                f"reach it either (best p {_fmt(rate.best_p)}); {line}"
            ),
        )
    elif test.significant:
        overall, reason = (
            "WARN",
            (
                f"ON strays further from OFF than the control, within the tolerance "
                f"(ON the worse arm in <= {test.tolerance:.0%} of untied keys) or by near-tie "
                f"flips / logprob drift only: {line}"
            ),
        )
    else:
        overall, reason = "PASS", f"differences within the OFF-vs-OFF floor: {line}"
        noise = True
    if overall in ("PASS", "WARN", "INCONCLUSIVE") and not_ex:
        reason += f"; not exercised: {', '.join(f'{t}@{n}' for t, n in not_ex)}"
    return ParityReport(
        verdict=overall,
        baseline_noise=noise,
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
        alpha=alpha,
        host_keys=host_keys,
        on_lost=lost,
        on_gained=gained,
        mcnemar_p=mcn_p,
        floor=test,
        rate=rate,
        control_exact=ctrl_exact,
    )

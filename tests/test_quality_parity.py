"""Parity verdicts on hand-built outputs (P12, P13), McNemar on a known table."""

from __future__ import annotations

import math

import pytest

from harness.quality.parity import compare_outputs, evaluate_parity, mcnemar_exact_p
from harness.quality.record import QualityRecord

TOK = [11, 12, 13, 14, 15, 16, 17, 18]


def top_for(tokens, margin=1.0, second=None):
    """Top-5 rows where each chosen token leads by ``margin``; ``second`` overrides the runner-up."""
    rows = []
    for t in tokens:
        runner = second if second is not None else t + 100
        rows.append([[t, -0.1], [runner, -0.1 - margin], [t + 200, -3.0], [t + 201, -3.5], [t + 202, -4.0]])
    return rows


def rec(role, ids, *, ask=1, index=0, task="needle", length=1000, host=500, correct=None, top=None, lps=None):
    return QualityRecord(
        variant=role, arm_role=role, task=task, length_target=length, index=index, seed=0, ask=ask,
        output_ids=list(ids), output_logprobs=lps if lps is not None else [-0.1] * len(ids),
        top_logprobs=top if top is not None else top_for(ids), cached_host=host if role == "on" else 0,
        correct=correct,
    )


def arms(on_ids, off_ids=TOK, **kw):
    on_kw = {k: v for k, v in kw.items() if k != "off_top"}
    off_top = kw.get("off_top")
    return [rec("on", on_ids, **on_kw)], [rec("off", off_ids, top=off_top)]


def test_identical_is_pass():
    on, off = arms(TOK)
    r = evaluate_parity(on, off)
    assert r.verdict == "PASS" and not r.baseline_noise
    assert r.host_hit_requests == 1 and r.comparisons[0].token_equal
    assert r.comparisons[0].first_divergence is None and r.comparisons[0].max_abs_dlogprob == 0.0


def test_divergence_at_zero_outside_top5_is_fail():
    bad = [999] + TOK[1:]
    on, off = arms(bad)
    r = evaluate_parity(on, off)
    assert r.verdict == "FAIL"
    c = r.comparisons[0]
    assert c.first_divergence == 0 and c.kind == "divergence"
    assert c.cand_in_ref_topk is False and c.ref_in_cand_topk is False
    assert r.groups[0].outside_topk == 1 and "token 0" in r.reason


def test_non_tie_flip_inside_top5_is_fail():
    """ON picks OFF's runner-up, but OFF's margin was 1.0: not a near-tie."""
    flipped = TOK[:3] + [TOK[3] + 100] + TOK[4:]
    r = evaluate_parity(*arms(flipped))
    c = r.comparisons[0]
    assert c.cand_in_ref_topk is True and not c.tie_flip and r.verdict == "FAIL"


def test_near_tie_flip_is_warn():
    flipped = TOK[:3] + [TOK[3] + 100] + [1, 2, 3, 4]
    off_top = top_for(TOK, margin=0.01)
    r = evaluate_parity(*arms(flipped, off_top=off_top))
    c = r.comparisons[0]
    assert c.first_divergence == 3 and c.tie_flip and c.kind == "tie_flip"
    assert c.ref_margin == pytest.approx(0.01)
    assert r.verdict == "WARN" and r.groups[0].tie_flips == 1


def test_tie_epsilon_from_cfg():
    flipped = TOK[:3] + [TOK[3] + 100] + TOK[4:]
    off_top = top_for(TOK, margin=0.2)
    assert evaluate_parity(*arms(flipped, off_top=off_top)).verdict == "FAIL"
    assert evaluate_parity(*arms(flipped, off_top=off_top), cfg={"tie_epsilon": 0.3}).verdict == "WARN"


def test_zero_host_hits_is_not_exercised_never_pass():
    on, off = arms(TOK, host=0)
    r = evaluate_parity(on, off)
    assert r.verdict == "NOT_EXERCISED" and r.host_hit_requests == 0
    assert r.groups[0].verdict == "NOT_EXERCISED" and r.not_exercised_groups == (("needle", 1000),)
    on2 = [rec("on", TOK, host=None)]  # tiers not reported is not a host hit either
    assert evaluate_parity(on2, off).verdict == "NOT_EXERCISED"


def test_differences_within_control_are_pass_labelled_noise():
    flipped = TOK[:2] + [TOK[2] + 100] + TOK[3:]
    on = [rec("on", flipped)]
    off = [rec("off", TOK)]
    ctrl = [rec("control", TOK[:1] + [TOK[1] + 100] + TOK[2:])]  # the baseline itself differs earlier
    r = evaluate_parity(on, off, ctrl)
    assert r.comparisons[0].noise is True
    assert r.verdict == "PASS" and r.baseline_noise is True
    assert r.groups[0].control_differing == 1 and "noise" in r.groups[0].reason
    # the same divergence without a control is a FAIL
    assert evaluate_parity(on, off).verdict == "FAIL"
    # control records may also come mixed into the OFF list (arm_role "control")
    assert evaluate_parity(on, off + ctrl).verdict == "PASS"


def test_control_that_is_equal_does_not_excuse():
    on = [rec("on", [999] + TOK[1:])]
    r = evaluate_parity(on, [rec("off", TOK)], [rec("control", TOK)])
    assert r.verdict == "FAIL" and not r.comparisons[0].noise


def test_mcnemar_known_table():
    # 1 lost vs 9 gained: two-sided exact p = 2 * P(X <= 1 | n=10, 1/2) = 22/1024
    assert mcnemar_exact_p(1, 9) == pytest.approx(22 / 1024)
    assert mcnemar_exact_p(9, 1) == pytest.approx(22 / 1024)
    assert mcnemar_exact_p(0, 0) == 1.0
    assert mcnemar_exact_p(6, 0) == pytest.approx(2 / 64)


def test_significant_accuracy_loss_is_fail_and_counts_flips():
    """Ten samples where OFF is right and ON is wrong after a tie flip: tie flips alone would
    be WARN, but the loss is significant (p = 2/1024)."""
    flipped = TOK[:3] + [TOK[3] + 100] + TOK[4:]
    off_top = top_for(TOK, margin=0.0)
    on = [rec("on", flipped, index=i, correct=False) for i in range(10)]
    off = [rec("off", TOK, index=i, correct=True, top=off_top) for i in range(10)]
    r = evaluate_parity(on, off)
    g = r.groups[0]
    assert g.on_lost == 10 and g.on_gained == 0 and g.mcnemar_p == pytest.approx(2 / 1024)
    assert g.accuracy_on == 0.0 and g.accuracy_off == 1.0
    assert r.verdict == "FAIL" and "accuracy loss" in g.reason
    # a single loss is not significant: tie flips only → WARN
    r1 = evaluate_parity(on[:1], off[:1])
    assert r1.verdict == "WARN" and r1.groups[0].mcnemar_p == 1.0


def test_per_task_length_groups_and_overall():
    on = [rec("on", TOK, task="needle"), rec("on", [999] + TOK[1:], task="aggregation"),
          rec("on", TOK, task="needle", length=2000, host=0)]
    off = [rec("off", TOK, task="needle"), rec("off", TOK, task="aggregation"), rec("off", TOK, task="needle", length=2000)]
    r = evaluate_parity(on, off)
    verdicts = {(g.task, g.length_target): g.verdict for g in r.groups}
    assert verdicts == {("aggregation", 1000): "FAIL", ("needle", 1000): "PASS", ("needle", 2000): "NOT_EXERCISED"}
    assert r.verdict == "FAIL"
    r2 = evaluate_parity([on[0], on[2]], [off[0], off[2]])
    assert r2.verdict == "PASS" and r2.not_exercised_groups == (("needle", 2000),)
    assert "not exercised" in r2.reason


def test_logprob_drift_and_length_mismatch():
    c = compare_outputs(rec("off", TOK, lps=[-0.1] * 8), rec("on", TOK, lps=[-0.1] * 7 + [-0.35]))
    assert c.token_equal and c.max_abs_dlogprob == pytest.approx(0.25)
    c2 = compare_outputs(rec("off", TOK), rec("on", TOK[:5]))
    assert c2.first_divergence == 5 and c2.cand_token is None and c2.kind == "divergence"


def test_reask_counts_errors_unmatched_and_dict_rows():
    on = [rec("on", TOK, ask=0, host=0), rec("on", TOK, ask=1), rec("on", TOK, ask=2, index=5)]
    bad = rec("on", TOK, ask=2)
    bad.error = "timeout"
    off = [rec("off", TOK, ask=0).to_dict(), rec("off", TOK, ask=1).to_dict(), rec("off", TOK, ask=2).to_dict()]
    r = evaluate_parity([x.to_dict() for x in on + [bad]], off)
    assert r.pairs == 2 and r.unmatched_on == 1 and r.errors == 1
    assert r.reasks == 2 and r.reasks_with_host_hit == 2 and r.verdict == "PASS"
    d = r.to_dict()
    assert {"verdict", "baseline_noise", "host_hit_requests", "groups", "comparisons"} <= set(d)
    assert not any(isinstance(v, float) and math.isnan(v) for v in d["groups"][0].values())


def test_no_exercised_group_is_never_pass():
    """Host hits only where the OFF answer errored, pairs only where there were no host hits:
    no group tested parity, so the overall verdict must not be PASS (P12)."""
    on = [rec("on", TOK, task="needle", host=500), rec("on", TOK, task="multi_needle", host=0)]
    off_errored = rec("off", TOK, task="needle")
    off_errored.error = "timeout"
    r = evaluate_parity(on, [off_errored, rec("off", TOK, task="multi_needle")])
    assert {g.verdict for g in r.groups} == {"NOT_EXERCISED"}
    assert r.verdict == "NOT_EXERCISED" and not r.baseline_noise

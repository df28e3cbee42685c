"""The one verdict: variant and run outcomes with their reasons, from stored files' contents."""

from __future__ import annotations

import json

import pytest

from harness.analysis.verdict import Outcome, VerdictPolicy, run_verdict, variant_verdict
from harness.core.exit_codes import ExitCode
from harness.store.run_folder import load_run
from tests.conftest import GOLDEN_RUNS
from tests.factories import as_status, as_summary


def _verdict(name, status, summ, *args):
    """`variant_verdict` of a status and summary given as their stored JSON."""
    return variant_verdict(name, as_status(status), as_summary(summ), *args)


OK = {"state": "ok", "expect": "ok"}
DECLARED_FAIL = {
    "check": "v: quality.parity == FAIL",
    "variant": "v",
    "metric": "quality.parity",
    "op": "==",
    "expected": "FAIL",
    "actual": "FAIL",
    "outcome": "pass",
    "failed": False,
    "reason": "",
}


def summary(n=10, errors=None, parity=None):
    errors = errors or {}
    return {
        "n_requests": n,
        "n_errors": sum(errors.values()),
        "errors": errors,
        "quality": {"parity": {"verdict": parity, "reason": "r"}} if parity else None,
    }


@pytest.mark.parametrize(
    "status,summ,rows,policy,outcome,code",
    [
        (OK, summary(), [], VerdictPolicy(), Outcome.PASS, None),
        (OK, summary(12, {"http_400": 12}), [], VerdictPolicy(), Outcome.FAIL, "error_rate"),
        (OK, summary(100, {"timeout": 1}), [], VerdictPolicy(), Outcome.PASS, None),  # 1 % is not > 1 %
        (OK, summary(100, {"timeout": 2}), [], VerdictPolicy(), Outcome.FAIL, "error_rate"),
        (OK, summary(100, {"timeout": 2}), [], VerdictPolicy(max_error_rate=0.05), Outcome.PASS, None),
        (OK, summary(0), [], VerdictPolicy(), Outcome.INCONCLUSIVE, "no_requests"),
        (OK, summary(parity="FAIL"), [], VerdictPolicy(), Outcome.FAIL, "parity_fail"),
        (OK, summary(parity="NOT_EXERCISED"), [], VerdictPolicy(), Outcome.INCONCLUSIVE, "parity_not_exercised"),
        # a negative control: its own check declares the parity FAIL, which is then not a failure
        (
            OK,
            summary(parity="FAIL"),
            [DECLARED_FAIL],
            VerdictPolicy(),
            Outcome.EXPECTED_FAILURE,
            "parity_fail_declared",
        ),
        # ... but only the check held: a control whose parity passed fails its check
        (
            OK,
            summary(parity="PASS"),
            [{**DECLARED_FAIL, "outcome": "fail", "actual": "PASS", "reason": "'PASS' == 'FAIL' is false"}],
            VerdictPolicy(),
            Outcome.FAIL,
            "expectation_failed",
        ),
        # ... and anything else failing still fails it
        (
            OK,
            summary(100, {"timeout": 5}, parity="FAIL"),
            [DECLARED_FAIL],
            VerdictPolicy(),
            Outcome.FAIL,
            "error_rate",
        ),
        # a check that parity is NOT FAIL declares nothing
        (
            OK,
            summary(parity="FAIL"),
            [{**DECLARED_FAIL, "op": "!=", "outcome": "fail"}],
            VerdictPolicy(),
            Outcome.FAIL,
            "parity_fail",
        ),
        (
            OK,
            summary(parity="NOT_EXERCISED"),
            [],
            VerdictPolicy(allow_not_exercised=frozenset({"v"})),
            Outcome.PASS,
            None,
        ),
        (
            OK,
            summary(parity="PASS"),
            [{"check": "c", "outcome": "fail", "reason": "1 >= 2 is false"}],
            VerdictPolicy(),
            Outcome.FAIL,
            "expectation_failed",
        ),
        (
            OK,
            summary(),
            [{"check": "c", "outcome": "not_evaluable", "failed": True, "reason": "missing"}],
            VerdictPolicy(),
            Outcome.INCONCLUSIVE,
            "expectation_not_evaluable",
        ),
        (
            {
                "state": "startup_failed",
                "cause": "host_memory",
                "expect": "startup_failed",
                "expect_cause": "host_memory",
            },
            None,
            [],
            VerdictPolicy(),
            Outcome.EXPECTED_FAILURE,
            "expected_failure",
        ),
        (
            {
                "state": "startup_failed",
                "cause": "cuda_fault",
                "expect": "startup_failed",
                "expect_cause": "host_memory",
            },
            None,
            [],
            VerdictPolicy(),
            Outcome.FAIL,
            "wrong_cause",
        ),
        (
            {"state": "ok", "expect": "startup_failed"},
            summary(),
            [],
            VerdictPolicy(),
            Outcome.FAIL,
            "expected_startup_failure",
        ),
        (
            {"state": "startup_failed", "cause": "timeout", "expect": "ok"},
            None,
            [],
            VerdictPolicy(),
            Outcome.FAIL,
            "startup_failed",
        ),
        (
            {"state": "partial", "cause": "server_died", "expect": "ok"},
            summary(),
            [],
            VerdictPolicy(),
            Outcome.FAIL,
            "partial",
        ),
        ({"state": "interrupted"}, None, [], VerdictPolicy(), Outcome.INTERRUPTED, "interrupted"),
        (None, None, [], VerdictPolicy(), Outcome.FAIL, "not_run"),
    ],
)
def test_variant_verdicts(status, summ, rows, policy, outcome, code):
    v = _verdict("v", status, summ, rows, policy)
    assert v.outcome is outcome
    assert [r.code for r in v.reasons][:1] == ([code] if code else [])
    assert all(r.text and r.variant == "v" for r in v.reasons)


def test_dominant_error_is_named():
    v = _verdict("v", OK, summary(12, {"http_400": 11, "timeout": 1}))
    assert "12 of 12 requests failed" in v.reasons[0].text and "http_400 (11)" in v.reasons[0].text


def test_run_outcome_order_and_exit_codes():
    p, f, i, x = (
        _verdict("p", OK, summary()),
        _verdict("f", OK, summary(parity="FAIL")),
        _verdict("i", OK, summary(parity="NOT_EXERCISED")),
        _verdict("x", {"state": "startup_failed", "cause": "host_memory", "expect": "startup_failed"}, None),
    )
    assert run_verdict([p, x]).outcome is Outcome.PASS and run_verdict([p, x]).exit_code is ExitCode.OK
    assert run_verdict([p, x]).reasons == ()  # an expected failure is no reason for concern
    assert run_verdict([p, i]).exit_code is ExitCode.INCONCLUSIVE
    assert run_verdict([p, i, f]).outcome is Outcome.FAIL and run_verdict([p, i, f]).exit_code is ExitCode.FAILED
    assert run_verdict([p], interrupted=True).exit_code is ExitCode.INTERRUPTED
    assert run_verdict([f], interrupted=True).outcome is Outcome.FAIL  # a failure seen is still a failure
    assert run_verdict([]).outcome is Outcome.INCONCLUSIVE
    assert run_verdict([p, i, f]).headline().startswith("FAIL: f: quality parity FAIL")


@pytest.mark.parametrize(
    "run,outcome", [("healthy", Outcome.PASS), ("regressed", Outcome.PASS), ("interrupted", Outcome.INTERRUPTED)]
)
def test_golden_runs(run, outcome):
    root = GOLDEN_RUNS / run
    expectations = (
        json.loads((root / "expectations.json").read_text())["checks"] if (root / "expectations.json").exists() else []
    )
    verdicts = []
    for v in load_run(root).variants:
        status = v.status if v.paths.status.exists() else None
        rows = [r for r in expectations if r["variant"] == v.name]
        verdicts.append(variant_verdict(v.name, status, v.summary, rows))
    assert run_verdict(verdicts, interrupted=(root / "INTERRUPTED").exists()).outcome is outcome

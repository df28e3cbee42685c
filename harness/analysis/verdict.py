"""The verdict: one function per variant and one per run, read by every place that states it.

The exit code of ``harness run``, its console lines, the report's banner, ``verdict.json``, the
JUnit file and the Markdown summary all come from ``variant_verdict`` / ``run_verdict``, so they
cannot disagree. Inputs are the stored files' contents (status.json, summary.json, the
expectations' rows), so a report of an old run states the same verdict the run did. Pure.

Outcomes of a variant:
  PASS               it ran as declared; no rule below fired
  FAIL               an unexpected startup failure or death, errors beyond ``max_error_rate``,
                     a parity FAIL, a failed expectation, a workload's FAIL finding on its
                     samples (a soak's LEAK, `sample_findings`), or a declared startup failure that
                     did not happen (or failed for another cause)
  INCONCLUSIVE       nothing failed, but the harness cannot tell: parity NOT_EXERCISED (unless
                     the scenario allows it for this variant), an expectation whose metric was
                     not measured, no measured request at all, a soak series INCONCLUSIVE
  EXPECTED_FAILURE   declared ``expect: startup_failed`` and it failed to start as declared, or
                     a negative control: parity FAIL that the variant's own check
                     ``"<variant>: quality.parity == FAIL"`` declares, nothing else failing
                     (shown neutral, never red; a control whose parity does not FAIL fails its
                     check, so the run is FAIL)
  INTERRUPTED        stopped by a signal before it finished
A run is FAIL if any variant or run-level check fails, else INTERRUPTED if it was stopped, else
INCONCLUSIVE if any variant is, else PASS (expected failures count as passing).

Warnings change no outcome but are stated with it: a cache phase that got no hit of the tier it
exists to measure (summary ``unexercised``, `harness.analysis.summary.unexercised_phases`), whose figures
measured recompute; a cache phase that got fewer cached tokens than the pools predict for the
run's own sends (summary ``tier_prediction.shortfalls``, `harness.measures.tier_model`); a hit slower than
its own recompute or HiCache off's (``worse_than_off``, added by `harness.analysis.run_products.judge_run`,
which sees every variant). A check on such a figure is what makes the variant INCONCLUSIVE
(`harness.analysis.expectations`: not evaluable).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from enum import Enum
from typing import Any

from harness.core.exit_codes import ExitCode
from harness.store.summary import Summary
from harness.store.variant_status import VariantStatus

DEFAULT_MAX_ERROR_RATE = 0.01


class Outcome(str, Enum):
    PASS = "PASS"
    FAIL = "FAIL"
    INCONCLUSIVE = "INCONCLUSIVE"
    EXPECTED_FAILURE = "EXPECTED_FAILURE"
    INTERRUPTED = "INTERRUPTED"


@dataclass(frozen=True)
class Reason:
    """Why a verdict is what it is: a stable ``code`` (for tools) and a sentence (for people)."""

    code: str
    text: str
    variant: str | None = None

    def line(self) -> str:
        return f"{self.variant}: {self.text}" if self.variant else self.text


@dataclass(frozen=True)
class VerdictPolicy:
    """What the scenario says a verdict may tolerate (scenario ``verdict:`` block)."""

    max_error_rate: float = DEFAULT_MAX_ERROR_RATE
    # variants whose parity may be NOT_EXERCISED without making them INCONCLUSIVE (True: all)
    allow_not_exercised: bool | frozenset[str] = False
    rounds: int = 0  # extra rounds a comparison may look at (harness.compare.statistics.look_alpha)

    @classmethod
    def from_block(cls, block: Mapping[str, Any] | None) -> VerdictPolicy:
        """From a scenario's ``verdict:`` block as parsed YAML or as its model's dump; a missing or
        unreadable block means the defaults (an old run's stored scenario has none)."""
        block = block or {}
        rate = block.get("max_error_rate", DEFAULT_MAX_ERROR_RATE)
        if isinstance(rate, str) and rate.strip().endswith("%"):
            rate = float(rate.strip()[:-1]) / 100.0
        allowed = block.get("allow_not_exercised", False)
        return cls(
            max_error_rate=float(rate),
            allow_not_exercised=allowed if isinstance(allowed, bool) else frozenset(map(str, allowed)),
            rounds=int(block.get("rounds") or 0),
        )

    def not_exercised_allowed(self, variant: str) -> bool:
        if isinstance(self.allow_not_exercised, bool):
            return self.allow_not_exercised
        return variant in self.allow_not_exercised


@dataclass(frozen=True)
class VariantVerdict:
    variant: str
    outcome: Outcome
    reasons: tuple[Reason, ...] = ()
    warnings: tuple[Reason, ...] = ()  # stated with the outcome, change nothing (unexercised phases)

    def to_json(self) -> dict[str, Any]:
        return {
            "variant": self.variant,
            "outcome": self.outcome.value,
            "reasons": [asdict(r) for r in self.reasons],
            "warnings": [asdict(r) for r in self.warnings],
        }


@dataclass(frozen=True)
class RunVerdict:
    outcome: Outcome
    variants: tuple[VariantVerdict, ...] = ()
    reasons: tuple[Reason, ...] = field(default=())  # every variant's reasons, then run-level ones

    @property
    def warnings(self) -> tuple[Reason, ...]:
        """Every variant's warnings, in variant order."""
        return tuple(w for v in self.variants for w in v.warnings)

    @property
    def exit_code(self) -> ExitCode:
        return {
            Outcome.PASS: ExitCode.OK,
            Outcome.FAIL: ExitCode.FAILED,
            Outcome.INCONCLUSIVE: ExitCode.INCONCLUSIVE,
            Outcome.INTERRUPTED: ExitCode.INTERRUPTED,
        }[self.outcome]

    def headline(self) -> str:
        """One line: the outcome and its first reasons."""
        if not self.reasons:
            return self.outcome.value
        more = f" (+{len(self.reasons) - 3} more)" if len(self.reasons) > 3 else ""
        return f"{self.outcome.value}: " + "; ".join(r.line() for r in self.reasons[:3]) + more

    def lines(self) -> list[str]:
        """For the console: one line per variant, then the run's verdict and its reasons."""
        out = [
            f"  {v.outcome.value:<16} {v.variant}" + (f"  ({v.reasons[0].text})" if v.reasons else "")
            for v in self.variants
        ]
        out.append(f"verdict: {self.outcome.value} (exit {int(self.exit_code)})")
        out.extend(f"  - {r.line()}" for r in self.reasons)
        out.extend(f"  warning: {w.line()}" for w in self.warnings)
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "outcome": self.outcome.value,
            "exit_code": int(self.exit_code),
            "reasons": [asdict(r) for r in self.reasons],
            "warnings": [asdict(r) for r in self.warnings],
            "variants": [v.to_json() for v in self.variants],
        }


def _dominant_error(errors: Mapping[str, int]) -> str:
    error, count = max(errors.items(), key=lambda kv: (kv[1], kv[0]))
    return f"{error} ({count})"


def _startup(name: str, status: VariantStatus | None) -> VariantVerdict | None:
    """The verdict decided by the variant's lifecycle alone, or None when it ran to the end."""
    state, cause = (status.state, status.cause) if status is not None else (None, None)
    declared_failure = status is not None and status.expect == "startup_failed"
    wanted_cause = status.expect_cause if status is not None else None
    if state in (None, "not_run", "running"):
        return VariantVerdict(
            name, Outcome.FAIL, (Reason("not_run", f"did not run (state {state or 'missing'})", name),)
        )
    if state == "interrupted":
        return VariantVerdict(name, Outcome.INTERRUPTED, (Reason("interrupted", "stopped by a signal", name),))
    if declared_failure:
        if state == "startup_failed" and (wanted_cause is None or wanted_cause == cause):
            return VariantVerdict(
                name,
                Outcome.EXPECTED_FAILURE,
                (Reason("expected_failure", f"failed to start as declared ({cause})", name),),
            )
        if state == "startup_failed":
            return VariantVerdict(
                name,
                Outcome.FAIL,
                (Reason("wrong_cause", f"failed to start with {cause}, declared {wanted_cause}", name),),
            )
        return VariantVerdict(
            name,
            Outcome.FAIL,
            (
                Reason(
                    "expected_startup_failure", f"declared expect: startup_failed, but it {state_words(state)}", name
                ),
            ),
        )
    if state != "ok":
        detail = f" ({cause})" if cause else ""
        return VariantVerdict(name, Outcome.FAIL, (Reason(state, f"{state_words(state)}{detail}", name),))
    return None


def state_words(state: str) -> str:
    return {
        "ok": "ran",
        "startup_failed": "failed to start",
        "partial": "died mid-run",
        "failed": "failed",
        "refused": "was refused by the preflight",
    }.get(state, state)


def variant_verdict(
    name: str,
    status: VariantStatus | None,
    summary: Summary | None,
    expectation_rows: Iterable[Mapping[str, Any]] = (),
    policy: VerdictPolicy = VerdictPolicy(),
) -> VariantVerdict:
    """The verdict of one variant from its stored status, summary and expectation rows, with its
    warnings (`unexercised_warnings`)."""
    judged = _variant_outcome(name, status, summary, list(expectation_rows), policy)
    return replace(
        judged,
        warnings=unexercised_warnings(name, summary)
        + shortfall_warnings(name, summary)
        + recomputed_warnings(name, summary),
    )


def recomputed_warnings(name: str, summary: Summary | None) -> tuple[Reason, ...]:
    """A variant's hit phases that reported host/storage hits and recomputed them (its summary's
    ``attribution``, `harness.analysis.attribution`), as warnings."""
    found = summary.attribution if summary is not None else ()
    return tuple(Reason("hit_recomputed", str(a["text"]), name) for a in found if a.get("text"))


def shortfall_warnings(name: str, summary: Summary | None) -> tuple[Reason, ...]:
    """A variant's cache phases that got fewer cached tokens than its pools predict for its own
    sends (its summary's ``tier_prediction.shortfalls``, `harness.measures.tier_model`), as warnings."""
    found = (summary.tier_prediction.get("shortfalls") if summary is not None else None) or []
    return tuple(Reason("tier_shortfall", "tier-hit shortfall: " + str(s.get("text") or ""), name) for s in found)


def unexercised_warnings(name: str, summary: Summary | None) -> tuple[Reason, ...]:
    """A variant's cache phases that got no hit of the tier they exist to measure (its summary's
    ``unexercised``), as warnings."""
    found = summary.unexercised if summary is not None else ()
    return tuple(Reason("unexercised_phase", str(u.get("text") or ""), name) for u in found)


def _variant_outcome(
    name: str,
    status: VariantStatus | None,
    summary: Summary | None,
    expectation_rows: list[Mapping[str, Any]],
    policy: VerdictPolicy,
) -> VariantVerdict:
    expectation_rows = list(expectation_rows)
    decided = _startup(name, status)
    if decided is not None:
        fails = [
            Reason("expectation_failed", f"check {r.get('check')} failed: {r.get('reason')}", name)
            for r in expectation_rows
            if r.get("outcome") == "fail"
        ]
        if decided.outcome is Outcome.FAIL and fails:
            return VariantVerdict(name, Outcome.FAIL, decided.reasons + tuple(fails))
        return decided
    failures: list[Reason] = []
    unknowns: list[Reason] = []
    n, n_err = (summary.n_requests, summary.n_errors) if summary is not None else (0, 0)
    if n == 0:
        unknowns.append(Reason("no_requests", "no measured request", name))
    elif n_err / n > policy.max_error_rate:
        failures.append(
            Reason(
                "error_rate",
                f"{n_err} of {n} requests failed (> {policy.max_error_rate:.0%}): "
                f"{_dominant_error((summary.errors if summary is not None else None) or {'unknown': n_err})}",
                name,
            )
        )
    parity = summary.parity if summary is not None else {}
    pv = parity.get("verdict")
    expected: list[Reason] = []
    if pv == "FAIL" and declares_parity_fail(expectation_rows):
        expected.append(
            Reason(
                "parity_fail_declared",
                f"quality parity FAIL, as its check declares (a negative control): {parity.get('reason') or ''}",
                name,
            )
        )
    elif pv == "FAIL":
        failures.append(Reason("parity_fail", f"quality parity FAIL: {parity.get('reason') or 'answers differ'}", name))
    elif pv == "INCONCLUSIVE":
        unknowns.append(
            Reason(
                "parity_inconclusive", f"quality parity INCONCLUSIVE: {parity.get('reason') or ''}".rstrip(": "), name
            )
        )
    elif pv in ("NOT_EXERCISED", "NOT_COMPARABLE") and not policy.not_exercised_allowed(name):
        unknowns.append(
            Reason("parity_" + pv.lower(), f"quality parity {pv}: {parity.get('reason') or ''}".rstrip(": "), name)
        )
    for f in sample_findings(summary):  # a workload's judgement of the samples (a soak's LEAK)
        (failures if f.get("outcome") == "FAIL" else unknowns).append(
            Reason(str(f.get("code") or "sample_finding"), str(f.get("text") or ""), name)
        )
    for r in expectation_rows:
        if r.get("outcome") == "fail":
            failures.append(Reason("expectation_failed", f"check {r.get('check')} failed: {r.get('reason')}", name))
        elif r.get("outcome") == "not_evaluable" and r.get("failed", True):
            unknowns.append(
                Reason(
                    "expectation_not_evaluable",
                    f"check {r.get('check')} could not be evaluated: {r.get('reason')}",
                    name,
                )
            )
    if failures:
        return VariantVerdict(name, Outcome.FAIL, tuple(failures + unknowns))
    if unknowns:
        return VariantVerdict(name, Outcome.INCONCLUSIVE, tuple(unknowns))
    if expected:
        return VariantVerdict(name, Outcome.EXPECTED_FAILURE, tuple(expected))
    return VariantVerdict(name, Outcome.PASS)


def sample_findings(summary: Summary | None) -> list[Mapping[str, Any]]:
    """The findings each workload's ``from_samples`` holds (`harness.analysis.summary.add_sample_figures`:
    a soak's LEAK / INCONCLUSIVE series), in order."""
    out: list[Mapping[str, Any]] = []
    for entry in ((summary.workloads if summary is not None else None) or {}).values():
        out.extend(entry.from_samples.get("findings") or [])
    return out


def declares_parity_fail(expectation_rows: Iterable[Mapping[str, Any]]) -> bool:
    """The variant's own checks include ``quality.parity == FAIL`` and it held: a negative control
    (e.g. a build that corrupts host-tier loads) whose parity FAIL is the point."""
    return any(
        r.get("metric") == "quality.parity"
        and r.get("op") == "=="
        and str(r.get("expected")).upper() == "FAIL"
        and r.get("outcome") == "pass"
        for r in expectation_rows
    )


def run_verdict(variants: Sequence[VariantVerdict], *, interrupted: bool = False) -> RunVerdict:
    """The run's verdict from its variants' (see the module docstring for the order). In an
    interrupted run a variant that never ran was not reached: INTERRUPTED, not FAIL."""
    if interrupted:
        variants = [
            VariantVerdict(
                v.variant,
                Outcome.INTERRUPTED,
                (Reason("not_reached", "not reached: the run was interrupted", v.variant),),
            )
            if v.reasons and v.reasons[0].code == "not_run"
            else v
            for v in variants
        ]
    rank = {Outcome.FAIL: 0, Outcome.INTERRUPTED: 1, Outcome.INCONCLUSIVE: 2}
    reasons = tuple(
        r for v in sorted(variants, key=lambda v: rank.get(v.outcome, 3)) for r in v.reasons if v.outcome in rank
    )
    outcomes = {v.outcome for v in variants}
    if Outcome.FAIL in outcomes:
        outcome = Outcome.FAIL
    elif interrupted or Outcome.INTERRUPTED in outcomes:
        outcome = Outcome.INTERRUPTED
    elif Outcome.INCONCLUSIVE in outcomes or not variants:
        outcome = Outcome.INCONCLUSIVE
    else:
        outcome = Outcome.PASS
    if not variants:
        reasons += (Reason("no_variants", "no variant ran"),)
    return RunVerdict(outcome, tuple(variants), reasons)

"""A `Comparison` as text: Markdown (CI step summary, --markdown), JUnit XML (--junit) and the
console text of ``harness compare``. Pure: strings in, strings out.

All three say the same things loudly: the outcome and its reasons, SIMULATED when either run
came from the simulator, how the baseline was chosen, and the variants that were not compared
(config changed, missing). JUnit's colours follow the outcome: only what FAILs the comparison
is a ``failure``; what makes it INCONCLUSIVE (a gating row that could not be judged, a gated
variant not compared) is ``skipped`` with its reason, never an ``error`` (an error is a broken
test, and dashboards turn red on it); a ``verdict`` suite holds one case with the outcome and
its reasons."""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from harness.compare.comparison import (
    FAILING_VARIANT_STATES,
    UNJUDGED_VARIANT_STATES,
    Comparison,
    MetricRow,
)
from harness.compare.curves import KNEE_BELOW_TEST, PERCENTILES, CurvePointRow
from harness.compare.tails import TAIL_SHARE_TEST
from harness.workloads.slo import SLO_DERIVED

HEADLINE_FIGURES = tuple(d.name for d in SLO_DERIVED if d.compared)  # the knee and the best goodput

SIMULATED_LINE = (
    "**SIMULATED**: a run compared here came from the simulated server (backend sim): "
    "its figures follow the simulator's cost model, not a GPU's."
)
_ICON = {"PASS": "✅", "FAIL": "❌", "INCONCLUSIVE": "❔"}
_ORDER = {"regression": 0, "inconclusive": 1, "not_comparable": 2, "improved": 3, "unchanged": 4}


def _fmt(v: float | None, unit: str = "") -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "—"
    if abs(v) >= 1000:
        s = f"{v:,.0f}"
    elif abs(v) >= 10:
        s = f"{v:.1f}"
    else:
        s = f"{v:.3g}"
    return f"{s} {unit}".strip()


def _pct(v: float | None) -> str:
    if v is None or not math.isfinite(v):
        return "—"
    return f"{v * 100:+.1f}%"


def _change(m: MetricRow) -> str:
    """The row's change: a relative change in %, a tail share's difference in points of the units."""
    if m.test == TAIL_SHARE_TEST and m.change is not None and math.isfinite(m.change):
        return f"{m.change * 100:+.1f} points"
    return _pct(m.change)


def _mde(m: MetricRow) -> str:
    if m.mde is None or not math.isfinite(m.mde):
        return "—"
    return f"±{m.mde * 100:.1f}%"


def _ci(m: MetricRow) -> str:
    if m.ci_low is None or m.ci_high is None:
        return ""
    return f" [{_pct(m.ci_low)}, {_pct(m.ci_high)}]"


def unit_text(m: MetricRow) -> str:
    """What n counted: ``n=3/3 requests``, ``n=1/1 concurrent groups of 8/8 requests``."""
    if m.sample == "group" and m.values_baseline is not None and m.values_candidate is not None:
        return (
            f"n={m.n_baseline}/{m.n_candidate} concurrent groups of {m.values_baseline}/{m.values_candidate} requests"
        )
    return f"n={m.n_baseline}/{m.n_candidate} {m.sample}s"


def _test(m: MetricRow) -> str:
    p = "" if m.p_value is None else f" p={m.p_value:.3g}"
    return f"{m.test}{p} ({unit_text(m)})"


def _md(text: Any) -> str:
    """Markdown table cell: no pipes, newlines or HTML."""
    s = str(text)
    for a, b in (("&", "&amp;"), ("<", "&lt;"), (">", "&gt;"), ("|", "\\|"), ("\n", " ")):
        s = s.replace(a, b)
    return s


def _value(v: float | None, below: float | None, unit: str) -> str:
    """A side's value, or ``< lowest`` for a knee below the lowest point tried."""
    return f"< {_fmt(below, unit)}" if below is not None else _fmt(v, unit)


def _values(m: MetricRow) -> tuple[str, str]:
    if m.sample == "verdict":
        return "", ""
    return _value(m.baseline_p50, m.baseline_below, m.unit), _value(m.candidate_p50, m.candidate_below, m.unit)


def metric_message(m: MetricRow) -> str:
    """One line on a metric row (JUnit messages, console)."""
    if m.sample == "verdict":
        return f"{m.name}: {m.note}"
    b, c = _values(m)
    return (
        f"{m.metric} p50 {b} -> {c} ({_change(m)}{_ci(m)}, MDE {_mde(m)}, threshold "
        f"{m.threshold * 100:.0f}%, {_test(m)}){': ' + m.note if m.note else ''}"
    )


def to_markdown(comp: Comparison) -> str:
    c = comp.counts
    base = comp.baseline["run_id"] if comp.baseline else "none"
    scenario, icon = _md(comp.candidate.get("scenario")), _ICON.get(comp.outcome, "")
    title = f"## HiCache harness compare: {scenario} — {icon} {comp.outcome}"
    lines = [title, ""]
    if comp.simulated:
        lines += [SIMULATED_LINE, ""]
    lines += [
        f"Candidate `{_md(comp.candidate.get('run_id'))}` vs baseline `{_md(base)}`. "
        + ", ".join(f"{k.replace('_', ' ')}: {v}" for k, v in c.items() if v),
        "",
    ]
    for line in comp.baseline_choice:
        lines.append(f"- {_md(line)}")
    lines.append(
        "- gate: "
        + (
            ", ".join(f"`{_md(g)}`" for g in comp.gate)
            if comp.gate
            else "none in the scenario: every compared metric gates"
        )
    )
    for n in comp.notes:
        lines.append(f"- {_md(n)}")
    lines.append("")
    unjudged = [v for v in comp.variants if v.state in UNJUDGED_VARIANT_STATES]
    for v in unjudged:
        lines.append(f"> **⚠ {_md(v.variant)} NOT COMPARED: {_md(v.note)}**" + ("" if v.gated else " (not gated)"))
    if unjudged:
        lines.append("")
    if comp.reasons:
        lines += [f"**{comp.outcome} because:**", ""] + [f"- {_md(r)}" for r in comp.reasons[:20]]
        if len(comp.reasons) > 20:
            lines.append(f"- … and {len(comp.reasons) - 20} more")
        lines.append("")
    if comp.advice:
        lines += [f"**{_md(comp.advice)}**", ""]
    bad_v = [v for v in comp.variants if v.state != "compared"]
    if bad_v:
        lines += ["| variant | baseline | candidate | state | note |", "|---|---|---|---|---|"]
        lines += [
            f"| {_md(v.variant)} | {_md(v.baseline_state)} | {_md(v.candidate_state)} | **{v.state}** | {_md(v.note)} |"
            for v in bad_v
        ]
        lines.append("")
    shown = sorted(
        (m for m in comp.metrics if m.state != "unchanged"), key=lambda m: (not m.gating, _ORDER.get(m.state, 9))
    )
    if shown:
        lines += [
            "| variant | metric | gate | baseline p50 | candidate p50 | change [95% CI] | MDE | threshold | test "
            "| state |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        for m in shown:
            b, cv = _values(m)
            state = f"**{m.state}**" if m.gating else m.state
            change = _md(m.note) if m.sample == "verdict" or m.test == KNEE_BELOW_TEST else f"{_change(m)}{_ci(m)}"
            lines.append(
                f"| {_md(m.variant)} | {_md(m.name)} | {'yes' if m.gating else 'no'} | {_md(b)} | {_md(cv)} | "
                f"{change} | {_mde(m)} | {m.threshold * 100:.0f}% | {_md(_test(m))} | {state} |"
            )
        lines.append("")
    lines += _change_lines(comp)
    lines += _headline_lines(comp) + _curve_lines(comp.curves)
    measured = [m for m in comp.metrics if m.sample != "verdict"]
    unchanged = sum(1 for m in measured if m.state == "unchanged")
    if unchanged:
        lines += [
            (
                f"{unchanged} of {len(measured)} compared metrics unchanged (within the threshold, and a "
                "threshold-sized change would have been detected)."
            ),
            "",
        ]
    parity = [m for m in comp.metrics if m.sample == "verdict" and m.state == "unchanged"]
    if parity:
        lines += ["Quality parity unchanged: " + "; ".join(f"{_md(m.variant)} ({_md(m.note)})" for m in parity), ""]
    if comp.expectations:
        lines += ["| expectation | variant | actual | outcome |", "|---|---|---|---|"]
        for e in comp.expectations:
            lines.append(
                f"| {_md(e['check'])} | {_md(e['variant'])} | {_md(e['actual'])} | "
                f"{'**' + e['outcome'] + '**' if e['failed'] else e['outcome']} |"
            )
        lines.append("")
    return "\n".join(lines) + "\n"


def _change_lines(comp: Comparison) -> list[str]:
    """What differs between the two nights (`harness.compare.changes`, ranked: build first), when
    the comparison flags a change."""
    if comp.baseline is None or not comp.flagged:
        return []
    lines = ["**What changed between the two nights** (most likely cause first):", ""]
    shown = comp.changes[:20]
    lines += [f"- {_md(c.get('text'))}" for c in shown]
    if len(comp.changes) > len(shown):
        lines.append(f"- … and {len(comp.changes) - len(shown)} more")
    if not comp.changes:
        lines.append("- nothing differs between the two nights' manifests, builds, probes or pools")
    return lines + [""]


def junit_part(name: str) -> str:
    """A variant name as one part of a JUnit classname: readers split classnames at dots into
    packages, so a dot in a variant's name (``on-r1.5``) becomes ``_``."""
    return name.replace(".", "_")


def _headline_lines(comp: Comparison) -> list[str]:
    """The knee and best goodput of every sweep, whatever their state (they are the headline)."""
    rows = [m for m in comp.metrics if m.phase == "*" and m.metric in HEADLINE_FIGURES]
    if not rows:
        return []
    out = [
        "**Knee and goodput** (per repeat; gate them as `<workload>.knee_rate`, `.knee_concurrency`, `.goodput_rps`):",
        "",
        "| variant | figure | gate | baseline | candidate | change [95% CI] | test | state |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for m in rows:
        b, c = _values(m)
        change = _md(m.note) if m.test == KNEE_BELOW_TEST else f"{_change(m)}{_ci(m)}"
        out.append(
            f"| {_md(m.variant)} | {_md(m.name)} | {'yes' if m.gating else 'no'} | {_md(b)} | {_md(c)} | {change} | "
            f"{_md(_test(m))} | {'**' + m.state + '**' if m.gating else m.state} |"
        )
    return out + [""]


def _pcts(v: dict | None) -> str:
    return " / ".join(_fmt((v or {}).get(p)) for p in PERCENTILES) if v else "—"


def _curve_lines(curves: list[CurvePointRow]) -> list[str]:
    """The sweeps' load points, baseline → candidate, TTFT and TPOT at p50 / p90 / p95 / p99."""
    if not curves:
        return []
    out = [
        "**Latency vs load** (each point against the baseline's at the same rate; ms at "
        + " / ".join(PERCENTILES)
        + "):",
        "",
        "| variant | workload | point | TTFT baseline | TTFT candidate | TPOT baseline | TPOT candidate "
        "| goodput req/s | state |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for c in curves:
        state = f"**{c.state}**" if c.gating and c.state != "unchanged" else c.state
        note = f" ({_md(c.note)})" if c.note else ""
        out.append(
            f"| {_md(c.variant)} | {_md(c.workload)} | {_md(c.phase)} | {_pcts(c.baseline.get('ttft_ms'))} | "
            f"{_pcts(c.candidate.get('ttft_ms'))} | {_pcts(c.baseline.get('tpot_ms'))} | "
            f"{_pcts(c.candidate.get('tpot_ms'))} | {_fmt(c.baseline_goodput)} → {_fmt(c.candidate_goodput)} | "
            f"{state}{note} |"
        )
    return out + [""]


def to_junit(comp: Comparison) -> str:
    """JUnit XML: one case for the outcome (suite ``verdict``: a failure on FAIL, skipped with
    the reasons on INCONCLUSIVE), one per metric, variant and expectation. A regression in a
    gating metric is a failure; a metric that could not be judged (inconclusive, not comparable)
    is skipped with its reason, "INCONCLUSIVE (gating)" when it gates; a variant that was not
    compared is skipped too. Classnames:
    ``verdict``, ``variants``, ``metrics.<variant>``, ``curves.<variant>``, ``expectations.<variant>``
    (dots in a variant's name become ``_``); a metric case is named ``workload/phase/metric``, a curve
    point's ``workload/phase``. ``time``: a variant's case
    carries the candidate variant's wall seconds, the others 0; suites and the root sum them and
    carry the totals."""
    name = "harness compare" + (" (SIMULATED)" if comp.simulated else "")
    suites = ET.Element("testsuites", name=name)

    def suite(name: str) -> ET.Element:
        s = ET.SubElement(suites, "testsuite", name=name)
        props = ET.SubElement(s, "properties")
        ET.SubElement(props, "property", name="outcome", value=comp.outcome)
        ET.SubElement(props, "property", name="simulated", value="true" if comp.simulated else "false")
        return s

    def case(s: ET.Element, classname: str, name: str, time_s: float | None = None) -> ET.Element:
        return ET.SubElement(s, "testcase", classname=classname, name=name, time=f"{time_s or 0.0:.3f}")

    s_out = suite("verdict")
    tc = case(s_out, "verdict", comp.candidate.get("scenario") or "comparison")
    why = "; ".join(comp.reasons) or "every gating row judged"
    if comp.advice:
        why = f"{comp.advice}. {why}"
    if comp.outcome == "FAIL":
        ET.SubElement(tc, "failure", message=f"FAIL: {why}", type="FAIL").text = "\n".join(comp.reasons)
    elif comp.outcome != "PASS":
        ET.SubElement(tc, "skipped", message=f"{comp.outcome}: {why}")
    else:
        ET.SubElement(tc, "system-out").text = "PASS: " + why
    s_var = suite("variants")
    for v in comp.variants:
        tc = case(s_var, "variants", v.variant, v.candidate_wall_s)
        if v.state in FAILING_VARIANT_STATES:
            ET.SubElement(tc, "failure", message=f"{v.state}: {v.note}", type=v.state).text = v.note
        elif v.state in UNJUDGED_VARIANT_STATES:
            gated = " (gated: the comparison is INCONCLUSIVE)" if v.gated else ""
            ET.SubElement(tc, "skipped", message=f"NOT COMPARED ({v.state}): {v.note}{gated}")
        elif v.state == "skipped":
            ET.SubElement(tc, "skipped", message=f"{v.state}: {v.note}")
    s_m = suite("metrics")
    for m in comp.metrics:
        tc = case(s_m, f"metrics.{junit_part(m.variant)}", f"{m.workload}/{m.phase}/{m.metric}")
        msg = metric_message(m) + ("" if m.gating else " [not gating]")
        if m.state == "regression" and m.gating:
            ET.SubElement(tc, "failure", message=msg, type="regression").text = msg
        elif m.state in ("inconclusive", "not_comparable") and m.gating:
            ET.SubElement(tc, "skipped", message=f"INCONCLUSIVE (gating, {m.state}): {msg}")
        elif m.state in ("regression", "inconclusive", "not_comparable"):
            ET.SubElement(tc, "skipped", message=f"{m.state}: {msg}")
        else:
            ET.SubElement(tc, "system-out").text = f"{m.state}: {msg}"
    if comp.curves:
        s_c = suite("curves")
        for c in comp.curves:
            tc = case(s_c, f"curves.{junit_part(c.variant)}", f"{c.workload}/{c.phase}")
            msg = (
                f"{c.phase}: TTFT {_pcts(c.baseline.get('ttft_ms'))} -> {_pcts(c.candidate.get('ttft_ms'))} ms "
                f"({'/'.join(PERCENTILES)}), goodput {_fmt(c.baseline_goodput)} -> {_fmt(c.candidate_goodput)} req/s"
                + (f"; {c.note}" if c.note else "")
            )
            if c.state == "regression" and c.gating:
                ET.SubElement(tc, "failure", message=msg, type="regression").text = msg
            elif c.state in ("inconclusive", "not_comparable") and c.gating:
                ET.SubElement(tc, "skipped", message=f"INCONCLUSIVE (gating, {c.state}): {msg}")
            elif c.state in ("regression", "inconclusive", "not_comparable"):
                ET.SubElement(tc, "skipped", message=f"{c.state}: {msg}")
            else:
                ET.SubElement(tc, "system-out").text = f"{c.state}: {msg}"
    s_e = suite("expectations")
    for e in comp.expectations:
        tc = case(s_e, f"expectations.{junit_part(str(e['variant']))}", e["check"])
        if e.get("failed"):
            ET.SubElement(tc, "failure", message=f"{e['outcome']}: {e['reason']}", type=e["outcome"])
        elif e["outcome"] in ("skipped", "not_evaluable"):
            ET.SubElement(tc, "skipped", message=e["reason"])
    totals = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0, "time": 0.0}
    for s in suites.findall("testsuite"):
        cases = s.findall("testcase")
        counts = {
            "tests": len(cases),
            "failures": sum(1 for c in cases if c.find("failure") is not None),
            "errors": sum(1 for c in cases if c.find("error") is not None),
            "skipped": sum(1 for c in cases if c.find("skipped") is not None),
            "time": sum(float(c.get("time", 0)) for c in cases),
        }
        for k, v in counts.items():
            s.set(k, f"{v:.3f}" if k == "time" else str(v))
            totals[k] += v
    for k, v in totals.items():
        suites.set(k, f"{v:.3f}" if k == "time" else str(v))
    return ET.tostring(suites, encoding="unicode", xml_declaration=True) + "\n"


def console_text(markdown: str, comparison_file: Path) -> str:
    """What ``harness compare`` prints: the Markdown summary, then where comparison.json went."""
    return f"{markdown}\ncomparison: {comparison_file}\n"

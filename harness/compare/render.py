"""A `Comparison` as text: Markdown (CI step summary, --markdown), JUnit XML (--junit) and the
console text of ``harness compare``. Pure: strings in, strings out."""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from harness.compare.comparison import FAILING_VARIANT_STATES, Comparison


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


def _md(text: Any) -> str:
    """Markdown table cell: no pipes, newlines or HTML."""
    s = str(text)
    for a, b in (("&", "&amp;"), ("<", "&lt;"), (">", "&gt;"), ("|", "\\|"), ("\n", " ")):
        s = s.replace(a, b)
    return s


def to_markdown(comp: Comparison) -> str:
    c = comp.counts
    base = comp.baseline["run_id"] if comp.baseline else "none"
    icon = {"pass": "✅", "regression": "❌", "no_baseline": "➖"}.get(comp.verdict, "")
    lines = [f"## HiCache harness: {_md(comp.candidate.get('scenario'))} — {icon} {comp.verdict}", "",
             f"Candidate `{_md(comp.candidate.get('run_id'))}` vs baseline `{_md(base)}`. "
             + ", ".join(f"{k.replace('_', ' ')}: {v}" for k, v in c.items() if v), ""]
    for n in comp.notes:
        lines.append(f"- {_md(n)}")
    if comp.notes:
        lines.append("")
    bad_v = [v for v in comp.variants if v.state != "compared"]
    if bad_v:
        lines += ["| variant | baseline | candidate | state | note |", "|---|---|---|---|---|"]
        lines += [f"| {_md(v.variant)} | {_md(v.baseline_state)} | {_md(v.candidate_state)} | **{v.state}** | {_md(v.note)} |"
                  for v in bad_v]
        lines.append("")
    order = {"regression": 0, "improved": 1, "insufficient_data": 2, "not_comparable": 3, "unchanged": 4}
    shown = sorted((m for m in comp.metrics if m.state != "unchanged"), key=lambda m: order.get(m.state, 9))
    if shown:
        lines += ["| variant | workload.phase | metric | baseline p50 | candidate p50 | change | threshold | test | state |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for m in shown:
            p = "" if m.p_value is None else f" p={m.p_value:.3g}"
            lines.append(f"| {_md(m.variant)} | {_md(m.workload)}.{_md(m.phase)} | {m.metric} | "
                         f"{_fmt(m.baseline_p50, m.unit)} | {_fmt(m.candidate_p50, m.unit)} | {_pct(m.change)} | "
                         f"{m.threshold * 100:.0f}% | {m.test}{p} (n={m.n_baseline}/{m.n_candidate}) | **{m.state}** |")
        lines.append("")
    elif comp.metrics:
        lines += [f"All {len(comp.metrics)} compared metrics unchanged.", ""]
    if comp.expectations:
        lines += ["| expectation | variant | actual | outcome |", "|---|---|---|---|"]
        for e in comp.expectations:
            lines.append(f"| {_md(e['check'])} | {_md(e['variant'])} | {_md(e['actual'])} | "
                         f"{'**' + e['outcome'] + '**' if e['failed'] else e['outcome']} |")
        lines.append("")
    return "\n".join(lines) + "\n"


def to_junit(comp: Comparison) -> str:
    """JUnit XML: one test case per metric, variant and expectation."""
    suites = ET.Element("testsuites", name="harness compare")

    def suite(name: str) -> ET.Element:
        return ET.SubElement(suites, "testsuite", name=name)

    s_var = suite("variants")
    for v in comp.variants:
        tc = ET.SubElement(s_var, "testcase", classname="variants", name=v.variant)
        if v.state in FAILING_VARIANT_STATES:
            ET.SubElement(tc, "failure", message=f"{v.state}: {v.note}", type=v.state).text = v.note
        elif v.state in ("skipped", "not_comparable"):
            ET.SubElement(tc, "skipped", message=f"{v.state}: {v.note}")
    s_m = suite("metrics")
    for m in comp.metrics:
        tc = ET.SubElement(s_m, "testcase", classname=f"{m.variant}.{m.workload}.{m.phase}", name=m.metric)
        msg = (f"{m.metric} p50 {_fmt(m.baseline_p50, m.unit)} -> {_fmt(m.candidate_p50, m.unit)} "
               f"({_pct(m.change)}, threshold {m.threshold * 100:.0f}%, {m.test}"
               f"{'' if m.p_value is None else f' p={m.p_value:.3g}'}, n={m.n_baseline}/{m.n_candidate})")
        if m.state == "regression":
            ET.SubElement(tc, "failure", message=msg, type="regression").text = msg
        elif m.state in ("insufficient_data", "not_comparable"):
            ET.SubElement(tc, "skipped", message=f"{m.state}: {msg}")
        else:
            ET.SubElement(tc, "system-out").text = f"{m.state}: {msg}"
    s_e = suite("expectations")
    for e in comp.expectations:
        tc = ET.SubElement(s_e, "testcase", classname=f"expectations.{e['variant']}", name=e["check"])
        if e.get("failed"):
            ET.SubElement(tc, "failure", message=f"{e['outcome']}: {e['reason']}", type=e["outcome"])
        elif e["outcome"] in ("skipped", "not_evaluable"):
            ET.SubElement(tc, "skipped", message=e["reason"])
    for s in suites:
        cases = list(s)
        s.set("tests", str(len(cases)))
        s.set("failures", str(sum(1 for c in cases if c.find("failure") is not None)))
        s.set("skipped", str(sum(1 for c in cases if c.find("skipped") is not None)))
        s.set("errors", "0")
    return ET.tostring(suites, encoding="unicode", xml_declaration=True) + "\n"


def console_text(markdown: str, comparison_file: Path) -> str:
    """What ``harness compare`` prints: the Markdown summary, then where comparison.json went."""
    return f"{markdown}\ncomparison: {comparison_file}\n"

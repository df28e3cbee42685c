"""Compare a candidate run with a baseline run: which metrics regressed, with evidence.

One job: two run folders → a `Comparison` (pure functions; `cli_main` does the I/O).

A metric is compared per variant × workload × phase on its per-request values from
requests.jsonl (warm-ups, errored requests and filler phases left out) — ``ttft_ms``,
``prefill_tok_s`` (phases whose median prompt is ≥ 1024 tokens and mostly not cached), ``tpot_ms``, ``decode_tok_s`` — and on the wall time
of each concurrency group (``pass_wall_s``, parallel_prefixes passes). The location is the
median (p50). A change is a **regression** only when both hold:

1. it is worse (by the metric's direction, `harness.metrics`) by at least the threshold; the
   threshold comes from the candidate scenario's ``expectations.thresholds`` (keys tried, first
   match: ``<workload>.<phase>.<metric>``, ``<workload>.<metric>``, ``<metric>``,
   ``<short>_p50`` with the unit suffix dropped (``ttft_p50``, ``tpot_p50``, ``pass_wall_p50``),
   ``<metric>_p50``, ``default``; else `DEFAULT_THRESHOLD`);
2. a statistical test says the two samples differ: Mann-Whitney U (two-sided, p < 0.05) when
   both sides have ≥ 6 values; with 3–5 a side, non-overlapping 95 % confidence intervals of
   the means; fewer → ``insufficient_data``.

States of a metric: improved, unchanged, regression, insufficient_data, not_comparable (missing
on one side). States of a variant: compared, introduced_failure (baseline ok, candidate failed:
a regression), failed (candidate failed and so did the baseline), fixed (baseline failed,
candidate ok), not_comparable (variant only on one side), skipped (not run, or failed as its
``expect: startup_failed`` declared). A failure is never a zero: failed variants have no metric
rows at all.

Exit codes of ``harness compare``: 0 pass, 1 regression / failure / failed expectation, 2 bad
input (missing run, wrong schema: the message names the file), 3 the harness broke.
"""

from __future__ import annotations

import math
import os
import sys
import xml.etree.ElementTree as ET
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pandas as pd

from harness import metrics as M
from harness import results
from harness.workloads import derived_figures, kinds

COMPARISON_FILE = "comparison.json"
COMPARISON_VERSION = 1
DEFAULT_THRESHOLD = 0.05
ALPHA = 0.05
MIN_MANN_WHITNEY = 6
MIN_CI = 3
PREFILL_MIN_PROMPT = 1024
COMPARED_METRICS = ("ttft_ms", "prefill_tok_s", "tpot_ms", "decode_tok_s", "pass_wall_s")

METRIC_STATES = ("regression", "improved", "unchanged", "insufficient_data", "not_comparable")
VARIANT_STATES = ("introduced_failure", "failed", "fixed", "compared", "not_comparable", "skipped")
FAILING_VARIANT_STATES = ("introduced_failure", "failed")

EXIT_OK, EXIT_REGRESSION, EXIT_BAD_INPUT, EXIT_BROKEN = 0, 1, 2, 3


# ----------------------------------------------------------------------------------- pure parts


@dataclass(frozen=True)
class Decision:
    state: str
    change: float | None  # relative change of the median, candidate vs baseline
    test: str  # mann_whitney | ci_overlap | none
    p_value: float | None
    note: str = ""


def _finite(values: Sequence[float] | np.ndarray) -> np.ndarray:
    a = np.asarray(values, dtype=float)
    return a[np.isfinite(a)]


def _ci95(a: np.ndarray) -> tuple[float, float]:
    from scipy import stats

    m = float(a.mean())
    half = float(stats.t.ppf(0.975, a.size - 1) * a.std(ddof=1) / math.sqrt(a.size))
    return m - half, m + half


def significance(base: np.ndarray, cand: np.ndarray) -> tuple[str, bool | None, float | None]:
    """(test, differs, p): Mann-Whitney U with ≥ 6 a side, CI overlap with ≥ 3, else (none, None)."""
    if base.size >= MIN_MANN_WHITNEY and cand.size >= MIN_MANN_WHITNEY:
        from scipy.stats import mannwhitneyu

        if np.ptp(np.concatenate([base, cand])) == 0:
            return "mann_whitney", False, 1.0
        p = float(mannwhitneyu(base, cand, alternative="two-sided").pvalue)
        return "mann_whitney", p < ALPHA, p
    if base.size >= MIN_CI and cand.size >= MIN_CI:
        lo_b, hi_b = _ci95(base)
        lo_c, hi_c = _ci95(cand)
        return "ci_overlap", hi_b < lo_c or hi_c < lo_b, None
    return "none", None, None


def decide(base_values: Sequence[float], cand_values: Sequence[float], higher_is_better: bool,
           threshold: float) -> Decision:
    """The state of one metric from its two samples. Pure; see the module docstring."""
    base, cand = _finite(base_values), _finite(cand_values)
    if base.size == 0 or cand.size == 0:
        side = "baseline" if base.size == 0 else "candidate"
        return Decision("not_comparable", None, "none", None, f"no values in the {side}")
    b, c = float(np.median(base)), float(np.median(cand))
    if b == 0:
        change = 0.0 if c == 0 else math.copysign(math.inf, c)
    else:
        change = (c - b) / abs(b)
    better = change > 0 if higher_is_better else change < 0
    clears = abs(change) >= threshold
    test, differs, p = significance(base, cand)
    if not clears:
        return Decision("unchanged", change, test, p, "within the threshold")
    if differs is None:
        return Decision("insufficient_data", change, test, p,
                        f"{base.size} vs {cand.size} values: too few for a test (need {MIN_CI}+ a side)")
    if not differs:
        return Decision("unchanged", change, test, p, "beyond the threshold but not significant")
    return Decision("improved" if better else "regression", change, test, p)


def threshold_for(thresholds: dict[str, float], workload: str, phase: str, metric: str) -> tuple[float, str]:
    """(fraction, key it came from) for one metric; see the module docstring for the order."""
    short = metric
    for suffix in ("_ms", "_s"):
        if metric.endswith(suffix) and not metric.endswith("tok_s"):
            short = metric[: -len(suffix)]
            break
    for key in (f"{workload}.{phase}.{metric}", f"{workload}.{metric}", metric, f"{short}_p50",
                f"{metric}_p50", "default"):
        if key in thresholds:
            return thresholds[key], key
    return DEFAULT_THRESHOLD, "harness default"


@dataclass
class MetricRow:
    variant: str
    workload: str
    phase: str
    metric: str
    unit: str
    higher_is_better: bool
    baseline_p50: float | None
    candidate_p50: float | None
    n_baseline: int
    n_candidate: int
    change: float | None
    threshold: float
    threshold_source: str
    test: str
    p_value: float | None
    state: str
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        for k in ("change", "baseline_p50", "candidate_p50"):
            if isinstance(d[k], float) and not math.isfinite(d[k]):
                d[k] = None if math.isnan(d[k]) else (1e308 if d[k] > 0 else -1e308)
        return d


@dataclass
class VariantRow:
    variant: str
    baseline_state: str | None
    candidate_state: str | None
    state: str
    note: str = ""
    config_changed: bool | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Comparison:
    verdict: str  # pass | regression | no_baseline
    variants: list[VariantRow] = field(default_factory=list)
    metrics: list[MetricRow] = field(default_factory=list)
    expectations: list[dict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    candidate: dict = field(default_factory=dict)
    baseline: dict | None = None

    @property
    def counts(self) -> dict[str, int]:
        out = {s: 0 for s in METRIC_STATES}
        for m in self.metrics:
            out[m.state] = out.get(m.state, 0) + 1
        for v in self.variants:
            if v.state != "compared":
                out[v.state] = out.get(v.state, 0) + 1
        out["expectations_failed"] = sum(1 for e in self.expectations if e.get("failed"))
        return out

    @property
    def failing(self) -> bool:
        return (any(m.state == "regression" for m in self.metrics)
                or any(v.state in FAILING_VARIANT_STATES for v in self.variants)
                or any(e.get("failed") for e in self.expectations))

    def to_dict(self) -> dict[str, Any]:
        return {"schema_version": results.SCHEMA_VERSION, "kind": "comparison",
                "comparison_version": COMPARISON_VERSION, "verdict": self.verdict,
                "candidate": self.candidate, "baseline": self.baseline, "counts": self.counts,
                "notes": self.notes, "variants": [v.to_dict() for v in self.variants],
                "metrics": [m.to_dict() for m in self.metrics], "expectations": self.expectations}


def variant_state(base_status: dict | None, cand_status: dict | None) -> tuple[str, str]:
    """(state, note) of one variant from its two status.json dicts (None: not in that run)."""
    if cand_status is None or base_status is None:
        return "not_comparable", "only in the " + ("baseline" if cand_status is None else "candidate")
    cs, bs = cand_status.get("state"), base_status.get("state")
    if cs in (None, "not_run", "skipped"):
        return "skipped", f"candidate state {cs or 'missing'}"
    declared = cand_status.get("expect") == "startup_failed"
    if cs != "ok":
        if declared and cand_status.get("expect_met"):
            return "skipped", f"failed as declared ({cand_status.get('cause')})"
        if bs == "ok":
            return "introduced_failure", f"candidate {cs} ({cand_status.get('cause')}); baseline ok"
        return "failed", f"candidate {cs} ({cand_status.get('cause')}); baseline {bs}"
    if declared:  # started although it was expected to fail
        return "failed", "expected startup_failed, but the server started"
    if bs != "ok":
        return "fixed", f"baseline {bs} ({base_status.get('cause')}); candidate ok"
    return "compared", ""


def metric_samples(req: pd.DataFrame) -> dict[tuple[str, str, str], np.ndarray]:
    """{(workload, phase, metric): values} of one variant's requests frame (harness.load)."""
    out: dict[tuple[str, str, str], np.ndarray] = {}
    if req.empty:
        return out
    filler = {p for k in kinds().values() for p in k.filler_phases}  # TODO(#11): by workload kind
    measured = req[(req["warmup"] != True) & ~req["phase"].isin(filler)]  # noqa: E712
    ok = measured[measured["error"].isna()]
    for (wl, ph), g in ok.groupby(["workload", "phase"], sort=False):
        for m in ("ttft_ms", "tpot_ms", "decode_tok_s"):
            v = _finite(g[m].to_numpy())
            if v.size:
                out[(wl, ph, m)] = v
        prompt = g["prompt_tokens"].fillna(g["prompt_len"])
        mostly_computed = not (g["cached_fraction"].median() >= 0.5)  # NaN (not reported) counts as computed
        if prompt.median() >= PREFILL_MIN_PROMPT and mostly_computed:
            v = _finite(g["prefill_tok_s"].to_numpy())
            if v.size:
                out[(wl, ph, "prefill_tok_s")] = v
    grouped = measured[measured["concurrency_group"].notna()]
    if not grouped.empty:
        agg = grouped.groupby(["workload", "phase", "concurrency_group"], sort=False).agg(
            sent=("sent_ns", "min"), done=("done_ns", "max"),
            n_err=("error", lambda s: int(s.notna().sum())))
        agg = agg[(agg["n_err"] == 0) & agg["done"].notna()]
        for (wl, ph), g in agg.groupby(level=[0, 1], sort=False):
            out[(wl, ph, "pass_wall_s")] = ((g["done"] - g["sent"]) / 1e9).to_numpy(dtype=float)
    return out


def derived_values(summary: dict | None) -> dict[tuple[str, str], float]:
    out = {}
    for wl, w in ((summary or {}).get("workloads") or {}).items():
        for k, v in (w.get("derived") or {}).items():
            figure = derived_figures().get(k)
            if figure is not None and figure.compared and v is not None:
                out[(wl, k)] = float(v)
    return out


def compare_variant(name: str, base_req: pd.DataFrame, cand_req: pd.DataFrame,
                    base_summary: dict | None, cand_summary: dict | None,
                    thresholds: dict[str, float]) -> list[MetricRow]:
    """Metric rows of one variant that ran ok on both sides."""
    rows: list[MetricRow] = []
    bs, cs = metric_samples(base_req), metric_samples(cand_req)
    for key in list(dict.fromkeys([*cs, *bs])):
        wl, ph, m = key
        info = M.metric_info(m)
        thr, src = threshold_for(thresholds, wl, ph, m)
        b, c = bs.get(key, np.array([])), cs.get(key, np.array([]))
        d = decide(b, c, info.higher_is_better, thr)
        rows.append(MetricRow(name, wl, ph, m, info.unit, info.higher_is_better,
                              float(np.median(b)) if b.size else None, float(np.median(c)) if c.size else None,
                              int(b.size), int(c.size), d.change, thr, src, d.test, d.p_value, d.state, d.note))
    bd, cd = derived_values(base_summary), derived_values(cand_summary)
    for key in list(dict.fromkeys([*cd, *bd])):
        wl, m = key
        info = M.metric_info(m)
        thr, src = threshold_for(thresholds, wl, "*", m)
        b = [bd[key]] if key in bd else []
        c = [cd[key]] if key in cd else []
        d = decide(b, c, info.higher_is_better, thr)
        rows.append(MetricRow(name, wl, "*", m, info.unit, info.higher_is_better, b[0] if b else None,
                              c[0] if c else None, len(b), len(c), d.change, thr, src, d.test, d.p_value,
                              d.state, d.note or "one value per run"))
    return rows


# ----------------------------------------------------------------------------------- run level


def _run_info(run: results.LoadedRun) -> dict:
    m = run.manifest
    return {"path": str(run.paths.root), "run_id": run.run_id, "scenario": run.scenario_name,
            "scenario_hash": (m.get("scenario") or {}).get("hash"), "created_at": m.get("created_at"),
            "backend": m.get("backend"), "simulated": m.get("simulated"),
            "sglang": (m.get("sglang") or {}).get("version"), "complete": run.complete}


def run_is_good(run: results.LoadedRun) -> bool:
    """A good baseline: COMPLETE and no variant failed unexpectedly."""
    if not run.complete:
        return False
    return all(v.status.get("expect_met", v.status.get("state") == "ok") is not False
               and v.status.get("state") not in ("not_run", "interrupted") for v in run.variants)


def find_latest_good(results_dir: Path, scenario: str, exclude: Path) -> Path | None:
    """The newest good run of ``scenario`` under ``results_dir``, older than ``exclude`` when
    ``exclude`` is one of them (run ids sort by time), never ``exclude`` itself."""
    exclude = Path(exclude).resolve()
    for p in reversed(results.list_runs(results_dir, scenario)):
        if p.resolve() == exclude or p.name >= exclude.name:
            continue
        try:
            run = results.load_run(p)
        except results.ResultsError:
            continue
        if run_is_good(run):
            return p
    return None


def _thresholds(manifest: dict) -> tuple[dict[str, float], list[str]]:
    from harness.expectations import scenario_expectations

    exp = scenario_expectations(manifest)
    notes = [] if exp.problem is None else [f"scenario re-read from its expectations block only ({exp.problem})"]
    return {k: t.fraction for k, t in exp.thresholds.items()}, notes


def compare_runs(base: results.LoadedRun | None, cand: results.LoadedRun) -> Comparison:
    """Load both runs' rows and compare them (``base`` None: no baseline; expectations only)."""
    from harness.expectations import evaluate_run_expectations
    from harness.load import requests_frame

    thresholds, notes = _thresholds(cand.manifest)
    comp = Comparison("pass", notes=notes, candidate=_run_info(cand))
    comp.expectations = evaluate_run_expectations(cand.paths.root)
    if not cand.complete:
        comp.notes.append("the candidate run is not COMPLETE (interrupted or still running)")
    if base is None:
        comp.verdict = "regression" if comp.failing else "no_baseline"
        comp.notes.append("no baseline run: only the candidate's expectations were evaluated")
        return comp
    comp.baseline = _run_info(base)
    if comp.baseline["scenario_hash"] != comp.candidate["scenario_hash"]:
        comp.notes.append("the scenario text differs between the two runs")
    if base.scenario_name != cand.scenario_name:
        comp.notes.append(f"different scenarios: {base.scenario_name} vs {cand.scenario_name}")
    base_v = {v.name: v for v in base.variants}
    cand_v = {v.name: v for v in cand.variants}
    hashes_b = {e["name"]: e.get("config_hash") for e in base.manifest.get("variants", [])}
    hashes_c = {e["name"]: e.get("config_hash") for e in cand.manifest.get("variants", [])}
    for name in list(dict.fromkeys([*cand_v, *base_v])):
        bv, cv = base_v.get(name), cand_v.get(name)
        state, note = variant_state(bv.status if bv else None, cv.status if cv else None)
        changed = None if (bv is None or cv is None) else hashes_b.get(name) != hashes_c.get(name)
        comp.variants.append(VariantRow(name, bv.status.get("state") if bv else None,
                                        cv.status.get("state") if cv else None, state, note, changed))
        if state == "compared":
            comp.metrics.extend(compare_variant(name, requests_frame(bv.paths.requests, name),
                                                requests_frame(cv.paths.requests, name),
                                                bv.summary, cv.summary, thresholds))
    comp.verdict = "regression" if comp.failing else "pass"
    return comp


# ----------------------------------------------------------------------------------- outputs


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


def exit_code(comp: Comparison) -> int:
    return EXIT_REGRESSION if comp.failing else EXIT_OK


def cli_main(args) -> int:
    try:
        return _cli(args)
    except results.ResultsError as exc:
        print(f"harness compare: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except Exception as exc:  # noqa: BLE001 - the harness itself broke: say so, exit 3
        import traceback

        traceback.print_exc()
        print(f"harness compare: internal error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_BROKEN


def _cli(args) -> int:
    cand = results.load_run(Path(args.run))
    base = None
    if args.baseline == "latest":
        found = find_latest_good(Path(args.results_dir), cand.scenario_name, cand.paths.root)
        if found is None:
            print(f"harness compare: no earlier good run of {cand.scenario_name} under {args.results_dir}; "
                  "evaluating expectations only", file=sys.stderr)
        else:
            base = results.load_run(found)
    else:
        base = results.load_run(Path(args.baseline))
    comp = compare_runs(base, cand)
    results.write_json_atomic(cand.paths.root / COMPARISON_FILE, comp.to_dict())
    md = to_markdown(comp)
    if getattr(args, "junit", None):
        results.write_text_atomic(Path(args.junit), to_junit(comp))
    if getattr(args, "markdown", None):
        results.write_text_atomic(Path(args.markdown), md)
    step = os.environ.get("GITHUB_STEP_SUMMARY")
    if step:
        with open(step, "a", encoding="utf-8") as f:
            f.write(md)
    print(md)
    print(f"comparison: {cand.paths.root / COMPARISON_FILE}")
    return exit_code(comp)

"""Run-level products, once every variant has run: quality parity of each HiCache arm against
the baseline arm, and ``summary.csv`` (one row per variant × workload × phase × metric).

Parity needs two servers' answers, so it cannot be judged inside one variant: the baseline
(HiCache OFF) variant's ``quality.jsonl`` is compared with each other variant's here. The full
per-sample comparison goes to ``<variant>/parity.json``; the variant summary keeps the verdict
and its counts.
"""

from __future__ import annotations

import csv
import io

from harness import results
from harness.summary import summary_rows

PARITY_FILE = "parity.json"


def parity_headline(report: dict) -> dict:
    keep = ("verdict", "baseline_noise", "reason", "host_hit_requests", "on_requests", "reasks",
            "reasks_with_host_hit", "pairs", "unmatched_on", "errors", "tie_epsilon", "top_k")
    out = {k: report.get(k) for k in keep}
    out["groups"] = [{k: g.get(k) for k in ("task", "length_target", "verdict", "pairs", "token_equal",
                                              "tie_flips", "divergences", "outside_topk",
                                              "first_divergence_min", "max_abs_dlogprob",
                                              "host_hit_requests", "accuracy_on", "accuracy_off",
                                              "on_lost", "on_gained", "mcnemar_p")}
                     for g in report.get("groups", [])]
    return out


def evaluate_run_parity(scenario, run: results.RunPaths, variant_names: list[str]) -> dict[str, dict]:
    """Parity of every variant that has quality rows against the baseline variant."""
    if not scenario.quality.enabled:
        return {}
    from harness.quality.parity import evaluate_parity

    baseline = scenario.quality.baseline_variant
    if baseline not in variant_names:
        return {}
    off_rows = list(results.read_jsonl(run.variant(baseline).quality))
    verdicts = {}
    for name in variant_names:
        if name == baseline:
            continue
        vpaths = run.variant(name)
        on_rows = list(results.read_jsonl(vpaths.quality))
        if not on_rows:
            continue
        if not off_rows:
            verdicts[name] = {"verdict": "NOT_COMPARABLE", "reason": f"baseline {baseline} has no quality rows"}
            continue
        report = evaluate_parity(on_rows, off_rows, None, scenario.quality).to_dict()
        results.write_json_atomic(vpaths.root / PARITY_FILE, report)
        verdicts[name] = parity_headline(report)
    return verdicts


def write_run_summaries(scenario, run: results.RunPaths) -> None:
    manifest = results.read_json(run.manifest)
    names = [v["name"] for v in manifest["variants"]]
    parity = evaluate_run_parity(scenario, run, names)
    rows: list[dict] = []
    for name in names:
        vpaths = run.variant(name)
        if not vpaths.summary.exists():
            continue
        summary = results.read_json(vpaths.summary)
        if name in parity:
            summary["quality"] = {**(summary.get("quality") or {}), "parity": parity[name]}
            results.write_json_atomic(vpaths.summary, summary)
        rows.extend(summary_rows(name, summary))
    results.write_text_atomic(run.summary_csv, rows_to_csv(rows))


def rows_to_csv(rows: list[dict]) -> str:
    columns = ["variant", "workload", "phase", "metric", "unit", "higher_is_better", "n", "mean", "p50",
               "p90", "p99", "min", "max", "n_errors"]
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=columns, extrasaction="ignore")
    w.writeheader()
    for row in rows:
        w.writerow(row)
    return buf.getvalue()

"""A run's derived products, and the one writer of every variant's ``summary.json``.

* Per variant, once its server has stopped: ``summary.json`` assembled in memory from the request
  statistics (:func:`harness.analysis.summary.summarize`), the sampling summary and the quality-row count
  (:func:`measured_summary`), or the null summary of a variant that never served
  (:func:`null_summary`: refused or startup_failed), and written once by
  :func:`write_variant_summary`.
* Once every variant has run (:func:`write_run_products`): quality parity of each HiCache arm
  against the baseline arm, and ``summary.csv`` (one row per variant × workload × phase × metric).
* The run's verdict (:func:`judge_run`, ``verdict.json``): ``harness.analysis.verdict``'s rules over the
  stored files, so the exit code, the console, the report and JUnit state the same verdict.

Parity needs two servers' answers, so it cannot be judged inside one variant: the baseline
(HiCache OFF) variant's ``quality.jsonl`` is compared with each other variant's here. The full
per-sample comparison goes to ``<variant>/parity.json``; the variant's summary gains the verdict
and its counts under ``quality.parity`` (the one later write of a summary.json).
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.analysis.attribution import attribute
from harness.analysis.cost import Prices, run_costs, slo_goodput, variant_cost
from harness.analysis.energy import energy_summary
from harness.analysis.samples import summarize_samples
from harness.analysis.summary import add_sample_figures, summarize, summary_rows
from harness.analysis.verdict import Outcome, Reason, RunVerdict, VerdictPolicy, run_verdict, variant_verdict
from harness.measures.roofline import Platform, worse_than_off
from harness.measures.tier_model import TierPools
from harness.quality.parity import evaluate_parity
from harness.store import results, run_folder, versions
from harness.store.gpu_time import StoredTiming
from harness.store.manifest import Manifest, read_manifest
from harness.store.phase_samples import SamplingSummary
from harness.store.products import COST_FILE, VERDICT_FILE
from harness.store.records import RequestRecord
from harness.store.stats import STAT_KEYS
from harness.store.status_view import Pools
from harness.store.summary import read_summary
from harness.store.variant_status import NOT_RUN, read_status

if TYPE_CHECKING:
    from harness.quality.config import Quality
    from harness.scenario.models import CostPrices

PARITY_FILE = "parity.json"
EXPECTATIONS_FILE = "expectations.json"
CSV_COLUMNS = [
    "variant",
    "workload",
    "phase",
    "metric",
    "unit",
    "higher_is_better",
    *STAT_KEYS,
    "n_errors",
]


# -- one variant -------------------------------------------------------------------------------


def measured_summary(
    name: str,
    state: str,
    cause: str | None,
    requests: Sequence[RequestRecord],
    n_quality_records: int,
    sampling: dict | None,
    workload_kinds: Mapping[str, str] | None = None,
    workload_configs: Mapping[str, Any] | None = None,
    tiers: frozenset[str] | None = None,
    platform: Platform | None = None,
    pools: TierPools | None = None,
    declined_load_backs: int = 0,
    samples: Iterable[Mapping[str, Any]] = (),
) -> dict:
    """The summary of a variant whose server served: per workload/phase statistics, its state and
    cause, the quality-row count and the sampling summary; with ``tiers`` (its cache tiers) the
    phases that missed the tier they exist to hit (``unexercised``); with ``platform`` each phase
    with host or storage hits gets its ``roofline`` (`harness.measures.roofline`); with ``pools`` the tier
    hits they predict for its own sends (``tier_prediction``, `harness.measures.tier_model`); each hit
    phase's time split and "reported but recomputed" (``attribution``, `harness.analysis.attribution`;
    ``declined_load_backs``: the server log's declined load-backs); ``samples`` (samples.jsonl's
    lines) feed the kinds that judge samples (``from_samples``, a soak's slopes); ``energy`` is
    `harness.analysis.energy.energy_summary`'s. A failed variant that measured nothing has
    ``workloads: null``, never zeros (P10)."""
    summary = summarize(requests, workload_kinds, workload_configs, tiers, platform, pools)
    if summary.get("workloads"):
        add_tokens_per_request(summary, requests)
        summary["energy"] = energy_summary(requests, SamplingSummary.from_json(sampling).phases)
    summary.update(schema_version=versions.CURRENT[versions.SUMMARY], variant=name, state=state, cause=cause)
    if state != "ok" and not any(not r.warmup and r.error is None for r in requests):
        summary["workloads"] = summary["energy"] = None
    summary["quality"] = {"n_records": n_quality_records} if n_quality_records else None
    summary["sampling"] = sampling
    add_sample_figures(summary, samples, workload_kinds, workload_configs)
    if summary.get("workloads"):
        found = attribute(summary, pools.unit if pools is not None else 1, declined_load_backs)
        if found:
            summary["attribution"] = found
    return summary


def add_tokens_per_request(summary: dict, requests: Sequence[RequestRecord]) -> None:
    """Each workload's mean prompt + generated tokens per answered measured request (what a
    goodput in requests/s is in tokens, `harness.analysis.cost`)."""
    sums: dict[str, list[int]] = {}
    for r in requests:
        if r.warmup or r.error is not None:
            continue
        acc = sums.setdefault(r.workload, [0, 0])
        acc[0] += int((r.prompt_tokens if r.prompt_tokens is not None else r.prompt_len) or 0)
        acc[0] += int(r.completion_tokens or 0)
        acc[1] += 1
    for wl, entry in summary["workloads"].items():
        total, n = sums.get(wl, (0, 0))
        entry["tokens_per_request"] = total / n if n else None


def null_summary(name: str, state: str, cause: str | None) -> dict:
    """The summary of a variant that never served: null metrics and its cause, never zeros (P10)."""
    return {
        "schema_version": versions.CURRENT[versions.SUMMARY],
        "variant": name,
        "state": state,
        "cause": cause,
        "workloads": None,
        "sampling": None,
        "quality": None,
    }


def sampling_summary(samples_path: Path, sampler_cpu_fraction: float, samples_written: int) -> dict:
    """Per-phase system figures of the variant's samples, and the sampler's own CPU use."""
    return {
        "phases": summarize_samples(results.read_jsonl(samples_path)),
        "sampler_cpu_fraction": round(sampler_cpu_fraction, 5),
        "samples_written": samples_written,
    }


def write_variant_summary(vpaths: results.VariantPaths, summary: dict) -> None:
    results.write_json_atomic(vpaths.summary, summary)


# -- the run -----------------------------------------------------------------------------------


def parity_headline(report: dict) -> dict:
    """What the summary keeps of a parity report: the verdict, the ON-vs-OFF and OFF-vs-OFF
    (control) figures side by side, and the statistical test behind the verdict (``floor``)."""
    keep = (
        "verdict",
        "baseline_noise",
        "reason",
        "host_hit_requests",
        "on_requests",
        "reasks",
        "reasks_with_host_hit",
        "pairs",
        "unmatched_on",
        "errors",
        "tie_epsilon",
        "top_k",
        "alpha",
        "host_keys",
        "on_lost",
        "on_gained",
        "mcnemar_p",
        "floor",
    )
    out = {k: report.get(k) for k in keep}
    out["groups"] = [
        {
            k: g.get(k)
            for k in (
                "task",
                "length_target",
                "verdict",
                "pairs",
                "token_equal",
                "tie_flips",
                "divergences",
                "outside_topk",
                "first_divergence_min",
                "max_abs_dlogprob",
                "host_hit_requests",
                "accuracy_on",
                "accuracy_off",
                "on_lost",
                "on_gained",
                "mcnemar_p",
                "control_pairs",
                "control_differing",
                "control_worst",
                "on_worse",
                "control_worse",
                "p_value",
            )
        }
        for g in report.get("groups", [])
    ]
    return out


def evaluate_run_parity(quality: Quality, run: results.RunPaths, variant_names: list[str]) -> dict[str, dict]:
    """Parity of every variant that has quality rows against the baseline variant (each full
    report written to its ``parity.json``) under the scenario's ``quality:`` block; {variant: headline}."""
    if not quality.enabled:
        return {}
    baseline = quality.baseline_variant
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
        report = evaluate_parity(on_rows, off_rows, None, quality).to_dict()
        results.write_json_atomic(vpaths.root / PARITY_FILE, report)
        verdicts[name] = parity_headline(report)
    return verdicts


def write_run_products(run: results.RunPaths, quality: Quality, cost: CostPrices | None) -> None:
    """Once every variant ran: parity into the summaries of the arms that have it (the scenario's
    ``quality:`` block), then summary.csv, and cost.json with the scenario's ``cost:`` prices."""
    names = read_manifest(run.root).names
    for name, headline in evaluate_run_parity(quality, run, names).items():
        vpaths = run.variant(name)
        if vpaths.summary.exists():
            stored = read_summary(vpaths.summary)
            write_variant_summary(vpaths, {**stored.raw, "quality": {**stored.quality, "parity": headline}})
    write_summary_csv(run, names)
    if cost is not None:
        write_cost(run, names, cost)


def write_cost(run: results.RunPaths, names: list[str], prices_block: CostPrices) -> None:
    """cost.json: each variant that served priced at its SLO goodput, and the cheapest that met
    the SLO (`harness.analysis.cost`)."""
    prices = Prices(prices_block.gpu_hour_usd, prices_block.host_ram_gb_hour_usd, prices_block.storage_tb_month_usd)
    costs = []
    for name in names:
        vpaths = run.variant(name)
        if not (vpaths.summary.exists() and vpaths.status.exists()):
            continue
        summary, status = read_summary(vpaths.summary), read_status(vpaths.status)
        if not summary.measured:
            continue
        wl, tok_s, met = slo_goodput(summary)
        phases = summary.samples.phases.values()
        storage_kib = max((p.max_storage_dir_kib or 0 for p in phases), default=0)
        timing, pools = StoredTiming.from_json(status.timing), Pools.from_json(status.pools)
        costs.append(
            variant_cost(
                name,
                prices,
                gpus=int((timing.gpus if timing is not None else None) or 1),
                host_pool_gb=float((pools.host_pool_gb if pools is not None else None) or 0.0),
                storage_gb=storage_kib / (1 << 20),
                goodput_tok_s=tok_s,
                meets_slo=met,
                slo_workload=wl,
            )
        )
    results.write_json_atomic(
        run.root / COST_FILE, {"schema_version": results.SCHEMA_VERSION, "prices": asdict(prices), **run_costs(costs)}
    )


def write_summary_csv(run: results.RunPaths, names: list[str]) -> None:
    """summary.csv from the variants' summary.json files (a variant without one has no rows)."""
    rows: list[dict] = []
    for name in names:
        vpaths = run.variant(name)
        if vpaths.summary.exists():
            rows.extend(summary_rows(name, read_summary(vpaths.summary)))
    results.write_text_atomic(run.summary_csv, rows_to_csv(rows))


def rows_to_csv(rows: list[dict]) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=CSV_COLUMNS, extrasaction="ignore")
    w.writeheader()
    for row in rows:
        w.writerow(row)
    return buf.getvalue()


# -- the verdict -------------------------------------------------------------------------------


def judge_run(
    run_dir: Path, expectation_rows: Sequence[dict] | None = None, policy: VerdictPolicy | None = None
) -> RunVerdict:
    """The verdict of a run folder from its stored files (`run_folder.load_run`): every variant the
    manifest lists (one without a status.json did not run), its rows of ``expectations.json`` and
    the scenario's ``verdict:`` rules (both read from the folder when not given)."""
    run = run_folder.load_run(Path(run_dir))
    if expectation_rows is None:
        path = run.paths.root / EXPECTATIONS_FILE
        expectation_rows = results.read_json_object(path).get("checks", []) if path.exists() else []
    if policy is None:
        policy = VerdictPolicy.from_block(run.manifest.scenario.block("verdict") or None)
    verdicts = []
    for v in run.variants:
        rows = [r for r in expectation_rows if r.get("variant") == v.name]
        status = v.status if v.status.state != NOT_RUN else None
        verdicts.append(variant_verdict(v.name, status, v.summary, rows, policy))
    worse: dict[str, list[Reason]] = {}
    for w in worse_than_off({v.name: v.summary for v in run.variants}, off_variant(run.manifest)):
        worse.setdefault(w.variant, []).append(Reason("worse_than_off", w.text, w.variant))
    verdicts = [replace(v, warnings=v.warnings + tuple(worse.get(v.variant, ()))) for v in verdicts]
    shard = run.manifest.shard
    if not verdicts and shard and not run.paths.interrupted.exists():  # more shards than variants: by design
        return RunVerdict(
            Outcome.PASS,
            (),
            (Reason("empty_shard", f"shard {shard.get('index')}/{shard.get('count')} was assigned no variant"),),
        )
    return run_verdict(verdicts, interrupted=run.paths.interrupted.exists())


def off_variant(manifest: Manifest) -> str | None:
    """The run's HiCache OFF variant, what "worse than off" is judged against: the quality
    baseline where it has HiCache off, else the first variant without HiCache; None if none."""
    off = [v.name for v in manifest.variants if v.hicache is None]
    baseline = manifest.scenario.block("quality").get("baseline_variant")
    if baseline in off:
        return baseline
    return off[0] if off else None


def write_verdict(run: results.RunPaths, verdict: RunVerdict) -> None:
    results.write_json_atomic(run.root / VERDICT_FILE, {"schema_version": results.SCHEMA_VERSION, **verdict.to_json()})

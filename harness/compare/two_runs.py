"""Two runs compared: `compare_runs` reads the candidate and the baseline (and a baseline pool, and
extra rounds of the candidate's night) through `harness.compare.runs`, states each variant, builds
the metric rows of each compared variant (`harness.compare.rows`), and judges them
(`harness.compare.gating`); an INCONCLUSIVE look gets its advice and the round it may run.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from harness.analysis.expectations import evaluate_run_expectations
from harness.analysis.figures import variant_figures
from harness.analysis.verdict import Outcome
from harness.compare.changes import night_changes
from harness.compare.comparison import (
    FAILING_VARIANT_STATES,
    Comparison,
    MetricRow,
    NextRound,
    VariantRow,
    status_wall_s,
    variant_state,
)
from harness.compare.curves import curve_points
from harness.compare.gating import judge
from harness.compare.power import comparison_advice, next_round
from harness.compare.rows import (
    PARITY,
    client_bound_rows,
    compare_variant,
    derived_values,
    metric_samples,
    parity_row,
    unexercised_rows,
    vanished_knees,
)
from harness.compare.runs import (
    BaselineChoice,
    build_change,
    check_same_scenario,
    config_hashes,
    run_expectations,
    run_info,
    run_policy,
    run_workload_kinds,
    run_workload_specs,
    variant_builds,
    variant_requests,
)
from harness.compare.startup import host_pool_row
from harness.compare.statistics import ALPHA, look_alpha
from harness.store import results, run_folder
from harness.store.summary import Summary

# ------------------------------------------------------------------------------------ two runs


def _round_why(run: run_folder.LoadedRun) -> str:
    """What an extra round ran: its repeats and workloads (its stored scenario)."""
    specs = run_workload_specs(run.manifest)
    return f"repeats {run.manifest.repeats} of {', '.join(specs) or 'its workloads'}"


def pooled_baseline(
    sides: Sequence[tuple[str, run_folder.LoadedVariant]], names_to_kinds: Mapping[str, str]
) -> tuple[pd.DataFrame, dict[tuple[str, str], list[float]], Summary | None]:
    """One variant's requests frame and derived values over the nights of a baseline pool
    ((run id, variant) each, newest first): the frames concatenated with each concurrency group
    named by its night (a group of one night is never merged with another's), the per-repeat
    derived values of every night one list; and the first night's figures
    (`harness.analysis.figures`), which the other rows of the variant read, computed once."""
    frames, derived, first = [], {}, None
    for i, (run_id, v) in enumerate(sides):
        req = variant_requests(v)
        if len(sides) > 1 and len(req):
            req = req.copy()
            req["concurrency_group"] = [
                f"{run_id}/{g}" if isinstance(g, str) else None for g in req["concurrency_group"]
            ]
        frames.append(req)
        figures = variant_figures(v, names_to_kinds)
        first = figures if i == 0 else first
        for key, vs in derived_values(figures, names_to_kinds).items():
            derived.setdefault(key, []).extend(vs)
    return (frames[0] if len(frames) == 1 else pd.concat(frames, ignore_index=True)), derived, first


def pool_drift(
    name: str,
    nights: Sequence[tuple[str, run_folder.LoadedVariant]],
    kinds: Mapping[str, str],
    rows: Sequence[MetricRow],
) -> list[str]:
    """Drift inside a baseline pool: for each gating row of variant ``name`` measured per request
    or group, its nights' medians (``nights`` newest first); a note when they moved by at least
    the row's threshold from the oldest night to the newest. The pool's spread includes that
    drift; the note says it is there."""
    if len(nights) < 3:
        return []
    per_night = [metric_samples(variant_requests(v), dict(kinds)) for _, v in nights]
    out = []
    for r in rows:
        if not r.gating or r.phase == "*" or r.variant != name:
            continue
        key = (r.workload, r.phase, r.metric)
        meds = [float(np.median(s[key].evidence())) for s in reversed(per_night) if key in s and s[key].values.size]
        if len(meds) < 3 or meds[0] == 0:
            continue
        moved = (meds[-1] - meds[0]) / abs(meds[0])
        if abs(moved) >= r.threshold:
            shown = ", ".join(f"{m:.4g}" for m in meds)
            out.append(
                f"baseline pool drifts: {name} {r.name} night medians {shown} (oldest to newest), "
                f"{moved * 100:+.1f}% over {len(meds)} nights"
            )
    return out


def _same_variant(
    runs: Sequence[run_folder.LoadedRun], name: str, config_hash: str | None = None
) -> list[tuple[str, run_folder.LoadedVariant]]:
    """(run id, variant) of each run that has variant ``name`` finished ok (and, when given,
    with that config hash)."""
    out = []
    for r in runs:
        v = next((x for x in r.variants if x.name == name), None)
        if v is None or not v.ok:
            continue
        if config_hash is not None and config_hashes(r).get(name) != config_hash:
            continue
        out.append((r.run_id, v))
    return out


def compare_runs(
    base: run_folder.LoadedRun | None,
    cand: run_folder.LoadedRun,
    choice: BaselineChoice | None = None,
    rounds: Sequence[run_folder.LoadedRun] = (),
) -> Comparison:
    """Compare the candidate with ``base`` (None: no baseline; expectations only, INCONCLUSIVE).
    Raises `harness.compare.runs.BaselineMismatch` for a baseline of another scenario. Variants
    whose config hash differs are not compared (``not_comparable: config changed``), nor are
    the workloads whose definition in the stored scenario text differs. ``rounds``: extra rounds
    of the candidate's night (runs of the same scenario and config, e.g. more repeats of the
    workloads an inconclusive row needs), pooled with it; every look is tested at the alpha the
    scenario's ``verdict.rounds`` spends on it (`harness.compare.statistics.look_alpha`)."""
    exp = run_expectations(cand.manifest)
    thresholds = {k: t.fraction for k, t in exp.thresholds.items()}
    comp = Comparison(candidate=run_info(cand), gate=[g.text for g in exp.gate])
    allowed = run_policy(cand.manifest).rounds
    alpha = look_alpha(allowed) if allowed else ALPHA
    for r in rounds:
        check_same_scenario(r, cand)
    if len(rounds) > allowed:
        raise results.ResultsError(
            f"{len(rounds)} extra rounds given, but the scenario's verdict.rounds allows {allowed}: "
            "a look the alpha spending did not plan for would not keep the false-alarm rate"
        )
    if allowed:
        comp.notes.append(
            f"sequential: look {1 + len(rounds)} of at most {1 + allowed}, every look tested at alpha "
            f"{alpha:.3g} (alpha {ALPHA:g} spent equally over the looks)"
        )
    for i, r in enumerate(rounds, 1):
        comp.notes.append(f"round {i + 1}: {r.run_id} pooled with the candidate ({_round_why(r)})")
    if rounds:
        comp.candidate["rounds"] = [r.run_id for r in rounds]
    if exp.problem is not None:
        comp.notes.append(f"scenario re-read from its raw YAML only ({exp.problem})")
    if choice is not None:
        comp.baseline_choice = choice.lines()
    comp.expectations = evaluate_run_expectations(cand.paths.root)
    if not cand.complete:
        comp.notes.append("the candidate run is not COMPLETE (interrupted or still running)")
    if base is None:
        judge(comp, exp.gate, exp.quality_baseline, alpha)
        return comp
    check_same_scenario(base, cand)
    comp.baseline = run_info(base)
    comp.changes = [
        c.to_json()
        for c in night_changes(
            base.manifest,
            cand.manifest,
            {v.name: v.status for v in base.variants},
            {v.name: v.status for v in cand.variants},
        )
    ]
    pool = list(choice.pool) if choice is not None else []
    if pool:
        comp.baseline["pool"] = [r.run_id for r in pool]
        comp.notes.append(
            f"baseline pooled over {1 + len(pool)} nights ({base.run_id}, " + ", ".join(r.run_id for r in pool) + ")"
        )
    policy = run_policy(cand.manifest)
    changed_workloads: set[str] = set()
    if comp.baseline["scenario_hash"] != comp.candidate["scenario_hash"]:
        specs_b, specs_c = run_workload_specs(base.manifest), run_workload_specs(cand.manifest)
        changed_workloads = {w for w in specs_c if specs_b.get(w) != specs_c[w]}
        comp.notes.append(
            "the scenario text differs between the two runs: only variants with the same config "
            "hash are compared"
            + (
                ", and not the workloads whose definition changed: " + ", ".join(sorted(changed_workloads))
                if changed_workloads
                else ""
            )
        )
    base_kinds, cand_kinds = run_workload_kinds(base.manifest), run_workload_kinds(cand.manifest)
    base_v = {v.name: v for v in base.variants}
    cand_v = {v.name: v for v in cand.variants}
    hashes_b, hashes_c = config_hashes(base), config_hashes(cand)
    builds_b, builds_c = variant_builds(base), variant_builds(cand)
    complete = base.complete and cand.complete
    for name in list(dict.fromkeys([*cand_v, *base_v])):
        bv, cv = base_v.get(name), cand_v.get(name)
        state, note = variant_state(bv.status if bv else None, cv.status if cv else None, complete=complete)
        changed = None if (bv is None or cv is None) else hashes_b.get(name) != hashes_c.get(name)
        if changed and state not in FAILING_VARIANT_STATES and state != "skipped":
            state, note = "not_comparable", "config changed (variant config hash differs)"
        build_note = build_change(builds_b.get(name), builds_c.get(name))
        if build_note:  # compared all the same: the build is what a nightly comparison judges
            note = f"{note}; {build_note}" if note else build_note
            comp.notes.append(f"{name}: {build_note}")
        comp.variants.append(
            VariantRow(
                name,
                bv.status.state if bv else None,
                cv.status.state if cv else None,
                state,
                note,
                changed,
                candidate_wall_s=status_wall_s(cv.status) if cv else None,
            )
        )
        if state == "compared":
            base_req, base_derived, bf = pooled_baseline([(base.run_id, bv), *_same_variant(pool, name)], base_kinds)
            cand_req, cand_derived, cf = pooled_baseline(
                [(cand.run_id, cv), *_same_variant(rounds, name, hashes_c.get(name))], cand_kinds
            )
            rows = compare_variant(
                name,
                base_req,
                cand_req,
                base_derived,
                cand_derived,
                thresholds,
                base_kinds,
                cand_kinds,
                alpha,
            )
            vanished_knees(name, bf, cf, cand_kinds, rows, thresholds)
            unexercised_rows(bf, cf, rows)
            client_bound_rows(bf, cf, rows)
            host_pool = host_pool_row(name, bv.status, cv.status, thresholds)  # the start's host-pool setup
            if host_pool is not None:
                rows.append(MetricRow(**host_pool))
            for r in rows:
                if r.workload in changed_workloads:
                    r.state, r.note = "not_comparable", "workload definition changed"
            comp.curves.extend(curve_points(name, bf, cf, cand_kinds, rows))
            comp.metrics.extend(rows)
        if cv is not None and cv.ok:  # parity is the candidate's own: judged
            checks = [e for e in comp.expectations if e.get("variant") == name]
            row = parity_row(name, bv.summary if bv else None, cv.summary, policy, checks)  # even when not comparable
            if row is not None:
                row.threshold_source = "parity verdict"
                comp.metrics.append(row)
    judge(comp, exp.gate, exp.quality_baseline, alpha)
    if pool:
        for v in comp.variants:
            if v.state == "compared" and v.variant in base_v:
                nights = [(base.run_id, base_v[v.variant]), *_same_variant(pool, v.variant)]
                comp.notes += pool_drift(v.variant, nights, base_kinds, comp.metrics)
    if comp.outcome == Outcome.INCONCLUSIVE.value:
        done = sum(int(r.manifest.repeats or 1) for r in (cand, *rounds))
        comp.advice = comparison_advice(comp.metrics, done, bool(exp.gate))
        more = next_round(comp.metrics, done)
        if more is not None and allowed > len(rounds) and more[0] > done:
            stuck = [r for r in comp.metrics if r.gating and r.state == "inconclusive" and r.variant in more[1]]
            rows = [f"{r.variant} {r.workload}.{r.phase}.{r.metric}: {r.note or 'inconclusive'}" for r in stuck]
            loads = sorted({r.workload for r in stuck if r.sample != "verdict" and r.workload != PARITY[0]})
            comp.next_round = NextRound(len(rounds) + 2, allowed + 1, more[0] - done, more[1], rows, loads)
            scenario_path = cand.manifest.scenario.path or "SCENARIO"
            only = " ".join(f"--only {v}" for v in more[1])
            added = " ".join(f"--round {r.paths.root}" for r in rounds)
            comp.advice += (
                f"; round {len(rounds) + 2} of at most {allowed + 1} (verdict.rounds): harness run {scenario_path} "
                f"--repeats {more[0] - done} --no-quality {only}, then harness compare {cand.paths.root} "
                f"--baseline {(comp.baseline or {}).get('path', 'latest')} {added} --round NEW_RUN".replace("  ", " ")
            )
    for c in comp.curves:  # a point gates when one of its metric rows does
        c.gating = any(
            m.gating for m in comp.metrics if (m.variant, m.workload, m.phase) == (c.variant, c.workload, c.phase)
        )
    return comp

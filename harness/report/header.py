"""The report's header section: the verdict banner, run identity, host fingerprint, platform
probes, the variants.

One job: shaping the manifest's and statuses' fields for the top of the page. The banner states
the run's one verdict, `harness.analysis.run_products.judge_run` over the stored files (the rules of
`harness.analysis.verdict`, so an old run gets today's verdict and a new one the verdict its
``verdict.json`` and exit code state), its reasons one per line, each variant's outcome
(an expected failure neutral, never red), and a comparison's verdict beside it, labelled as the
comparison's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from harness.analysis.run_products import judge_run
from harness.analysis.verdict import RunVerdict
from harness.report.formatting import KIB_PER_GIB
from harness.report.view import RunView
from harness.store import results
from harness.store.manifest import BuildInfo
from harness.store.probe_result import ProbeResult
from harness.store.products import StoredComparison

# the css class of each outcome: green, red, grey, "cannot tell", neutral
OUTCOME_CSS = {
    "PASS": "PASS",
    "FAIL": "FAIL",
    "INTERRUPTED": "INTERRUPTED",
    "INCONCLUSIVE": "INCONCLUSIVE",
    "EXPECTED_FAILURE": "EXPECTED",
}
# comparison.json's verdict, in either vocabulary (pass | regression | no_baseline, or an outcome)
COMPARISON_CSS = {
    "pass": "PASS",
    "regression": "FAIL",
    "no_baseline": "EXPECTED",
    "PASS": "PASS",
    "FAIL": "FAIL",
    "INCONCLUSIVE": "INCONCLUSIVE",
}
MAX_COMPARISON_REASONS = 5
MAX_NIGHT_CHANGES = 10  # what changed between the nights, most likely cause first


def probe_rows(probe: ProbeResult | None) -> list[tuple[str, str]]:
    """The stored platform-probe result as (label, value) rows; none without a probe."""
    if probe is None:
        return []
    rows = [
        ("WSL", str(probe.wsl)),
        ("torch / CUDA", f"{probe.torch_version} / {probe.cuda_runtime}"),
        ("driver", str(probe.driver)),
    ]
    for d in probe.devices:
        rows.append(
            (
                f"GPU{d.index} {d.name}",
                (
                    f"pageableMemoryAccess={d.pageable_memory_access}, "
                    f"usesHostPageTables={d.uses_host_page_tables}, "
                    f"HMM/ATS: {d.hmm_or_ats}"
                ),
            )
        )
    if probe.host_register_ok:
        rows.append(
            (
                "kernel write to cudaHostRegister memory",
                ", ".join(f"flags {k}: {'ok' if ok else 'FAIL'}" for k, ok in probe.host_register_ok.items()),
            )
        )
    if probe.host_alloc_ok is not None:
        rows.append(("kernel write to cudaHostAlloc memory", "ok" if probe.host_alloc_ok else "FAIL"))
    bw = probe.bandwidth_gbs
    if bw:
        rows.append(("bandwidth GB/s", ", ".join(f"{k} {v:.1f}" for k, v in bw.items() if v is not None)))
    if probe.reason:
        rows.append(("note", str(probe.reason)))
    return rows


def header(view: RunView) -> dict[str, Any]:
    """Scenario, run id, backend, versions, harness argv, host rows and the allowlisted env."""
    m = view.manifest
    sg, src, host = m.sglang, m.sglang_source, m.host
    mem_total = host.get("mem_total_kib")
    gpus = (
        ", ".join(
            f"{g.get('name')} ({g.get('memory_total_mib')} MiB, driver {g.get('driver')})"
            for g in host.get("gpus") or []
        )
        or "none recorded"
    )
    return {
        "scenario": m.scenario.name,
        "scenario_path": m.scenario.path,
        "scenario_hash": m.scenario.hash,
        "description": view.description,
        "run_id": view.root.name,
        "created_at": m.created_at,
        "backend": m.backend,
        "simulated": m.simulated,
        "harness_version": m.harness_version,
        "harness_argv": " ".join(m.harness_argv),
        "seed": m.seed,
        "repeats": m.repeats,
        "sglang_version": sg.get("version"),
        "sglang_location": sg.get("location"),
        "sglang_git": sg.get("git") or src or None,
        "host": [
            ("host", host.get("hostname")),
            ("kernel", host.get("kernel")),
            ("WSL", host.get("wsl")),
            ("CPU", f"{host.get('cpu')} × {host.get('cpu_count')}"),
            ("MemTotal", f"{mem_total / KIB_PER_GIB:.1f} GiB" if mem_total else "not recorded"),
            ("GPUs", gpus),
            ("python", host.get("python")),
        ],
        "env": m.env,
    }


def variant_rows(view: RunView) -> list[dict]:
    """One row per manifest variant: state, expectation, HiCache block, argv/env, config hash."""
    out = []
    for e in view.manifest.variants:
        st = view.status(e.name)
        out.append(
            {
                "name": e.name,
                "state": st.state,
                "cause": st.cause,
                "expect": e.raw.get("expect"),
                "expect_met": st.expect_met,
                "hicache": e.raw.get("hicache"),  # the block as the run stored it
                # an external server (backend external) was not launched: its URL and version instead
                "argv": " ".join(e.argv) or (f"running server {e.url} (sglang {e.server_version})" if e.url else ""),
                "env": e.env,
                "config_hash": (e.config_hash or "")[:12],
                "ready_s": st.ready_s,
                "attached": st.origin.external,  # attached to a running server: no start-up
                "env_not_clean": st.env_not_clean,
                "build": build_label(e.build),
            }
        )
    return out


def build_label(build: BuildInfo | None) -> str | None:
    """A variant's build as one cell: name, version, the checkout's short commit (+dirty), or
    None for a run recorded before builds were."""
    if build is None:
        return None
    commit = f" @{str(build.commit)[:10]}{'+dirty' if build.dirty else ''}" if build.commit else ""
    return f"{build.build} {build.version or '(version unknown)'}{commit}"


def judged_expectations(view: RunView, evaluate) -> list[dict]:
    """The within-run expectation rows the verdict is judged on: the run's expectations.json when
    it has one (what ``harness run`` judged), none for an interrupted run without it (the run
    judged none), else ``evaluate(run_dir)`` (an older run that never wrote the file)."""
    if view.stored_expectations is not None:
        return view.stored_expectations
    if view.interrupted:
        return []
    return evaluate(view.root)


def _flagged_changes(c: StoredComparison) -> list[str]:
    """comparison.json's ``changes`` (ranked), when it flagged a change (a metric moved, a variant not
    comparable); [] otherwise."""
    if not any(c.counts.get(k) for k in ("regression", "improved", "variant_not_comparable")):
        return []
    return list(c.changes[:MAX_NIGHT_CHANGES]) or [
        "nothing differs between the two nights' manifests, builds, probes or pools"
    ]


def banner(view: RunView, expectation_rows: Sequence[dict]) -> dict[str, Any]:
    """The verdict banner: the run's outcome and reasons (`judge_run`), each variant's outcome, a
    comparison's verdict (labelled as such) and notes (a stored verdict.json that states another
    outcome than today's rules). A run with neither COMPLETE nor INTERRUPTED has no verdict yet:
    INCOMPLETE, saying whether a process still holds its .lock (live) or none does (killed)."""
    verdict: RunVerdict = judge_run(view.root, list(expectation_rows))
    variants = [
        {
            "variant": v.variant,
            "outcome": v.outcome.value,
            "css": OUTCOME_CSS[v.outcome.value],
            "reasons": [r.text for r in v.reasons],
        }
        for v in verdict.variants
    ]
    notes = []
    outcome, css, exit_code = verdict.outcome.value, OUTCOME_CSS[verdict.outcome.value], int(verdict.exit_code)
    run_reasons = [r.line() for r in verdict.reasons]
    if not view.complete and not view.interrupted:  # no verdict yet: never PASS (or FAIL) plus a note
        holder = results.run_lock_holder(view.root)
        outcome, css, exit_code = "INCOMPLETE", "INCOMPLETE", None
        run_reasons.insert(
            0,
            f"still running ({holder} holds its .lock): this page shows what it has written so far"
            if holder
            else "did not finish: no COMPLETE marker and no process holds its .lock (killed, or its machine "
            f"went down); `harness run --resume {view.root}` runs what is missing",
        )
    stored = view.stored_verdict.outcome if view.stored_verdict is not None else None
    if stored is not None and stored != verdict.outcome.value:
        notes.append(
            f"verdict.json, written by the run, states {stored}; the rules of this harness "
            f"give {verdict.outcome.value} from the same files"
        )
    comparison = None
    c = view.comparison
    if c is not None and c.raw:
        reasons = list(c.reasons)
        more = len(reasons) - MAX_COMPARISON_REASONS
        comparison = {
            "verdict": str(c.verdict),
            "css": COMPARISON_CSS.get(c.verdict, "EXPECTED"),
            "baseline": c.baseline_run_id,
            "counts": ", ".join(f"{k} {v}" for k, v in c.counts.items() if v),
            "reasons": reasons[:MAX_COMPARISON_REASONS] + ([f"(+{more} more)"] if more > 0 else []),
            "n_reasons": len(reasons),
            # INCONCLUSIVE: what would decide it, the line the console, Markdown and JUnit end with
            "advice": c.advice,
            # what differs between the two nights (harness.compare.changes), where the comparison flagged a change
            "changes": _flagged_changes(c),
        }
    return {
        "outcome": outcome,
        "css": css,
        "exit_code": exit_code,  # None: the run has not finished, so it has no exit code yet
        "reasons": run_reasons,
        # a hit slower than recomputing it (harness.measures.roofline.worse_than_off): the headline's warning
        "worse_than_off": [w.line() for w in verdict.warnings if w.code == "worse_than_off"],
        # fewer cached tokens than the pools predict (harness.measures.tier_model): beside it
        "tier_shortfalls": [w.line() for w in verdict.warnings if w.code == "tier_shortfall"],
        "variants": variants,
        "comparison": comparison,
        "notes": notes,
        "simulated": view.manifest.simulated,
    }


def hicache_effect(view: RunView) -> dict[str, Any] | None:
    """The headline box's figures: the HiCache variant with the best second-pass speedup (else
    the first that ran ok), its speedup beside the HiCache-off variant's, its host-hit against its
    cold TTFT, its host and storage share, every HiCache variant's parity, and each figure's
    change against the compared baseline — read from the results table
    (`harness.analysis.results_table`), the console's figures, so the page and the console agree. None
    when no HiCache variant ran ok."""
    from harness.analysis.results_table import results_table

    table = results_table(view.root)
    ok = [r for r in table.rows if r.state == "ok"]
    ons = [r for r in ok if view.hicache(r.variant)]
    offs = [r for r in ok if not view.hicache(r.variant)]
    if not ons:
        return None

    def speedup(r) -> float:
        v = r.cells["second_pass_speedup"].value
        return v if v is not None else float("-inf")

    best = max(ons, key=speedup)
    off = offs[0] if offs else None

    def figure(row, key):
        c = row.cells[key] if row is not None else None
        if c is None or c.value is None:
            return None
        return {"value": c.value, "change": c.change, "state": c.state}

    cold, host = figure(best, "cold_ttft_ms"), figure(best, "host_hit_ttft_ms")
    return {
        "variant": best.variant,
        "off": off.variant if off is not None else None,
        "speedup": figure(best, "second_pass_speedup"),
        "off_speedup": figure(off, "second_pass_speedup"),
        "cold_ttft": cold,
        "host_ttft": host,
        "host_vs_cold": cold["value"] / host["value"] if cold and host and host["value"] > 0 else None,
        "host_share": figure(best, "host_share"),
        "storage_share": figure(best, "storage_share"),
        "parity": [
            {"variant": r.variant, "verdict": r.parity, "css": OUTCOME_CSS.get(r.parity or "", "INCONCLUSIVE")}
            for r in ons
        ],
        "compared": table.baseline is not None,
    }

"""The report's HiCache table, one column per variant: the rows each workload's kind declares
(`WorkloadKind.report_rows`, in scenario order), then quality parity, load-back and the storage
tier's bandwidth; deltas against the HiCache-off baseline tested (`harness.report.tables`).
The baseline's cell of a figure read from phases where a HiCache variant got host-tier hits is
labelled as the no-HiCache baseline: OFF recomputes there what ON loads back, so its figure is the
reference, not a competitor. Also the roofline and tier-prediction rows the report lists.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from harness.analysis.bandwidth import load_back_fraction, storage_fraction
from harness.analysis.frames import groups_frame
from harness.analysis.summary import unexercised_figures
from harness.measures.metrics import METRICS
from harness.report.tables import Row, Samples, finite_values, sampling_phases, table_row
from harness.report.view import RunView, baseline_variant
from harness.store.summary import Summary
from harness.workloads.kind import PhaseStat, ReportRow


def report_value(summary: Summary | None, workload: str, value: str | PhaseStat) -> float | None:
    """A report row's figure from a variant's figures: a phase statistic, or a derived figure."""
    w = summary.workload(workload) if summary is not None else None
    if w is None:
        return None
    if isinstance(value, PhaseStat):
        return value.stored(w.phases)
    return w.derived.get(value)


def _phase_values(view: RunView, name: str, workload: str, stat: PhaseStat, groups: dict[str, pd.DataFrame]) -> Samples:
    """The per-request values of a phase statistic's metric (per concurrency group for a group
    metric), measured and error-free, all repeats pooled (what the summary's statistic covers)."""
    df = view.requests.get(name)
    metric = METRICS.get(stat.metric)
    if df is None or df.empty or metric is None:
        return Samples(np.array([], float), "req")
    if metric.per == "group":
        if name not in groups:
            groups[name] = groups_frame(df)
        g = groups[name]
        sel = g[(g["workload"] == workload) & (g["phase"] == stat.phase)] if not g.empty else g
        return Samples(
            finite_values(sel[stat.metric].to_numpy(dtype=float)) if stat.metric in sel else np.array([]), "group"
        )
    sel = df[(df["workload"] == workload) & (df["phase"] == stat.phase) & (df["warmup"] != True) & df["error"].isna()]
    return Samples(finite_values(sel[stat.metric].to_numpy(dtype=float)) if stat.metric in sel else np.array([]), "req")


def repeat_values(summary: Summary | None, workload: str, derived: str) -> list[float]:
    """A derived figure's per-repeat values from the figures' ``workloads[wl].derived_by_repeat``
    (`harness.analysis.figures` recomputes it for a summary that predates it); [] when there
    are none."""
    w = summary.workload(workload) if summary is not None else None
    vals = w.repeat_values(derived) if w is not None else ()
    return [float(v) for v in vals if isinstance(v, (int, float)) and math.isfinite(v)]


def _derived_values(summary: Summary | None, workload: str, derived: str) -> Samples:
    """A derived figure's per-repeat values; without them, its one value for the run (no test)."""
    per_repeat = repeat_values(summary, workload, derived)
    if per_repeat:
        return Samples(np.asarray(per_repeat), "repeat")
    v = report_value(summary, workload, derived)
    return Samples(np.asarray([v] if isinstance(v, (int, float)) else [], float), "run")


def host_hit_phases(view: RunView, workload: str, base: str | None) -> set[str]:
    """Phases of a workload where a variant other than the baseline got host-tier hits."""
    out: set[str] = set()
    for n in view.names:
        if n == base or not view.ok(n):
            continue
        f = view.summary(n)
        for ph, d in (f.phases(workload) if f is not None else {}).items():
            if d.hits.get("host_tokens"):
                out.add(ph)
    return out


def _reads_phases(view: RunView, workload: str, r: ReportRow) -> tuple[str, ...]:
    if isinstance(r.value, PhaseStat):
        return (r.value.phase,)
    kind = view.kind(workload)
    return next((d.needs for d in (kind.derived if kind else ()) if d.name == r.value), ())


def workload_rows(view: RunView, workload: str, declared: tuple[ReportRow, ...], base: str | None) -> list[Row]:
    """The HiCache-table rows a workload's kind declares, ``{workload}`` filled in; each delta
    tested on the phase's per-request values or the derived figure's per-repeat values."""
    groups: dict[str, pd.DataFrame] = {}
    host = host_hit_phases(view, workload, base)
    rows = []
    for r in declared:
        if isinstance(r.value, PhaseStat):
            samples = lambda n, r=r: _phase_values(view, n, workload, r.value, groups)
        else:
            samples = lambda n, r=r: _derived_values(view.summary(n), workload, r.value)
        hit = sorted(host.intersection(_reads_phases(view, workload, r)))
        baseline_note = (
            f"no HiCache: the no-cache baseline — it recomputed in {', '.join(hit)} what "
            f"the HiCache variants loaded back from the host tier"
            if hit
            else ""
        )
        rows.append(
            table_row(
                view,
                r.label.replace("{workload}", workload),
                r.unit,
                lambda n, r=r: report_value(view.summary(n), workload, r.value),
                r.higher_is_better,
                base,
                note=r.note.replace("{workload}", workload),
                samples=samples,
                baseline_note=baseline_note,
            )
        )
        if not isinstance(r.value, PhaseStat):
            mark_unexercised(view, workload, r.value, rows[-1])
    return rows


def mark_unexercised(view: RunView, workload: str, figure: str, row: Row) -> None:
    """Mark the cells of a derived figure that a variant measured on a cache phase without a hit
    of the tier it exists to measure (summary ``unexercised``): the number is recompute's."""
    for n, cell in zip(view.names, row.cells):
        why = unexercised_figures(view.summary(n)).get((workload, figure))
        if why is not None:
            cell.css, cell.sub, cell.title = "warn", "⚠ no tier hit: measured recompute", why


def load_back(view: RunView, name: str) -> dict[str, Any]:
    """Load-back bytes and seconds over the workload phases (sampling counter deltas) and the
    fraction of the probed pinned H2D bandwidth. Bytes come from ``load_back_bytes_total``,
    else ``load_back_tokens_total`` × the preflight's KV bytes per token."""
    b = s = tok = 0.0
    have_b = have_s = have_t = False
    for d in sampling_phases(view, name).values():
        for k, v in d.counter_deltas.items():
            if k.startswith("sglang:load_back_bytes_total"):
                b += v
                have_b = True
            elif k.startswith("sglang:load_back_duration_seconds_sum"):
                s += v
                have_s = True
            elif k.startswith("sglang:load_back_tokens_total"):
                tok += v
                have_t = True
    source = "bytes counter"
    if not have_b and have_t:
        pf = view.status(name).preflight
        per_tok = pf.kv_bytes_per_token if pf is not None else None
        if per_tok:
            b, have_b, source = tok * float(per_tok), True, "tokens × KV bytes/token"
    bw = view.probe.bandwidth_gbs.get("pinned_h2d") if view.probe is not None else None
    frac = load_back_fraction(b if have_b else None, s if have_s else None, bw)
    return {
        "bytes": b if have_b else None,
        "seconds": s if have_s else None,
        "tokens": tok if have_t else None,
        "pinned_h2d_gbs": bw,
        "fraction": frac,
        "source": source,
        "gbs": (b / s / 1e9) if have_b and have_s and s > 0 else None,
    }


def roofline_rows(view: RunView, name: str) -> list[dict[str, Any]]:
    """Each hit phase's roofline (summary ``phases.<phase>.roofline``, `harness.measures.roofline`): the
    floor its KV bytes and uncached suffix allow, what it took, and recomputing it; with its
    attribution (summary ``attribution``, `harness.analysis.attribution`) under ``split``."""
    summary = view.summary(name)
    if summary is None:
        return []
    split = {(a.get("workload"), a.get("phase")): a for a in summary.attribution}
    out = []
    for wl, w in summary.measured.items():
        for phase, p in w.phases.items():
            if p.roofline:
                out.append(
                    {"variant": name, "workload": wl, "phase": phase, **p.roofline, "split": split.get((wl, phase))}
                )
    return out


def tier_prediction_rows(view: RunView, name: str) -> list[dict[str, Any]]:
    """Each phase's predicted vs achieved tier tokens (summary ``tier_prediction``,
    `harness.measures.tier_model`), where either is nonzero."""
    summary = view.summary(name)
    if summary is None:
        return []
    tiers = summary.tiers
    out = []
    for wl, phases in tiers.phases.items():
        for phase, p in phases.items():
            if p.get("predicted_total") or p.get("achieved_cached"):
                out.append(
                    {"variant": name, "workload": wl, "phase": phase, "short": (wl, phase) in tiers.shortfalls, **p}
                )
    return out


def storage_bandwidth(view: RunView, name: str) -> dict[str, Any]:
    """The storage tier's (L3) I/O over a variant's phases (sampling's ``storage``): prefetch and
    backup GB/s (sglang's per-operation bandwidth histograms, mean over operations) and each as a
    fraction of the probed disk's read / write bandwidth (``probe.disk``)."""
    acc = {"prefetch": [0.0, 0.0], "backup": [0.0, 0.0]}  # [sum of GB/s over ops, ops]
    for d in sampling_phases(view, name).values():
        st = d.storage
        if st is None:
            continue
        for op, tot in acc.items():
            ops, gbs = st.ops[op], st.gbs[op]
            if ops > 0 and gbs is not None:
                tot[0] += gbs * ops
                tot[1] += ops
    probe = view.probe
    out: dict[str, Any] = {
        "disk_read_gbs": probe.disk_read_gbs if probe is not None else None,
        "disk_write_gbs": probe.disk_write_gbs if probe is not None else None,
    }
    for op, disk_key in (("prefetch", "disk_read_gbs"), ("backup", "disk_write_gbs")):
        total, ops = acc[op]
        gbs = total / ops if ops > 0 else None
        out[f"{op}_gbs"] = gbs
        out[f"{op}_fraction"] = storage_fraction(gbs, out[disk_key])
    return out


def hicache_table(view: RunView) -> tuple[list[Row], str | None]:
    """Seed 000's HiCache table: the rows each workload's kind declares (workloads in scenario
    order), then quality parity and load-back; ON-vs-OFF deltas against the baseline."""
    base = baseline_variant(view)
    rows: list[Row] = []
    for wl in view.workload_names():
        kind = view.kind(wl)
        if kind is not None:
            rows += workload_rows(view, wl, kind.report_rows, base)
    parity = {n: f.parity if (f := view.summary(n)) is not None else {} for n in view.names}
    has_parity = any(parity.values())
    rows.append(
        table_row(
            view,
            "quality parity",
            "",
            lambda n: "reference" if n == base and has_parity else parity[n].get("verdict"),
            None,
            base,
            note="ON vs OFF against OFF vs OFF (see Quality)",
        )
    )
    rows.append(
        table_row(
            view,
            "load-back, fraction of pinned H2D",
            "",
            lambda n: load_back(view, n)["fraction"],
            True,
            None,
            note="needs probe results and load-back counters",
        )
    )
    for op, label, disk in (("prefetch", "storage prefetch", "read"), ("backup", "storage backup", "write")):
        rows.append(
            table_row(
                view, f"{label} GB/s", "GB/s", lambda n, op=op: storage_bandwidth(view, n)[f"{op}_gbs"], True, None
            )
        )
        rows.append(
            table_row(
                view,
                f"{label}, fraction of disk {disk}",
                "",
                lambda n, op=op: storage_bandwidth(view, n)[f"{op}_fraction"],
                True,
                None,
                note=f"sglang's {op} bandwidth / the probed disk's sequential {disk} (harness probe)",
            )
        )
    # drop rows where no variant has a number (e.g. a phase the workload's config left out)
    rows = [r for r in rows if any(c.value is not None for c in r.cells) or r.label == "quality parity"]
    return rows, base

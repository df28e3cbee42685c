"""The report's two tables, one column per variant: the HiCache table and the host-memory table.

One job: turning a `RunView`'s stored figures into rows of cells (text, value, delta against the
HiCache-off baseline, colour by the figure's direction). The HiCache table's workload rows are
the ones each workload's kind declares (`WorkloadKind.report_rows`), in scenario order. A variant
that did not run ok shows its state (e.g. ``startup_failed: host_memory``) in every cell, never
a number.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from harness.bandwidth import load_back_fraction
from harness.report.formatting import KIB_PER_GIB, failure_text, fmt_num
from harness.report.view import RunView, baseline_variant
from harness.workloads.kind import PhaseStat, ReportRow

# Sampler phases the runner sets around the workloads (not load); the quality arm's phases
# start with "quality".
NON_LOAD_PHASES = frozenset({"startup", "idle", "cooldown", "final_check"})


@dataclass
class Cell:
    """One table cell: a number (or a failure/missing text) and its delta against the baseline."""

    text: str
    value: float | str | None = None
    delta: str = ""
    css: str = ""  # good | bad | fail | na | ""
    title: str = ""


@dataclass
class Row:
    label: str
    unit: str
    cells: list[Cell]
    note: str = ""


def delta(value: float | None, base: float | None, higher_is_better: bool | None) -> tuple[str, str]:
    """(``+12.3%``, good | bad | "") of a value against the baseline's; changes under 1 % and
    figures without a direction are not coloured."""
    if value is None or base is None or not isinstance(value, (int, float)) or base == 0:
        return "", ""
    if not (math.isfinite(value) and math.isfinite(base)):
        return "", ""
    d = (value - base) / abs(base)
    text = f"{d * 100:+.1f}%"
    if higher_is_better is None or abs(d) < 0.01:
        return text, ""
    good = d > 0 if higher_is_better else d < 0
    return text, "good" if good else "bad"


def _row(view: RunView, label: str, unit: str, get: Callable[[str], Any], higher_is_better: bool | None,
         base: str | None, digits: int = 3, note: str = "") -> Row:
    cells = []
    base_val = get(base) if base is not None else None
    for n in view.names:
        st = view.status(n)
        if st.get("state") != "ok":
            cells.append(Cell(failure_text(st), None, css="fail"))
            continue
        v = get(n)
        if v is None:
            cells.append(Cell("n/a", None, css="na", title="not measured in this variant"))
            continue
        if isinstance(v, str):
            css = {"PASS": "good", "FAIL": "bad", "WARN": "warn"}.get(v, "na")
            cells.append(Cell(v, v, css=css))
            continue
        d, css = ("", "") if n == base else delta(v, base_val, higher_is_better)
        cells.append(Cell(fmt_num(v, digits), v, d, css))
    return Row(label, unit, cells, note)


def report_value(summary: dict, workload: str, value: str | PhaseStat) -> float | None:
    """A report row's figure from a variant summary: a phase statistic, or a derived figure."""
    w = (summary.get("workloads") or {}).get(workload) or {}
    if isinstance(value, PhaseStat):
        return value.of(w.get("phases") or {})
    return (w.get("derived") or {}).get(value)


def workload_rows(view: RunView, workload: str, declared: tuple[ReportRow, ...], base: str | None) -> list[Row]:
    """The HiCache-table rows a workload's kind declares, ``{workload}`` filled in."""
    return [_row(view, r.label.replace("{workload}", workload), r.unit,
                 lambda n, r=r: report_value(view.summary(n), workload, r.value), r.higher_is_better, base,
                 note=r.note.replace("{workload}", workload))
            for r in declared]


def load_back(view: RunView, name: str) -> dict[str, Any]:
    """Load-back bytes and seconds over the workload phases (sampling counter deltas) and the
    fraction of the probed pinned H2D bandwidth. Bytes come from ``load_back_bytes_total``,
    else ``load_back_tokens_total`` × the preflight's KV bytes per token."""
    b = s = tok = 0.0
    have_b = have_s = have_t = False
    for d in _phases(view, name).values():
        for k, v in (d.get("counter_deltas") or {}).items():
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
        pred = ((view.status(name).get("preflight") or {}).get("prediction") or {})
        per_tok = pred.get("kv_bytes_per_token")
        if per_tok:
            b, have_b, source = tok * float(per_tok), True, "tokens × KV bytes/token"
    bw = None
    if view.probe:
        bw = (view.probe.get("bandwidth_gbs") or {}).get("pinned_h2d")
    frac = load_back_fraction(b if have_b else None, s if have_s else None, bw)
    return {"bytes": b if have_b else None, "seconds": s if have_s else None, "tokens": tok if have_t else None,
            "pinned_h2d_gbs": bw, "fraction": frac, "source": source,
            "gbs": (b / s / 1e9) if have_b and have_s and s > 0 else None}


def hicache_table(view: RunView) -> tuple[list[Row], str | None]:
    """Seed 000's HiCache table: the rows each workload's kind declares (workloads in scenario
    order), then quality parity and load-back; ON-vs-OFF deltas against the baseline."""
    base = baseline_variant(view)
    rows: list[Row] = []
    for wl in view.workload_names():
        kind = view.kind(wl)
        if kind is not None:
            rows += workload_rows(view, wl, kind.report_rows, base)
    rows.append(_row(view, "quality parity", "",
                     lambda n: ((view.summary(n).get("quality") or {}).get("parity") or {}).get("verdict"),
                     None, base, note="vs the OFF arm"))
    rows.append(_row(view, "load-back, fraction of pinned H2D", "",
                     lambda n: load_back(view, n)["fraction"], True, None,
                     note="needs probe results and load-back counters"))
    # drop rows where no variant has a number (e.g. a phase the workload's config left out)
    rows = [r for r in rows if any(c.value is not None for c in r.cells) or r.label == "quality parity"]
    return rows, base


def _phases(view: RunView, name: str) -> dict[str, dict]:
    return ((view.summary(name).get("sampling") or {}).get("phases")) or {}


def _agg(phases: dict[str, dict], key: str, how, which=None) -> float | None:
    vals = [d.get(key) for ph, d in phases.items() if (which is None or which(ph)) and d.get(key) is not None]
    return how(vals) if vals else None


def _gpu_peak(phases: dict[str, dict]) -> dict[str, float]:
    out: dict[str, float] = {}
    for d in phases.values():
        for idx, v in (d.get("peak_gpu_mem_used_mib") or {}).items():
            out[idx] = max(out.get(idx, -1.0), v)
    return out


def memory_table(view: RunView) -> list[Row]:
    """Seed 000's ratio table: pools, MemAvailable, page cache, pinned, swap-in, GPU memory,
    preflight prediction vs outcome."""
    rows: list[Row] = []
    pools = lambda n, k: (view.status(n).get("pools") or {}).get(k)
    gib = lambda v: None if v is None else v / KIB_PER_GIB
    load = lambda ph: ph not in NON_LOAD_PHASES and not ph.startswith("quality")

    def plain(label, unit, get, digits=3, note=""):
        cells = []
        for n in view.names:
            v = get(n)
            if isinstance(v, Cell):
                cells.append(v)
            elif v is None:
                cells.append(Cell("n/a", None, css="na"))
            elif isinstance(v, str):
                cells.append(Cell(v, v))
            else:
                cells.append(Cell(fmt_num(v, digits), v))
        rows.append(Row(label, unit, cells, note))

    plain("device pool", "tokens", lambda n: pools(n, "max_total_num_tokens"))
    plain("host pool", "tokens", lambda n: pools(n, "host_pool_tokens") if view.hicache(n) else "off")
    plain("host pool (pinned)", "GB", lambda n: pools(n, "host_pool_gb") if view.hicache(n) else "off",
          note="per rank, from the server log")
    plain("MemAvailable min", "GiB", lambda n: gib(_agg(_phases(view, n), "min_mem_available_kib", min)))
    plain("MemAvailable min while idle", "GiB",
          lambda n: gib(_agg(_phases(view, n), "min_mem_available_kib", min, lambda p: p == "idle")))
    plain("page cache (Cached) min", "GiB", lambda n: gib(_agg(_phases(view, n), "min_cached_kib", min)))
    plain("Mlocked max", "GiB", lambda n: gib(_agg(_phases(view, n), "max_mlocked_kib", max)))
    for label, which in (("idle", lambda p: p == "idle"), ("under load", load)):
        def swap(n, which=which):
            ph = _phases(view, n)
            mean = _agg(ph, "mean_pswpin_kib_s", max, which)
            mx = _agg(ph, "max_pswpin_kib_s", max, which)
            if mean is None and mx is None:
                return None
            css = "bad" if (mx or 0) > 0 else ""
            return Cell(f"{fmt_num(mean)} / {fmt_num(mx)}", mx, css=css)
        plain(f"swap-in (si) {label}, mean / max", "KB/s", swap, note="pswpin, per phase")
    plain("server RSS max", "GiB", lambda n: gib(_agg(_phases(view, n), "max_server_rss_kib", max)))

    def gpu(n):
        peak = _gpu_peak(_phases(view, n))
        if not peak:
            return None
        return Cell(", ".join(f"GPU{i}: {v / 1024:.1f}" for i, v in sorted(peak.items())), max(peak.values()))
    plain("GPU memory peak", "GiB", gpu)

    def predicted(n):
        pf = view.status(n).get("preflight") or {}
        if not pf:
            return None
        fits = pf.get("fits")
        req = pf.get("requested_gb")
        budget = pf.get("budget_gb")
        if fits is None:
            return Cell("not predicted", None, css="na", title=str(pf.get("reason") or ""))
        text = f"{fmt_num(req)} of {fmt_num(budget)} GB: {'fits' if fits else 'does not fit'}"
        return Cell(text, req, title=str(pf.get("reason") or ""))
    plain("preflight prediction", "", predicted, note="host pool per rank vs (MemAvailable − reserve) / ranks")

    def outcome(n):
        st = view.status(n)
        pf = st.get("preflight") or {}
        fits = pf.get("fits")
        state, cause = st.get("state"), st.get("cause")
        if fits is None:
            return Cell(failure_text(st), state)
        host_refused = state == "startup_failed" and cause in ("host_memory", "preflight")
        if fits and state == "ok" or (not fits and host_refused):
            return Cell(f"{failure_text(st)} — as predicted", state, css="good")
        if fits and host_refused:
            return Cell(f"{failure_text(st)} — predicted to fit", state, css="bad")
        if not fits and state == "ok":
            return Cell("started — predicted not to fit", state, css="bad")
        return Cell(f"{failure_text(st)} (not a host-memory cause)", state)
    plain("outcome", "", outcome)
    return rows

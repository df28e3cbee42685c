"""A run folder → the tables and series the HTML report shows (plain dicts and lists).

One job: selecting and shaping numbers; no HTML and no drawing. Everything comes from the run
folder: manifest.json, status.json, summary.json (with its sampling and parity summaries),
parity.json, quality.jsonl, the request/sample frames of `harness.load`, optional
``probe.json`` and ``comparison.json``. A variant that failed shows its state (e.g.
``startup_failed: host_memory``) in every cell, never a number (P10).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from harness import results
from harness.bandwidth import load_back_fraction

KIB_PER_GIB = 1024 * 1024
TIMESERIES_MAX_POINTS = 1500
NON_LOAD_PHASES = {"startup", "idle", "cooldown", "final_check"}


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


@dataclass
class RunView:
    """What the report needs of one run, loaded once."""

    root: Path
    manifest: dict
    variants: list[results.LoadedVariant]
    complete: bool
    interrupted: bool
    workload_kinds: dict[str, str]  # workload name -> kind
    description: str
    probe: dict | None
    comparison: dict | None
    requests: dict[str, pd.DataFrame] = field(default_factory=dict)
    samples: dict[str, pd.DataFrame] = field(default_factory=dict)

    @property
    def names(self) -> list[str]:
        return [v.name for v in self.variants]

    def status(self, name: str) -> dict:
        return next(v.status for v in self.variants if v.name == name)

    def summary(self, name: str) -> dict:
        return next(v.summary for v in self.variants if v.name == name) or {}

    def ok(self, name: str) -> bool:
        return self.status(name).get("state") == "ok"

    def hicache(self, name: str) -> Any:
        for e in self.manifest.get("variants", []):
            if e["name"] == name:
                return e.get("hicache")
        return None


def _scenario_yaml(manifest: dict) -> dict:
    text = (manifest.get("scenario") or {}).get("text")
    if not text:
        return {}
    from harness.yaml_lines import load_yaml_text

    try:
        return load_yaml_text(text, "scenario").data
    except Exception:  # noqa: BLE001 - report what we can without it
        return {}


def load_view(run_dir: Path) -> RunView:
    from harness.load import requests_frame, samples_frame

    run = results.load_run(Path(run_dir))
    y = _scenario_yaml(run.manifest)
    kinds = {}
    for w in y.get("workloads") or []:
        if isinstance(w, dict) and "kind" in w:
            kinds[str(w.get("name") or w["kind"])] = str(w["kind"])
    probe = run.manifest.get("probe")
    probe_file = run.paths.root / "probe.json"
    if not probe and probe_file.exists():
        try:
            probe = results.read_json(probe_file)
        except results.ResultsError:
            probe = None
    comp_file = run.paths.root / "comparison.json"
    comparison = results.read_json(comp_file) if comp_file.exists() else None
    view = RunView(run.paths.root, run.manifest, run.variants, run.complete, run.paths.interrupted.exists(),
                   kinds, str(y.get("description") or ""), probe, comparison)
    for v in run.variants:
        view.requests[v.name] = requests_frame(v.paths.requests, v.name)
        view.samples[v.name] = samples_frame(v.paths.samples, v.name)
    return view


# ------------------------------------------------------------------------------ formatting


def fmt_num(v: float | None, digits: int = 3) -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "—"
    a = abs(v)
    if a >= 10000:
        return f"{v:,.0f}"
    if a >= 100:
        return f"{v:.0f}"
    if a >= 10:
        return f"{v:.1f}"
    return f"{v:.{digits}g}"


def failure_text(status: dict) -> str:
    state = status.get("state") or "missing"
    cause = status.get("cause")
    return f"{state}: {cause}" if cause else state


def baseline_variant(view: RunView) -> str | None:
    """The HiCache-off arm deltas are computed against: the quality baseline when it ran ok,
    else the first ok variant without HiCache."""
    y = _scenario_yaml(view.manifest)
    q = (y.get("quality") or {}).get("baseline_variant")
    if q in view.names and view.ok(q) and not view.hicache(q):
        return q
    for n in view.names:
        if not view.hicache(n) and view.ok(n):
            return n
    return None


def _delta(value: float | None, base: float | None, higher_is_better: bool | None) -> tuple[str, str]:
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


def _wl_of_kind(view: RunView, kind: str) -> list[str]:
    named = [n for n, k in view.workload_kinds.items() if k == kind]
    if named:
        return named
    return [kind]  # an unparseable scenario: the default name is the kind


def _phase_stat(summary: dict, wl: str, phase: str, metric: str, stat: str = "p50") -> float | None:
    w = (summary.get("workloads") or {}).get(wl) or {}
    p = (w.get("phases") or {}).get(phase) or {}
    s = (p.get("metrics") or {}).get(metric)
    return s.get(stat) if s else None


def _derived(summary: dict, wl: str, key: str) -> float | None:
    w = (summary.get("workloads") or {}).get(wl) or {}
    return (w.get("derived") or {}).get(key)


def _row(view: RunView, label: str, unit: str, get, higher_is_better: bool | None, base: str | None,
         digits: int = 3, note: str = "") -> Row:
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
        d, css = ("", "") if n == base else _delta(v, base_val, higher_is_better)
        cells.append(Cell(fmt_num(v, digits), v, d, css))
    return Row(label, unit, cells, note)


def load_back(view: RunView, name: str) -> dict[str, Any]:
    """Load-back bytes and seconds over the workload phases (sampling counter deltas) and the
    fraction of the probed pinned H2D bandwidth. Bytes come from ``load_back_bytes_total``,
    else ``load_back_tokens_total`` × the preflight's KV bytes per token."""
    phases = ((view.summary(name).get("sampling") or {}).get("phases")) or {}
    b = s = tok = 0.0
    have_b = have_s = have_t = False
    for ph, d in phases.items():
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
    """Seed 000's HiCache table: one column per variant, ON-vs-OFF deltas against the baseline."""
    base = baseline_variant(view)
    rows: list[Row] = []
    S = view.summary
    for wl in _wl_of_kind(view, "cold_prefill"):
        rows.append(_row(view, f"cold prefill ({wl})", "tok/s",
                         lambda n, wl=wl: _derived(S(n), wl, "prefill_total_tok_s"), True, base,
                         note="prompt tokens / TTFT, median"))
    for wl in _wl_of_kind(view, "decode"):
        rows.append(_row(view, f"decode ({wl})", "tok/s", lambda n, wl=wl: _derived(S(n), wl, "decode_tok_s"),
                         True, base))
    for wl in _wl_of_kind(view, "short_ttft"):
        rows.append(_row(view, "short TTFT alone", "ms", lambda n, wl=wl: _phase_stat(S(n), wl, "alone", "ttft_ms"),
                         False, base, note=f"{wl}, p50"))
        rows.append(_row(view, "short TTFT during a long prefill", "ms",
                         lambda n, wl=wl: _phase_stat(S(n), wl, "during_long", "ttft_ms"), False, base,
                         note=f"{wl}, p50"))
    for wl in _wl_of_kind(view, "parallel_prefixes"):
        rows.append(_row(view, "parallel prefixes pass 1 wall", "s",
                         lambda n, wl=wl: _phase_stat(S(n), wl, "pass1", "pass_wall_s"), False, base))
        rows.append(_row(view, "parallel prefixes pass 2 wall", "s",
                         lambda n, wl=wl: _phase_stat(S(n), wl, "pass2", "pass_wall_s"), False, base))
        rows.append(_row(view, "second-pass speedup", "×", lambda n, wl=wl: _derived(S(n), wl, "second_pass_speedup"),
                         True, base, note="pass 1 wall / pass 2 wall"))
    for wl in _wl_of_kind(view, "repeat_prefill"):
        rows.append(_row(view, "repeat speedup, device hit", "×", lambda n, wl=wl: _derived(S(n), wl, "device_speedup"),
                         True, base, note="cold TTFT / repeat TTFT"))
        rows.append(_row(view, "repeat speedup, host hit", "×", lambda n, wl=wl: _derived(S(n), wl, "host_speedup"),
                         True, base, note="cold TTFT / TTFT after eviction"))
    rows.append(_row(view, "quality parity", "", lambda n: ((S(n).get("quality") or {}).get("parity") or {}).get("verdict"),
                     None, base, note="vs the OFF arm"))
    rows.append(_row(view, "load-back, fraction of pinned H2D", "",
                     lambda n: load_back(view, n)["fraction"], True, None,
                     note="needs probe results and load-back counters"))
    # drop rows where no variant has a number (a workload the scenario does not run)
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
    pools = lambda n, k: (view.status(n).get("pools") or {}).get(k)  # noqa: E731
    gib = lambda v: None if v is None else v / KIB_PER_GIB  # noqa: E731
    load = lambda ph: ph not in NON_LOAD_PHASES and not ph.startswith("quality")  # noqa: E731

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


def _segments(phase: pd.Series, t: np.ndarray) -> list[tuple[float, float, str]]:
    """Consecutive runs of one phase label → (t0, t1, label); each ends where the next starts."""
    if len(phase) == 0:
        return []
    p = phase.fillna("").to_numpy()
    starts = np.flatnonzero(np.r_[True, p[1:] != p[:-1]])
    out = []
    for i, s in enumerate(starts):
        e = starts[i + 1] if i + 1 < len(starts) else len(p) - 1
        out.append((float(t[s]), float(t[e]), str(p[s])))
    return out


def downsample(df: pd.DataFrame, max_points: int = TIMESERIES_MAX_POINTS) -> pd.DataFrame:
    """At most ``max_points`` rows, evenly spaced (plots need shape, not every tick)."""
    if len(df) <= max_points:
        return df
    idx = np.unique(np.linspace(0, len(df) - 1, max_points).round().astype(int))
    return df.iloc[idx]


def timeseries(view: RunView, name: str) -> dict[str, Any] | None:
    """Downsampled series of one variant: t (s), memory (GiB), swap (KB/s), GPU (GiB), phases."""
    df = view.samples.get(name)
    if df is None or df.empty:
        return None
    t_full = df["t_s"].to_numpy(dtype=float)
    phases = _segments(df["phase"], t_full)
    d = downsample(df)
    col = lambda c, scale=1.0: (d[c].to_numpy(dtype=float) / scale)  # noqa: E731
    return {
        "t": d["t_s"].to_numpy(dtype=float), "phases": phases,
        "memory": {"MemAvailable": col("mem_available_kib", KIB_PER_GIB), "Cached": col("cached_kib", KIB_PER_GIB),
                   "Mlocked": col("mlocked_kib", KIB_PER_GIB), "server RSS": col("server_rss_kib", KIB_PER_GIB)},
        "swap": {"swap-in (pswpin)": col("pswpin_kib_s"), "swap-out (pswpout)": col("pswpout_kib_s")},
        "gpu": {"GPU memory used (all GPUs)": col("gpu_mem_used_mib", 1024.0)},
        "has_gpu": bool(np.isfinite(d["gpu_mem_used_mib"].to_numpy(dtype=float)).any()),
        "n_samples": len(df),
    }


def ttft_groups(view: RunView) -> dict[str, list[tuple[str, dict[str, np.ndarray]]]]:
    """{workload: [(phase, {variant: TTFT ms values})]} of measured, error-free requests."""
    out: dict[str, dict[str, dict[str, np.ndarray]]] = {}
    for n, df in view.requests.items():
        if df.empty:
            continue
        ok = df[(df["warmup"] != True) & df["error"].isna()]  # noqa: E712
        for (wl, ph), g in ok.groupby(["workload", "phase"], sort=False):
            out.setdefault(wl, {}).setdefault(ph, {})[n] = g["ttft_ms"].to_numpy(dtype=float)
    return {wl: list(phs.items()) for wl, phs in out.items()}


def pass_walls(view: RunView) -> tuple[list[str], dict[str, list[float | None]]]:
    """parallel_prefixes (and other grouped) phases × variant: median pass wall seconds."""
    labels: list[str] = []
    for n in view.names:
        for wl, w in (view.summary(n).get("workloads") or {}).items():
            if view.workload_kinds.get(wl, wl) != "parallel_prefixes":
                continue
            for ph in w.get("phases") or {}:
                if f"{wl}/{ph}" not in labels:
                    labels.append(f"{wl}/{ph}")
    vals: dict[str, list[float | None]] = {}
    for n in view.names:
        if not view.ok(n):
            continue
        vals[n] = [_phase_stat(view.summary(n), *lab.split("/", 1), "pass_wall_s") for lab in labels]
    return labels, vals


def tier_hits(view: RunView, name: str) -> dict[str, list]:
    """Per workload phase with cache reuse: device / host / computed prompt tokens."""
    labels, dev, host, miss = [], [], [], []
    for wl, w in (view.summary(name).get("workloads") or {}).items():
        for ph, p in (w.get("phases") or {}).items():
            h = p.get("hits") or {}
            if not h.get("prompt_tokens"):
                continue
            if view.workload_kinds.get(wl, wl) not in ("parallel_prefixes", "repeat_prefill", "multi_turn"):
                continue
            labels.append(f"{wl}/{ph}")
            dev.append(h.get("device_tokens") or 0)
            host.append(h.get("host_tokens") or 0)
            miss.append(max(0, (h.get("prompt_tokens") or 0) - (h.get("cached_tokens") or 0)))
    return {"labels": labels, "device": dev, "host": host, "miss": miss}


# ------------------------------------------------------------------------------- quality


def parity_groups(view: RunView) -> list[dict]:
    out = []
    for n in view.names:
        p = (view.summary(n).get("quality") or {}).get("parity")
        if not p:
            continue
        out.append({"variant": n, "verdict": p.get("verdict"), "reason": p.get("reason"),
                    "baseline_noise": p.get("baseline_noise"), "host_hit_requests": p.get("host_hit_requests"),
                    "on_requests": p.get("on_requests"), "groups": p.get("groups") or []})
    return out


_SEVERITY = {"divergence": 0, "tie_flip": 1, "equal": 2}


def _quality_rows(path: Path) -> list[dict]:
    return list(results.read_jsonl(path))


def _window(ids: list | None, d: int, k: int = 20) -> dict[str, Any]:
    ids = list(ids or [])
    lo = max(0, d - k)
    return {"before": ids[lo:d], "at": ids[d] if d < len(ids) else None, "after": ids[d + 1:d + 1 + k], "start": lo}


def _top(rec: dict | None, d: int) -> list[tuple[Any, str]]:
    top = (rec or {}).get("top_logprobs") or []
    if d >= len(top) or not top[d]:
        return []
    pairs = sorted(((p[0], float(p[1])) for p in top[d]), key=lambda x: -x[1])[:5]
    return [(tok, f"{lp:.3f}") for tok, lp in pairs]


def worst_samples(view: RunView, limit: int = 4) -> list[dict]:
    """Per HiCache variant, the worst ON-vs-OFF pairs (real divergences first, earliest first):
    ±20 tokens of both outputs around the first divergence and the top-5 at it."""
    base = baseline_variant(view)
    out: list[dict] = []
    for n in view.names:
        pfile = view.root / results.safe_name(n) / "parity.json"
        if n == base or not pfile.exists():
            continue
        try:
            parity = results.read_json(pfile)
        except results.ResultsError:
            continue
        diffs = [c for c in parity.get("comparisons") or [] if c.get("kind") != "equal"]
        if not diffs:
            continue
        diffs.sort(key=lambda c: (_SEVERITY.get(c.get("kind"), 3), bool(c.get("noise")), c.get("first_divergence") or 0))
        on_rows = _quality_rows(view.root / results.safe_name(n) / results.QUALITY)
        ref_name = base or ""
        off_rows = _quality_rows(view.root / results.safe_name(ref_name) / results.QUALITY) if base else []
        key = lambda r: (r.get("task"), r.get("length_target"), r.get("index"), r.get("seed"), r.get("ask"))  # noqa: E731
        on_by = {key(r): r for r in on_rows if r.get("arm_role", "on") == "on"}
        off_by = {key(r): r for r in off_rows if r.get("arm_role") == "off"}
        for c in diffs[:limit]:
            k = (c.get("task"), c.get("length_target"), c.get("index"), c.get("seed"), c.get("ask"))
            on, off = on_by.get(k), off_by.get(k)
            d = int(c.get("first_divergence") or 0)
            out.append({
                "variant": n, "task": c.get("task"), "length": c.get("length_target"), "index": c.get("index"),
                "ask": c.get("ask"), "kind": c.get("kind"), "noise": c.get("noise"), "divergence": d,
                "ref_token": c.get("ref_token"), "cand_token": c.get("cand_token"),
                "max_abs_dlogprob": c.get("max_abs_dlogprob"), "cached_host": c.get("cand_cached_host"),
                "off_ids": _window((off or {}).get("output_ids"), d), "on_ids": _window((on or {}).get("output_ids"), d),
                "off_text": (off or {}).get("text"), "on_text": (on or {}).get("text"),
                "off_top": _top(off, d), "on_top": _top(on, d),
            })
    return out


# ------------------------------------------------------------------------------- failures


def failures(view: RunView) -> list[dict]:
    out = []
    for v in view.variants:
        st = v.status
        if st.get("state") == "ok":
            continue
        ex = st.get("log_excerpt") or {}
        lines = []
        first = ex.get("first_line") or 1
        for i, text in enumerate(ex.get("lines") or []):
            lines.append({"no": first + i, "text": text, "match": first + i == ex.get("match_line")})
        out.append({"variant": v.name, "state": st.get("state"), "cause": st.get("cause"),
                    "cause_detail": st.get("cause_detail") or {}, "expect": st.get("expect"),
                    "expected": bool(st.get("expect_met")), "expect_cause": st.get("expect_cause"),
                    "log_file": ex.get("file"), "lines": lines, "attempts": st.get("attempts"),
                    "exit_code": st.get("exit_code")})
    return out


# ------------------------------------------------------------------------------- header


def verdict(view: RunView, expectations: list[dict]) -> tuple[str, list[str]]:
    """(PASS | FAIL | INCOMPLETE, reasons) of the run as a whole."""
    reasons = []
    if not view.complete:
        return ("INTERRUPTED" if view.interrupted else "INCOMPLETE"), ["the run did not finish"]
    for v in view.variants:
        if v.status.get("expect_met") is False:
            exp = v.status.get("expect")
            cause = v.status.get("expect_cause")
            reasons.append(f"{v.name}: {failure_text(v.status)} (expected {exp}{': ' + cause if cause else ''})")
    for e in expectations:
        if e.get("failed"):
            reasons.append(f"expectation {e['check']} on {e['variant']}: {e['outcome']}")
    if view.comparison and view.comparison.get("verdict") == "regression":
        reasons.append("regression against the baseline run (see Comparison)")
    return ("FAIL" if reasons else "PASS"), reasons


def probe_rows(probe: dict | None) -> list[tuple[str, str]]:
    if not probe:
        return []
    rows = [("WSL", str(probe.get("wsl"))), ("torch / CUDA", f"{probe.get('torch_version')} / {probe.get('cuda_runtime')}"),
            ("driver", str(probe.get("nvidia_driver") or probe.get("driver_version")))]
    for d in probe.get("devices") or []:
        rows.append((f"GPU{d.get('index')} {d.get('name')}",
                     f"pageableMemoryAccess={d.get('pageable_memory_access')}, "
                     f"usesHostPageTables={d.get('pageable_memory_access_uses_host_page_tables')}, "
                     f"HMM/ATS: {d.get('hmm_or_ats')}"))
    reg = probe.get("host_register_kernel_write") or {}
    if reg:
        rows.append(("kernel write to cudaHostRegister memory",
                     ", ".join(f"flags {k}: {'ok' if (v or {}).get('ok') else 'FAIL'}" for k, v in reg.items())))
    ha = probe.get("host_alloc_kernel_write")
    if ha:
        rows.append(("kernel write to cudaHostAlloc memory", "ok" if ha.get("ok") else "FAIL"))
    bw = probe.get("bandwidth_gbs") or {}
    if bw:
        rows.append(("bandwidth GB/s", ", ".join(f"{k} {v:.1f}" for k, v in bw.items() if v is not None)))
    if probe.get("reason"):
        rows.append(("note", str(probe.get("reason"))))
    return rows


def header(view: RunView) -> dict[str, Any]:
    m = view.manifest
    sg = m.get("sglang") or {}
    src = m.get("sglang_source") or {}
    host = m.get("host") or {}
    mem_total = host.get("mem_total_kib")
    gpus = ", ".join(f"{g.get('name')} ({g.get('memory_total_mib')} MiB, driver {g.get('driver')})"
                     for g in host.get("gpus") or []) or "none recorded"
    return {
        "scenario": (m.get("scenario") or {}).get("name"), "scenario_path": (m.get("scenario") or {}).get("path"),
        "scenario_hash": (m.get("scenario") or {}).get("hash"), "description": view.description,
        "run_id": view.root.name, "created_at": m.get("created_at"), "backend": m.get("backend"),
        "simulated": bool(m.get("simulated")), "harness_version": m.get("harness_version"),
        "harness_argv": " ".join(m.get("harness_argv") or []), "seed": m.get("seed"), "repeats": m.get("repeats"),
        "sglang_version": sg.get("version"), "sglang_location": sg.get("location"),
        "sglang_git": sg.get("git") or src or None,
        "host": [("host", host.get("hostname")), ("kernel", host.get("kernel")), ("WSL", host.get("wsl")),
                 ("CPU", f"{host.get('cpu')} × {host.get('cpu_count')}"),
                 ("MemTotal", f"{mem_total / KIB_PER_GIB:.1f} GiB" if mem_total else "not recorded"), ("GPUs", gpus),
                 ("python", host.get("python"))],
        "env": m.get("env") or {},
    }


def variant_rows(view: RunView) -> list[dict]:
    out = []
    for e in view.manifest.get("variants", []):
        st = view.status(e["name"]) if e["name"] in view.names else {}
        out.append({"name": e["name"], "state": st.get("state"), "cause": st.get("cause"),
                    "expect": e.get("expect"), "expect_met": st.get("expect_met"),
                    "hicache": e.get("hicache"), "argv": " ".join(e.get("argv") or []),
                    "env": e.get("env") or {}, "config_hash": (e.get("config_hash") or "")[:12],
                    "ready_s": st.get("ready_s"), "env_not_clean": st.get("env_not_clean")})
    return out


def relpath(target: Path, start: Path) -> str:
    try:
        return os.path.relpath(target, start)
    except ValueError:  # other drive (Windows)
        return str(target)

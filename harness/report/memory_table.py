"""The report's host-memory table, one column per variant: pools, MemAvailable, page cache, pinned,
swap-in, GPU memory, the preflight's prediction against the outcome; and which GPUs were sampled.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from harness.report.formatting import KIB_PER_GIB, failure_text, fmt_num
from harness.report.tables import Cell, Row, sampling_phases
from harness.report.view import RunView
from harness.store.phase_samples import PhaseSamples
from harness.store.variant_status import ATTACHED, LAUNCHED

# Sampler phases the runner sets around the workloads (not load); the quality arm's phases
# start with "quality".
NON_LOAD_PHASES = frozenset(
    {LAUNCHED.first_sample_phase, ATTACHED.first_sample_phase, "idle", "cooldown", "final_check"}
)


def _agg(
    phases: Mapping[str, PhaseSamples], figure: Callable[[PhaseSamples], float | None], how, which=None
) -> float | None:
    vals = [v for ph, d in phases.items() if (which is None or which(ph)) and (v := figure(d)) is not None]
    return how(vals) if vals else None


def _gpu_peak(phases: Mapping[str, PhaseSamples]) -> dict[str, float]:
    out: dict[str, float] = {}
    for d in phases.values():
        for idx, v in d.peak_gpu_mem_used_mib.items():
            out[idx] = max(out.get(idx, -1.0), v)
    return out


def _idx(i: str) -> tuple[int, str]:
    return (int(i), "") if str(i).isdigit() else (1 << 30, str(i))


def gpus_sampled(phases: Mapping[str, PhaseSamples]) -> list[str]:
    """The GPU indices a variant's samples read (phase summaries' ``gpus_sampled``; for a run
    recorded before that field, the GPUs its peaks name)."""
    seen: set[str] = set()
    for d in phases.values():
        seen.update(str(i) for i in (d.gpus_sampled or d.peak_gpu_mem_used_mib))
    return sorted(seen, key=_idx)


def gpu_selection_words(phases: Mapping[str, PhaseSamples]) -> str:
    """How the sampled GPUs were chosen (the last ``gpu_selection`` recorded), or why unknown."""
    sel = next((d.gpu_selection for d in reversed(list(phases.values())) if d.gpu_selection is not None), None)
    if sel is not None and sel.how:
        return sel.how
    return "how the GPUs were chosen is not recorded (a run from before per-variant GPU selection read every GPU)"


def memory_table(view: RunView) -> list[Row]:
    """Seed 000's ratio table: pools, MemAvailable, page cache, pinned, swap-in, GPU memory,
    preflight prediction vs outcome."""
    rows: list[Row] = []
    pools = lambda n, figure: figure(p) if (p := view.status(n).pools) is not None else None
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

    plain("device pool", "tokens", lambda n: pools(n, lambda p: p.max_total_num_tokens))
    plain("host pool", "tokens", lambda n: pools(n, lambda p: p.host_pool_tokens) if view.hicache(n) else "off")
    plain(
        "host pool (pinned)",
        "GB",
        lambda n: pools(n, lambda p: p.host_pool_gb) if view.hicache(n) else "off",
        note="per rank, from the server log",
    )

    def mamba(n):
        st = view.status(n)
        p = st.pools
        if p is None:
            return None
        dev, host = p.mamba_device_slots, p.mamba_host_slots
        if dev is None and host is None:
            return None
        if host is None and p.refused_kind == "mamba":
            host = p.refused_tokens
        refused = host is not None and p.mamba_host_slots is None
        text = f"{'?' if dev is None else dev} / {'?' if host is None else host}" + (" refused" if refused else "")
        pred = st.preflight.mamba_host_slots if st.preflight is not None else None
        off = pred is not None and host is not None and pred != host
        text += f" (preflight: {pred})" if off else ""
        return Cell(text, host, css="bad" if off or refused else "")

    plain(
        "mamba slots (device / host)",
        "slots",
        mamba,
        note="hybrid models, from the server log; host slots from its GB and the model's bytes per slot",
    )
    sampling = {n: f.samples if (f := view.summary(n)) is not None else None for n in view.names}
    if any(s is not None and s.host for s in sampling.values()):  # external servers: whose host the rows below show
        plain(
            "host memory sampled on",
            "",
            lambda n: (
                None
                if (s := sampling[n]) is None
                else Cell(s.host, None, css="bad")
                if s.server_host_sampled is False
                else s.host
            ),
            note="a remote server: MemAvailable, swap and page cache are this machine's, not the server's host",
        )
    plain(
        "MemAvailable min", "GiB", lambda n: gib(_agg(sampling_phases(view, n), lambda p: p.min_mem_available_kib, min))
    )
    plain(
        "MemAvailable min while idle",
        "GiB",
        lambda n: gib(_agg(sampling_phases(view, n), lambda p: p.min_mem_available_kib, min, lambda p: p == "idle")),
    )
    plain(
        "page cache (Cached) min", "GiB", lambda n: gib(_agg(sampling_phases(view, n), lambda p: p.min_cached_kib, min))
    )
    plain("Mlocked max", "GiB", lambda n: gib(_agg(sampling_phases(view, n), lambda p: p.max_mlocked_kib, max)))
    for label, which in (("idle", lambda p: p == "idle"), ("under load", load)):

        def swap(n, which=which):
            ph = sampling_phases(view, n)
            mean = _agg(ph, lambda p: p.mean_pswpin_kib_s, max, which)
            mx = _agg(ph, lambda p: p.max_pswpin_kib_s, max, which)
            if mean is None and mx is None:
                return None
            css = "bad" if (mx or 0) > 0 else ""
            return Cell(f"{fmt_num(mean)} / {fmt_num(mx)}", mx, css=css)

        plain(f"swap-in (si) {label}, mean / max", "KB/s", swap, note="pswpin, per phase")
    plain("server RSS max", "GiB", lambda n: gib(_agg(sampling_phases(view, n), lambda p: p.max_server_rss_kib, max)))

    def gpu(n):
        peak = _gpu_peak(sampling_phases(view, n))
        if not peak:
            return None
        return Cell(
            ", ".join(f"GPU{i}: {v / 1024:.1f}" for i, v in sorted(peak.items(), key=lambda kv: _idx(kv[0]))),
            max(peak.values()),
            title=gpu_selection_words(sampling_phases(view, n)),
        )

    plain("GPU memory peak", "GiB", gpu, note="the GPUs the variant's server uses (hover: how they were chosen)")

    def predicted(n):
        pf = view.status(n).preflight
        if pf is None:
            return None
        fits, req, budget = pf.fits, pf.requested_gb, pf.budget_gb
        if fits is None:
            return Cell("not predicted", None, css="na", title=str(pf.reason or ""))
        text = f"{fmt_num(req)} of {fmt_num(budget)} GB: {'fits' if fits else 'does not fit'}"
        return Cell(text, req, title=str(pf.reason or ""))

    plain("preflight prediction", "", predicted, note="host pool per rank vs (MemAvailable − reserve) / ranks")

    def safe_limit(n):
        pf = view.status(n).preflight
        b = pf.boundary if pf is not None else None
        if b is None:
            return None
        unit = "ratio" if b.knob == "ratio" else "GB"
        starts, keeps = b.starts, b.keeps_page_cache
        text = f"starts ≤ {fmt_num(starts.value)}, keeps page cache ≤ {fmt_num(keeps.value)} ({unit})"
        why = f"above {starts.next_value}: {starts.reason}; above {keeps.next_value}: {keeps.reason}"
        return Cell(text, b.safe, title=why)

    plain(
        "safe-ratio boundary",
        "",
        safe_limit,
        note="highest value that starts / that keeps the page cache (harness/run/ratio_boundary.py)",
    )

    def outcome(n):
        st = view.status(n)
        fits = st.preflight.fits if st.preflight is not None else None
        state, cause = st.state, st.cause
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

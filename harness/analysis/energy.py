"""Pure: a variant's energy per token, from its samples' per-phase joules and its records.

Each sampler phase has ``energy_j`` and ``energy_source`` (`harness.analysis.samples.phase_energy`:
NVML's total energy counter summed over the variant's GPUs, ``"nvml"``; on the simulator its
pretend GPU's counter, ``"simulated"``). Per workload phase (its sampler label ``<workload>/<phase>``)
and per workload (every sampler phase under ``<workload>/``, a soak's slices included), declared
as follows:

* ``tokens``: prompt tokens computed (sent less cached) plus generated tokens, warm-ups included
  (they drew the energy too);
* ``j_per_token``: the phase's joules over those tokens (prompt and generated counted alike);
* ``j_per_prompt_token``: only for a phase whose requests generate at most one token each (a
  prefill phase): its joules over its computed prompt tokens;
* ``j_per_generated_token``: only for a phase whose generated tokens outnumber its computed prompt
  tokens (a decode phase): its joules over its generated tokens.

The idle draw while a phase waits counts in its joules: J/token is what the run paid, not a
kernel's efficiency. ``total`` is over every workload's phases.

A phase over which the counter did not advance (0 J: its readings fell inside one update of
NVML's counter, e.g. a few ms of device hits read at the phase's edges) is **too short to
measure**: ``joules`` and every J/token are null and ``too_short`` is true, not a figure of 0 J
(a powered GPU draws tens of watts); the joules it used fall in the next phase's reading.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from harness.store.phase_samples import PhaseSamples
from harness.store.records import RequestRecord


def _tokens(records: list[RequestRecord]) -> tuple[int, int, int]:
    """(computed prompt tokens, generated tokens, requests) of the records that got an answer."""
    prompt = gen = n = 0
    for r in records:
        if r.error is not None:
            continue
        n += 1
        sent = r.prompt_tokens if r.prompt_tokens is not None else r.prompt_len
        prompt += max(0, int(sent or 0) - int(r.cached_tokens or 0))
        gen += int(r.completion_tokens or 0)
    return prompt, gen, n


def _figures(joules: float | None, prompt: int, gen: int, n: int) -> dict[str, Any]:
    too_short = joules is not None and joules <= 0.0
    out: dict[str, Any] = {
        "joules": None if joules is None or too_short else round(joules, 3),
        "computed_prompt_tokens": prompt,
        "generated_tokens": gen,
        "j_per_token": None,
        "j_per_prompt_token": None,
        "j_per_generated_token": None,
    }
    if too_short:
        out["too_short"] = True
    if joules is None or too_short:
        return out
    if prompt + gen > 0:
        out["j_per_token"] = joules / (prompt + gen)
    if n and gen <= n and prompt > 0:
        out["j_per_prompt_token"] = joules / prompt
    if gen > prompt:
        out["j_per_generated_token"] = joules / gen
    return out


def energy_summary(records: Iterable[RequestRecord], phases: Mapping[str, PhaseSamples]) -> dict | None:
    """{"source", "phases": {label: figures}, "workloads": {workload: figures}, "total": figures}
    (module docstring) from the sampler's phases; None when no phase has joules (no NVML counter,
    no simulator)."""
    sources = {v.energy_source for v in phases.values() if v.energy_j is not None}
    if not sources:
        return None
    by_phase: dict[tuple[str, str], list[RequestRecord]] = {}
    for r in records:
        by_phase.setdefault((r.workload, r.phase), []).append(r)
    out_phases = {}
    for (wl, ph), recs in by_phase.items():
        e = phases[f"{wl}/{ph}"].energy_j if f"{wl}/{ph}" in phases else None
        if e is not None:
            out_phases[f"{wl}/{ph}"] = _figures(e, *_tokens(recs))
    workloads = {}
    total_j, total = 0.0, [0, 0, 0]
    for wl in dict.fromkeys(r.workload for recs in by_phase.values() for r in recs):
        joules = [v.energy_j for k, v in phases.items() if k.startswith(f"{wl}/") and v.energy_j is not None]
        if not joules:
            continue
        recs = [r for (w, _), rs in by_phase.items() if w == wl for r in rs]
        p, g, n = _tokens(recs)
        workloads[wl] = _figures(sum(joules), p, g, n)
        total_j += sum(joules)
        total = [total[0] + p, total[1] + g, total[2] + n]
    return {
        "source": "simulated" if "simulated" in sources else "nvml",
        "phases": out_phases,
        "workloads": workloads,
        "total": _figures(total_j if workloads else None, *total),
    }

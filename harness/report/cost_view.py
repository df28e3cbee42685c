"""The headline's "is HiCache worth it here": each variant's $ per hour (GPUs, host pool, storage),
its goodput in tokens/s at the SLO, $ per million tokens and its joules per token, with the
cheapest variant that met the SLO (stored ``cost.json``, `harness.analysis.cost`, and each
summary's ``energy``, `harness.analysis.energy`). Without prices: each variant's GPU-seconds of
work (status.json's ``timing``) against the baseline's, GPU-hours per million tokens at the SLO
goodput where a workload has an SLO, J/token, and the one line saying what to add for a price."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from harness.analysis.cost import gpu_hours_per_mtok, slo_goodput, unpriced_text
from harness.report.view import baseline_variant
from harness.store.gpu_time import StoredTiming
from harness.store.products import StoredCost, read_cost


def cost_headline(view: Any) -> dict[str, Any] | None:
    """{text, cheapest, prices, priced, rows: [{variant, usd_per_hour, gpu, host, storage,
    goodput_tok_s, usd_per_mtok, meets_slo, j_per_token, energy_source, gpus, work_gpu_s,
    work_vs_base, gpu_h_per_mtok}], simulated_energy} or None when the run has neither prices nor
    energy. Without prices (no cost.json) the text says what the GPU time alone says and what to add."""
    stored = read_cost(view.root)
    priced = stored is not None and bool(stored.raw)
    cost = stored or StoredCost({}, None, None, None, {})
    base = baseline_variant(view)
    rows, simulated = [], False
    for n in view.names:
        summary = view.summary(n)
        energy = summary.energy if summary is not None else {}
        total = energy.get("total")
        c = cost.variants.get(n)
        if c is None and not energy:
            continue
        simulated |= energy.get("source") == "simulated"
        timing = StoredTiming.from_json(view.status(n).timing)
        gpus = int((timing.gpus if timing is not None else None) or 1)
        work_min = timing.gpu_minutes.get("work") if timing is not None else None
        _, tok_s, met = slo_goodput(summary)
        rows.append(
            {
                "variant": n,
                "gpus": gpus,
                "work_gpu_s": None if work_min is None else float(work_min) * 60.0,
                "gpu_h_per_mtok": gpu_hours_per_mtok(gpus, tok_s),
                "usd_per_hour": c.usd_per_hour if c else None,
                "gpu": c.gpu_usd_per_hour if c else None,
                "host": c.host_usd_per_hour if c else None,
                "storage": c.storage_usd_per_hour if c else None,
                "goodput_tok_s": c.goodput_tok_s if c else tok_s,
                "usd_per_mtok": c.usd_per_mtok if c else None,
                "meets_slo": c.meets_slo if c else (met if tok_s else None),
                "j_per_token": total.get("j_per_token") if isinstance(total, Mapping) else None,
                "energy_source": energy.get("source"),
                "cheapest": n == cost.cheapest,
            }
        )
    if not rows:
        return None
    work = {r["variant"]: r["work_gpu_s"] for r in rows}
    for r in rows:
        b = work.get(base) if base else None
        r["work_vs_base"] = r["work_gpu_s"] / b if b and r["work_gpu_s"] is not None else None
    return {
        "priced": priced,
        "text": cost.text if priced else unpriced_text(base, work),
        "cheapest": cost.cheapest,
        "prices": cost.prices,
        "rows": rows,
        "simulated_energy": simulated,
    }

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
from harness.analysis.run_products import COST_FILE
from harness.report.view import baseline_variant
from harness.store import results


def cost_headline(view: Any) -> dict[str, Any] | None:
    """{text, cheapest, prices, priced, rows: [{variant, usd_per_hour, gpu, host, storage,
    goodput_tok_s, usd_per_mtok, meets_slo, j_per_token, energy_source, gpus, work_gpu_s,
    work_vs_base, gpu_h_per_mtok}], simulated_energy} or None when the run has neither prices nor
    energy. Without prices (no cost.json) the text says what the GPU time alone says and what to add."""
    path = view.root / COST_FILE
    cost = results.read_json_object(path) if path.exists() else {}
    priced = cost.get("variants") or {}
    base = baseline_variant(view)
    rows, simulated = [], False
    for n in view.names:
        summary = view.summary(n)
        energy = summary.energy if summary is not None else {}
        total = energy.get("total")
        c = priced.get(n) or {}
        if not c and not energy:
            continue
        simulated |= energy.get("source") == "simulated"
        timing = view.status(n).get("timing") or {}
        gpus = int(timing.get("gpus") or 1)
        work_min = (timing.get("gpu_minutes") or {}).get("work")
        _, tok_s, met = slo_goodput(summary.raw if summary is not None else None)
        rows.append(
            {
                "variant": n,
                "gpus": gpus,
                "work_gpu_s": None if work_min is None else float(work_min) * 60.0,
                "gpu_h_per_mtok": gpu_hours_per_mtok(gpus, tok_s),
                "usd_per_hour": c.get("usd_per_hour"),
                "gpu": c.get("gpu_usd_per_hour"),
                "host": c.get("host_usd_per_hour"),
                "storage": c.get("storage_usd_per_hour"),
                "goodput_tok_s": c.get("goodput_tok_s", tok_s),
                "usd_per_mtok": c.get("usd_per_mtok"),
                "meets_slo": c.get("meets_slo", met if tok_s else None),
                "j_per_token": total.get("j_per_token") if isinstance(total, Mapping) else None,
                "energy_source": energy.get("source"),
                "cheapest": n == cost.get("cheapest"),
            }
        )
    if not rows:
        return None
    work = {r["variant"]: r["work_gpu_s"] for r in rows}
    for r in rows:
        b = work.get(base) if base else None
        r["work_vs_base"] = r["work_gpu_s"] / b if b and r["work_gpu_s"] is not None else None
    return {
        "priced": bool(cost),
        "text": cost.get("text") if cost else unpriced_text(base, work),
        "cheapest": cost.get("cheapest"),
        "prices": cost.get("prices"),
        "rows": rows,
        "simulated_energy": simulated,
    }

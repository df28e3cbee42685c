"""The headline's "is HiCache worth it here": each variant's $ per hour (GPUs, host pool, storage),
its goodput in tokens/s at the SLO, $ per million tokens and its joules per token, with the
cheapest variant that met the SLO (stored ``cost.json``, `harness.analysis.cost`, and each
summary's ``energy``, `harness.analysis.energy`; nothing recomputed)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from harness.analysis.run_products import COST_FILE
from harness.store import results


def cost_headline(view: Any) -> dict[str, Any] | None:
    """{text, cheapest, prices, rows: [{variant, usd_per_hour, gpu, host, storage, goodput_tok_s,
    usd_per_mtok, meets_slo, j_per_token, energy_source}], simulated_energy} or None when the run
    has neither prices nor energy."""
    path = view.root / COST_FILE
    cost = results.read_json_object(path) if path.exists() else {}
    priced = cost.get("variants") or {}
    rows, simulated = [], False
    for n in view.names:
        summary = view.summary(n)
        energy = summary.energy if summary is not None else {}
        total = energy.get("total")
        c = priced.get(n) or {}
        if not c and not energy:
            continue
        simulated |= energy.get("source") == "simulated"
        rows.append(
            {
                "variant": n,
                "usd_per_hour": c.get("usd_per_hour"),
                "gpu": c.get("gpu_usd_per_hour"),
                "host": c.get("host_usd_per_hour"),
                "storage": c.get("storage_usd_per_hour"),
                "goodput_tok_s": c.get("goodput_tok_s"),
                "usd_per_mtok": c.get("usd_per_mtok"),
                "meets_slo": c.get("meets_slo"),
                "j_per_token": total.get("j_per_token") if isinstance(total, Mapping) else None,
                "energy_source": energy.get("source"),
                "cheapest": n == cost.get("cheapest"),
            }
        )
    if not rows:
        return None
    return {
        "text": cost.get("text"),
        "cheapest": cost.get("cheapest"),
        "prices": cost.get("prices"),
        "rows": rows,
        "simulated_energy": simulated,
    }

"""The power table of a scenario's gated rows at its shipped sizes (docs/reports.md, "Plan for a
verdict"): per gated row, the unit its test counts and how many a night gives, the largest
spread (one unit's log sd) at which the shipped repeats still find a threshold-sized change
with 95 % power at a 5 % false alarm, the spread measured on earlier runs (here: the simulator
twin's, labelled SIMULATED — its spread is the simulator's on this box, not a GPU's), the power
at the shipped size with that spread, the repeats it would need and their GPU-minutes (the
scenario's `estimate:` block: seed 000's measured speeds).

    MODEL_PATH=scenarios/models/hybrid-gdn-27b .venv/bin/python benchmarks/plan_power.py \\
        scenarios/wsl_tp2.yaml --runs /tmp/twin_runs/wsl_tp2_sim

``--runs``: a folder of runs (e.g. of scenarios/wsl_tp2_sim.yaml) whose spread to use; the
variants are matched by name. Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

from harness.compare.planning import plan_scenario, workload_minutes
from harness.compare.power import max_spread, power_at
from harness.compare.runs import read_run
from harness.scenario import load_scenario
from harness.store import results


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("scenario")
    ap.add_argument("--runs", type=Path, help="a scenario's run folders (results/<scenario>) to measure spread on")
    a = ap.parse_args()
    scenario = load_scenario(a.scenario)
    runs = []
    if a.runs is not None:
        for p in reversed(sorted(p for p in a.runs.iterdir() if (p / results.MANIFEST).exists())):
            run = read_run(p)
            if run.complete:
                runs.append(run)
    plan = plan_scenario(scenario, None, runs)
    minutes = workload_minutes(scenario, [v for v in scenario.expand_variants() if v.expect != "startup_failed"])
    print(
        f"{scenario.name}: repeats {scenario.repeats}; spread from {', '.join(plan.measured_on) or 'no run'}"
        + (" (SIMULATED)" if any(r.manifest.simulated for r in runs) else "")
    )
    print()
    print(
        "| row | unit | units a night (shipped) | threshold | decides up to spread | measured spread | "
        "power at shipped size | repeats for 95 % | GPU-min of those repeats |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for r in plan.rows:
        shipped = int(round((r.units_per_repeat or 0) * scenario.repeats))  # 0: no run measured it
        top = max_spread(shipped, r.threshold)
        pw = power_at(shipped, r.spread, r.threshold) if r.spread is not None and shipped >= 2 else None
        wl = r.row.split(".")[0]
        cost = (minutes or {}).get(wl)
        print(
            f"| {r.variant}: `{r.row}` | {r.unit} | {shipped} | {r.threshold * 100:.0f}% | "
            f"{'—' if top is None else f'±{top * 100:.1f}%'} | "
            f"{'—' if r.spread is None else f'±{r.spread * 100:.1f}%'} | {'—' if pw is None else f'{pw:.0%}'} | "
            f"{r.repeats_needed if r.repeats_needed is not None else '—'} | "
            f"{'—' if cost is None or r.repeats_needed is None else f'{math.ceil(r.repeats_needed) * cost:.1f}'} |"
        )
    for p in plan.parity:
        print(
            f"| {p.variant}: `quality.parity` | host-hit re-ask | {p.keys} | alpha {p.alpha:g} | — | — | "
            f"{'decides' if p.decides else f'needs {p.needed} ({p.needed_exact} with an exact control)'} | — | — |"
        )
    if plan.unplanned:
        print()
        print("Not planned (their own tests): " + ", ".join(plan.unplanned))
    if minutes:
        print()
        print(f"GPU-minutes of one repeat of every workload: {sum(minutes.values()):.1f}")


if __name__ == "__main__":
    main()

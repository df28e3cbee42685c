"""How often ``harness compare`` catches a regression, and how often it cries wolf (not a timed test).

On the simulator: N healthy nights and N nights each of three degraded builds, every night a real
``harness run`` of one small scenario (HiCache OFF and ON, one repeat: the nightly's default), then
``harness compare`` of each night with a healthy one:

  healthy   healthy night i against healthy night i-1: a FAIL is a false alarm
  slower    everything 10 % slower (the simulator's time scale x 1.1)
  host_load host-tier load-back 2x slower (the simulator's ``slow_host_load=2`` fault)
  parity    host-tier loads corrupted (the ``corrupt_host_load`` fault): quality parity FAIL

A degraded night is compared with the healthy night of the same index. The degradations are a
*build*, not a configuration: they reach the simulator through ``$HARNESS_SIM_BUILD``
(docs/simulator.md), so the variants' config hashes match and compare judges them (a changed
``server.sim`` would be "not comparable: config changed"). Nights of the four kinds are
interleaved, ``--jobs`` at a time, so that the machine's drift hits them alike.

    .venv/bin/python benchmarks/verdict_power.py --nights 20 --jobs 2

Prints (and writes to OUT/verdict_power.md and .json) the detection rate of each degradation and
the false-alarm rate of the healthy nights, per gated metric and for the comparison's outcome.
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from harness.compare import compare_runs, read_run  # noqa: E402 - after the path set-up above

TIME_SCALE = 4.0
GATE = ("cold_prefill.cold.ttft_ms", "repeat_prefill.repeat_after_evict.ttft_ms", "on: quality.parity")
CONDITIONS = {  # name -> $HARNESS_SIM_BUILD
    "healthy": "",
    "slower": f"--sim-time-scale {TIME_SCALE * 1.1:g}",
    "host_load": "--sim-fault slow_host_load=2",
    "parity": "--sim-fault corrupt_host_load",
}
WHAT = {
    "healthy": "healthy (false alarms)",
    "slower": "(a) everything 10 % slower",
    "host_load": "(b) host load-back 2x slower",
    "parity": "(c) corrupt_host_load",
}

# The model: small (prefill at the cost model's 80K tok/s cap) with a large KV per token (16 layers x
# 32 KV heads x 128 x bf16 = 256 KiB/token, twice an 8B's), so that in a host-tier hit the
# modelled load-back (a 1.5K-token prompt: 7 ms at 55 GB/s) is a large share of the TTFT next to
# the fixed 4 ms batch cost and the simulator's and client's own overhead. The quality arm's churn
# stays cheap for the same reason.
MODEL = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 1024,
    "intermediate_size": 1024,
    "num_hidden_layers": 16,
    "num_attention_heads": 32,
    "num_key_value_heads": 32,
    "head_dim": 128,
    "max_position_embeddings": 32768,
    "vocab_size": 32000,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "torch_dtype": "bfloat16",
    "tie_word_embeddings": False,
}


def scenario_text(model_dir: Path) -> str:
    return f"""# benchmarks/verdict_power.py: a small nightly on the simulator (SIMULATED)
name: verdict_power
description: SIMULATED. OFF vs ON, one repeat (the nightly's default), gated.
seed: 0
repeats: 1
server:
  backend: sim
  model_path: {model_dir}
  tp_size: 1
  args:
    --max-total-tokens: 8192
    --page-size: 64
    --skip-tokenizer-init: true
    --enable-metrics: true
  startup_timeout_s: 60
  startup_retries: 0
  request_timeout_s: 120
  sim:
    time_scale: {TIME_SCALE:g}
    host_mem_scale: 0.01
    mem_available_gib: 64
    startup_s: 0.1
variants:
  - name: off
  - name: on
    hicache: {{ratio: 2, mem_layout: page_first, write_policy: write_through}}
workloads:
  - kind: cold_prefill
    n: 10
    prompt_tokens: "0.5x pool"
    warmup: 1
  - kind: repeat_prefill
    n: 5
    prompt_tokens: "0.18x pool"
    eviction_tokens: "1.0x pool"
sampling:
  enabled: false
quality:
  enabled: true
  baseline_variant: off
  control: true
  tasks: [needle, variable_tracking]
  lengths: ["0.1x pool"]
  samples_per_task: 2
  reasks: 2
  max_new_tokens: 4
  churn_tokens: "1.0x pool"
  mode: token_ids
expectations:
  thresholds:
    ttft_p50: 5%
    # a host hit is short (~50 ms here): the simulator's and the client's overhead is ~10 % of it
    repeat_prefill.repeat_after_evict.ttft_ms: 20%
gate:
{"".join(f'  - "{g}"' + chr(10) for g in GATE)}"""


def run_night(scenario: Path, results_dir: Path, build: str, log: Path) -> tuple[int, float]:
    """One ``harness run`` with ``$HARNESS_SIM_BUILD=build``: (exit code, seconds)."""
    env = dict(os.environ, HARNESS_SIM_BUILD=build)
    t0 = time.monotonic()
    with open(log, "w") as f:
        p = subprocess.run(
            [sys.executable, "-m", "harness", "run", str(scenario), "--results-dir", str(results_dir), "--no-report"],
            cwd=REPO,
            env=env,
            stdout=f,
            stderr=subprocess.STDOUT,
            check=False,
        )
    return p.returncode, time.monotonic() - t0


def runs_of(results_dir: Path) -> list[Path]:
    base = results_dir / "verdict_power"
    return sorted(p for p in base.iterdir() if (p / "COMPLETE").exists()) if base.is_dir() else []


def judge(base: Path, cand: Path) -> dict:
    comp = compare_runs(read_run(base), read_run(cand))
    gating = [m for m in comp.metrics if m.gating]
    return {
        "candidate": cand.name,
        "baseline": base.name,
        "outcome": comp.outcome,
        "rows": {f"{m.variant}: {m.name}": m.state for m in gating},
        "change": {f"{m.variant}: {m.name}": m.change for m in gating if m.sample != "verdict"},
        "mde": {f"{m.variant}: {m.name}": m.mde for m in gating if m.sample != "verdict"},
        "reasons": comp.reasons[:6],
    }


def table(comparisons: dict[str, list[dict]], gate_rows: list[str]) -> str:
    lines = [
        "| nights | n | compare FAIL | INCONCLUSIVE | PASS | "
        + " | ".join(f"`{r}` regression" for r in gate_rows)
        + " |",
        "|---|---|---|---|---|" + "---|" * len(gate_rows),
    ]
    for cond, comps in comparisons.items():
        n = len(comps)
        if not n:
            continue
        outcome = [sum(c["outcome"] == o for c in comps) for o in ("FAIL", "INCONCLUSIVE", "PASS")]
        per_row = [sum(c["rows"].get(r) == "regression" for c in comps) for r in gate_rows]
        cells = [f"{100 * k / n:.0f} %" for k in outcome + per_row]
        lines.append(f"| {WHAT[cond]} | {n} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def margins(comparisons: dict[str, list[dict]], gate_rows: list[str]) -> str:
    """Per timing row and kind of night: the change of the median, median [min, max], and the
    median minimum detectable effect -- how far each is from its threshold."""
    rows = [r for r in gate_rows if any(r in c.get("change", {}) for cs in comparisons.values() for c in cs)]
    lines = [
        "| nights | " + " | ".join(f"`{r}` change, median [min, max] (MDE)" for r in rows) + " |",
        "|---|" + "---|" * len(rows),
    ]
    for cond, comps in comparisons.items():
        cells = []
        for r in rows:
            ch = sorted(c["change"][r] for c in comps if c.get("change", {}).get(r) is not None)
            md = sorted(c["mde"][r] for c in comps if c.get("mde", {}).get(r) is not None)
            cells.append(
                "—"
                if not ch
                else f"{100 * ch[len(ch) // 2]:+.1f} % [{100 * ch[0]:+.1f}, {100 * ch[-1]:+.1f}]"
                + ("" if not md else f" (±{100 * md[len(md) // 2]:.1f} %)")
            )
        lines.append(f"| {WHAT[cond]} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nights", type=int, default=20, help="degraded nights of each kind (healthy: one more)")
    ap.add_argument("--jobs", type=int, default=2, help="nights run at once")
    ap.add_argument("--out", type=Path, default=Path("/tmp/verdict_power"))
    ap.add_argument("--compare-only", action="store_true", help="compare the runs already under --out")
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    model = a.out / "model"
    model.mkdir(exist_ok=True)
    (model / "config.json").write_text(json.dumps(MODEL, indent=1))
    scenario = a.out / "verdict_power.yaml"
    scenario.write_text(scenario_text(model))
    dirs = {c: a.out / f"results-{c}" for c in CONDITIONS}
    if not a.compare_only:
        plan = [(c, i) for i in range(a.nights + 1) for c in CONDITIONS if c == "healthy" or i < a.nights]
        t0 = time.monotonic()
        codes: dict[str, list[int]] = {c: [] for c in CONDITIONS}
        with cf.ThreadPoolExecutor(a.jobs) as pool:
            futs = {
                pool.submit(run_night, scenario, dirs[c], CONDITIONS[c], a.out / f"{c}-{i:02d}.log"): (c, i)
                for c, i in plan
            }
            for k, fut in enumerate(cf.as_completed(futs), 1):
                c, i = futs[fut]
                rc, secs = fut.result()
                codes[c].append(rc)
                print(
                    f"[{k}/{len(plan)}] {c} night {i}: exit {rc} in {secs:.0f} s "
                    f"({time.monotonic() - t0:.0f} s so far)",
                    flush=True,
                )
        print("run exit codes:", {c: {rc: v.count(rc) for rc in sorted(set(v))} for c, v in codes.items()})
    runs = {c: runs_of(d) for c, d in dirs.items()}
    healthy = runs["healthy"]
    comparisons: dict[str, list[dict]] = {
        "healthy": [judge(healthy[i - 1], healthy[i]) for i in range(1, len(healthy))]
    }
    for c in ("slower", "host_load", "parity"):
        comparisons[c] = [judge(healthy[i % len(healthy)], r) for i, r in enumerate(runs[c])]
    gate_rows = sorted({r for comps in comparisons.values() for c in comps for r in c["rows"]})
    md = table(comparisons, gate_rows) + "\n\n" + margins(comparisons, gate_rows)
    print(md)
    (a.out / "verdict_power.md").write_text(md + "\n")
    (a.out / "verdict_power.json").write_text(json.dumps(comparisons, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""GPU-minutes per decided night, on the simulator with sglang's measured start-up (not a timed test).

One night is one ``harness run`` of a three-variant scenario shaped like the H200 nightlies
(docs/gpu.md: a server ready in 74-111 s, a variant's measured work ~60-90 s, three variants one
after another 7 min 45 s): HiCache OFF, ON ratio 2 write_through and write_back, four workloads
and the quality arm. The simulator's start-up is set to those figures
(``server.sim``: weight load, CUDA-graph capture, host-pool pinning, warm-up; the process start
is the simulator's own), its cost model slowed so that the work takes about as long. A night is
*decided* when its verdict is PASS or FAIL (INCONCLUSIVE would ask for another night).

    .venv/bin/python benchmarks/gpu_minutes.py --out /tmp/gm            # one sequential night
    .venv/bin/python benchmarks/gpu_minutes.py --out /tmp/gm --gpus 0,1,2
    .venv/bin/python benchmarks/gpu_minutes.py --out /tmp/gm --scale 0.1  # start-up and work x0.1

``--scale`` multiplies the start-up and the cost model (not the harness's own waits, which are
what is measured). ``--python`` / ``--pythonpath``: the harness to run (a checkout before a
change, for the before/after). Prints one row per night: wall time, GPU-minutes per bucket
(harness.store.gpu_time), the share measured, the verdict, and GPU-minutes per decided night; writes
OUT/gpu_minutes.json. The figures recorded: docs/nightly.md ("GPU time per night").
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from harness.store import gpu_time, results  # noqa: E402 - after the path set-up above

# sglang's start-up on the H200 (docs/gpu.md, 8B shape, dummy weights: ready in 74-111 s);
# the simulator's process start (~1-2 s) comes on top.
STARTUP = {"startup_s": 45.0, "capture_s": 20.0, "warmup_s": 8.0}
REGISTER_S_PER_GB = 1.0  # pinning the host pool (the scheduler's other host-pool costs are real)
TIME_SCALE = 60.0  # the cost model slowed so that a variant's workloads take ~60-90 s, as on the H200

SCENARIO = """\
name: gpu_minutes
description: SIMULATED. The H200 nightly's shape with sglang's start-up times (benchmarks/gpu_minutes.py).
repeats: 1
server:
  backend: sim
  model_path: {model}
  args: {{--max-total-tokens: 8192, --skip-tokenizer-init: true, --enable-metrics: true}}
  startup_timeout_s: 600
  request_timeout_s: 600
  sim: {{time_scale: {time_scale}, host_mem_scale: 0.0625, mem_available_gib: 16, startup_s: {startup_s},
         capture_s: {capture_s}, warmup_s: {warmup_s}, register_s_per_gb: {register}}}
variants:
  - name: "off"
  - name: on-r2
    hicache: {{ratio: 2, mem_layout: page_first, write_policy: write_through}}
  - name: on-r2-write_back
    hicache: {{ratio: 2, mem_layout: page_first, write_policy: write_back}}
workloads:
  - kind: cold_prefill
    n: 2
    prompt_tokens: "0.5x pool"
  - kind: repeat_prefill
    n: 2
    prompt_tokens: "0.3x pool"
    eviction_tokens: "1.2x pool"
  - kind: parallel_prefixes
    k: 4
    prompt_tokens: "0.4x pool"
    passes: 2
  - kind: decode
    batch: 1
    prompt_tokens: 128
    output_tokens: 64
quality:
  enabled: true
  baseline_variant: "off"
  tasks: [needle]
  lengths: [2048]
  samples_per_task: 2
  max_new_tokens: 4
  reasks: 1
  mode: token_ids
sampling: {{enabled: true, interval_s: 0.5, gpu: false, server_metrics: true}}
preflight: {{mode: warn}}
"""


def write_scenario(out: Path, scale: float) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    path = out / "gpu_minutes.yaml"
    path.write_text(
        SCENARIO.format(
            model=REPO / "scenarios" / "models" / "llama-tiny",
            time_scale=f"{TIME_SCALE * scale:g}",
            register=f"{REGISTER_S_PER_GB * scale:g}",
            **{k: f"{v * scale:g}" for k, v in STARTUP.items()},
        )
    )
    return path


def night(path: Path, out: Path, python: str, pythonpath: str, gpus: str | None) -> dict:
    results_dir = out / "results"
    before = set(results_dir.glob("gpu_minutes/*"))
    argv = [python, "-m", "harness", "run", str(path), "--results-dir", str(results_dir), "--no-report"]
    if gpus:
        argv += ["--gpus", gpus]
    env = {**os.environ, "PYTHONPATH": pythonpath}
    t0 = time.monotonic()
    proc = subprocess.run(argv, env=env, capture_output=True, text=True)
    wall = time.monotonic() - t0
    (run,) = set(results_dir.glob("gpu_minutes/*")) - before
    verdict = results.read_json(run / "verdict.json")
    gt = gpu_time.run_folder_gpu_time(results.RunPaths(run))
    # a harness from before harness.store.gpu_time has no timing: its GPU-minutes are its variants' spans x 1 GPU
    if not any(gt["variants"].values()):
        spans = []
        for st_path in run.glob("*/status.json"):
            st = results.read_json(st_path)
            from harness.compare.comparison import status_wall_s

            spans.append(status_wall_s(st) or 0.0)
        gt["gpu_minutes_total"] = round(sum(spans) / 60.0, 4)
    decided = verdict.get("outcome") in ("PASS", "FAIL")
    return {
        "run": str(run),
        "exit_code": proc.returncode,
        "wall_s": round(wall, 1),
        "gpus": gpus or "sequential",
        "verdict": verdict.get("outcome"),
        "decided": decided,
        "gpu_minutes": gt["gpu_minutes"],
        "gpu_minutes_total": gt["gpu_minutes_total"],
        "measured_fraction": gt.get("measured_fraction"),
        "gpu_minutes_per_decided_night": gt["gpu_minutes_total"] if decided else None,
        "ready_s": {p.parent.name: results.read_json(p).get("ready_s") for p in sorted(run.glob("*/status.json"))},
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--scale", type=float, default=1.0, help="start-up and cost model x this (1: sglang's times)")
    ap.add_argument("--gpus", help="run the night side by side on these (fake, on the simulator) GPU ids")
    ap.add_argument("--nights", type=int, default=1)
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--pythonpath", default=str(REPO), help="the harness checkout to run (default: this one)")
    ap.add_argument("--label", default="", help="a name for this configuration in the output")
    args = ap.parse_args(argv)
    path = write_scenario(args.out, args.scale)
    rows = [night(path, args.out, args.python, args.pythonpath, args.gpus) for _ in range(args.nights)]
    for r in rows:
        gm = r["gpu_minutes"]
        print(
            f"{args.label or r['gpus']}: wall {r['wall_s'] / 60:.2f} min, {r['gpu_minutes_total']:.2f} GPU-min "
            f"(startup {gm['startup']:.2f}, work {gm['work']:.2f}, quality {gm['quality']:.2f}, "
            f"cooldown {gm['cooldown']:.2f}, idle {gm['idle']:.2f}; measured "
            f"{(r['measured_fraction'] or 0) * 100:.0f} %), verdict {r['verdict']}, ready_s {r['ready_s']}"
        )
    record = args.out / "gpu_minutes.json"
    prior = json.loads(record.read_text()) if record.exists() else []
    record.write_text(json.dumps(prior + [{"label": args.label, "scale": args.scale, "nights": rows}], indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

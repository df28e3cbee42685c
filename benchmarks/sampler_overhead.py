"""Measure the sampler's own CPU use at a given interval against a running server with /metrics.

By default starts the simulated server (`python -m harness.sim`, llama-tiny, HiCache on,
`--enable-metrics`), sends a few requests so its histograms and labelled counters exist, then
runs `harness.sampling.Sampler` for `--seconds` and prints the sampling thread's CPU time
(`time.thread_time` inside the thread) as a fraction of one core. `--url URL --pid PID` attaches
to a server that is already running instead (e.g. a real sglang).

    python benchmarks/sampler_overhead.py --seconds 60
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

import httpx
import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from harness.sampling import Sampler  # noqa: E402
from harness.sim.testing import SimProcess  # noqa: E402


def warm_up(url: str, n: int = 8) -> None:
    for i in range(n):
        ids = [(i * 997 + j * 13) % 30000 + 10 for j in range(512)]
        httpx.post(
            url + "/generate",
            timeout=30,
            trust_env=False,
            json={"input_ids": ids, "sampling_params": {"max_new_tokens": 4}},
        ).raise_for_status()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--interval-s", type=float, default=0.5)
    ap.add_argument("--url", help="attach to this server instead of starting the simulator")
    ap.add_argument("--pid", type=int, help="the attached server's pid (RSS of its tree)")
    ap.add_argument("--json", action="store_true", help="print one JSON line")
    args = ap.parse_args(argv)

    sim = None
    if args.url:
        url, pid = args.url.rstrip("/"), args.pid
    else:
        sim = SimProcess(
            [
                "--skip-tokenizer-init",
                "--enable-metrics",
                "--enable-hierarchical-cache",
                "--hicache-ratio",
                "2",
                "--max-total-tokens",
                "20480",
            ],
            time_scale=0.01,
        )
        sim.__enter__()
        url, pid = sim.url, sim.proc.pid
    try:
        warm_up(url)
        samples: list[dict] = []
        metrics_lines = len(httpx.get(url + "/metrics", timeout=5, trust_env=False).text.splitlines())
        sampler = Sampler(pid, url, samples.append, interval_s=args.interval_s)
        sampler.start()
        time.sleep(args.seconds)
        sampler.stop()
    finally:
        if sim is not None:
            sim.kill()
    n = len(samples)
    result = {
        "interval_s": args.interval_s,
        "wall_s": round(sampler.wall_seconds, 2),
        "samples": n,
        "cpu_s": round(sampler.cpu_seconds, 4),
        "cpu_fraction_of_core": round(sampler.cpu_fraction, 5),
        "cpu_ms_per_sample": round(1000 * sampler.cpu_seconds / max(n, 1), 3),
        "metrics_lines": metrics_lines,
        "metrics_errors": sampler.metrics_errors,
        "gpu_fields": any("gpus" in s for s in samples),
        "server": "sim" if sim is not None else url,
        "machine": f"{platform.node()} {platform.machine()} {psutil.cpu_count()} CPUs, "
        f"{platform.system()} {platform.release()}, Python {platform.python_version()}",
        "processes_on_host": len(psutil.pids()),
    }
    if args.json:
        print(json.dumps(result))
    else:
        for k, v in result.items():
            print(f"{k:22} {v}")
        verdict = "OK" if result["cpu_fraction_of_core"] < 0.01 else "ABOVE TARGET"
        print(f"{'target':22} < 1% of one core: {verdict}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

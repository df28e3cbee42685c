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
import os
import platform
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from harness.sampling import Sampler  # noqa: E402


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_sim(log_path: Path) -> tuple[subprocess.Popen, str]:
    port = _free_port()
    argv = [sys.executable, "-m", "harness.sim", "--model-path", str(ROOT / "scenarios/models/llama-tiny"),
            "--port", str(port), "--skip-tokenizer-init", "--enable-metrics", "--enable-hierarchical-cache",
            "--hicache-ratio", "2", "--max-total-tokens", "20480", "--sim-time-scale", "0.01",
            "--sim-host-mem-scale", "0.01"]
    log = open(log_path, "wb")
    proc = subprocess.Popen(argv, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"simulator exited with {proc.returncode}; see {log_path}")
        try:
            if httpx.get(url + "/health", timeout=1.0, trust_env=False).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    os.killpg(proc.pid, signal.SIGKILL)
    raise SystemExit("simulator not ready within 60 s")


def warm_up(url: str, n: int = 8) -> None:
    for i in range(n):
        ids = [(i * 997 + j * 13) % 30000 + 10 for j in range(512)]
        httpx.post(url + "/generate", timeout=30, trust_env=False,
                   json={"input_ids": ids, "sampling_params": {"max_new_tokens": 4}}).raise_for_status()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--interval-s", type=float, default=0.5)
    ap.add_argument("--url", help="attach to this server instead of starting the simulator")
    ap.add_argument("--pid", type=int, help="the attached server's pid (RSS of its tree)")
    ap.add_argument("--json", action="store_true", help="print one JSON line")
    args = ap.parse_args(argv)

    proc = None
    if args.url:
        url, pid = args.url.rstrip("/"), args.pid
    else:
        proc, url = start_sim(Path("/tmp/sampler_overhead_sim.log"))
        pid = proc.pid
    try:
        warm_up(url)
        samples: list[dict] = []
        metrics_lines = len(httpx.get(url + "/metrics", timeout=5, trust_env=False).text.splitlines())
        sampler = Sampler(pid, url, samples.append, interval_s=args.interval_s)
        sampler.start()
        time.sleep(args.seconds)
        sampler.stop()
    finally:
        if proc is not None:
            try:
                os.killpg(proc.pid, signal.SIGTERM)
                proc.wait(10)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                os.killpg(proc.pid, signal.SIGKILL)
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
        "server": "sim" if proc is not None else url,
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

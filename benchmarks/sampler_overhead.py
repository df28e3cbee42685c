"""Measure the sampler's own CPU use at a given interval against a running server with /metrics.

By default starts the simulated server (`python -m harness.sim`, llama-tiny, HiCache on,
`--enable-metrics`), sends a few requests so its histograms and labelled counters exist, then
runs `harness.run.sampler.Sampler` for `--seconds` and prints the sampling thread's CPU time
(`time.thread_time` inside the thread) as a fraction of one core. `--url URL --pid PID` attaches
to a server that is already running instead (e.g. a real sglang).

    python benchmarks/sampler_overhead.py --seconds 60
    python benchmarks/sampler_overhead.py --seconds 60 --sglang-like   # a page shaped like sglang's
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

import httpx
import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from harness.run.sampler import Sampler  # noqa: E402
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


def sglang_like_metrics() -> str:
    """A /metrics page shaped like sglang 0.5.17's (observability/metrics_collector.py declares 37
    histograms, 39 counters and 60 gauges): the same counts, sglang's label set on each series and
    25 buckets per histogram, ~1,600 lines / ~190 KB. The simulator's page has ~100 lines, so it
    under-states what a real server's /metrics costs to read."""
    from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

    reg = CollectorRegistry()
    labels = ["model_name", "engine_type", "tp_rank", "pp_rank", "moe_ep_rank"]
    values = {"model_name": "/models/llama3-8b", "engine_type": "unified", "tp_rank": "0", "pp_rank": "0"}
    values["moe_ep_rank"] = "0"
    for i in range(37):
        h = Histogram(
            f"sglang:hist_{i}_seconds", "h", labels, buckets=[0.001 * 1.62**k for k in range(25)], registry=reg
        )
        for v in (0.01, 0.3, 2.0):
            h.labels(**values).observe(v)
    for i in range(39):
        Counter(f"sglang:counter_{i}", "c", labels, registry=reg).labels(**values).inc(5)
    for i in range(60):
        Gauge(f"sglang:gauge_{i}", "g", labels, registry=reg).labels(**values).set(3)
    return generate_latest(reg).decode()


_STATIC_SERVER = """
import http.server, sys
body = open(sys.argv[1], "rb").read()
class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as sglang's uvicorn answers
    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
print(srv.server_address[1], flush=True)
srv.serve_forever()
"""


class _StaticMetrics:
    """A stdlib HTTP/1.1 server in its own process (as a real server is: no GIL shared with the
    sampler) answering GET /metrics with a fixed page."""

    def __init__(self, text: str) -> None:
        import subprocess
        import tempfile

        self._file = tempfile.NamedTemporaryFile(suffix=".txt", delete=False)
        self._file.write(text.encode())
        self._file.close()
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _STATIC_SERVER, self._file.name], stdout=subprocess.PIPE, text=True
        )
        self.url = f"http://127.0.0.1:{int(self.proc.stdout.readline())}"

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()
        os.unlink(self._file.name)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--interval-s", type=float, default=0.5)
    ap.add_argument("--url", help="attach to this server instead of starting the simulator")
    ap.add_argument("--pid", type=int, help="the attached server's pid (RSS of its tree)")
    ap.add_argument("--json", action="store_true", help="print one JSON line")
    ap.add_argument(
        "--sglang-like",
        action="store_true",
        help="scrape a static /metrics page shaped like sglang 0.5.17's (~1,600 lines) instead of the simulator's",
    )
    args = ap.parse_args(argv)

    sim = static = None
    if args.sglang_like:
        static = _StaticMetrics(sglang_like_metrics())
        url, pid = static.url, static.proc.pid
    elif args.url:
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
        if static is None:
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
        if static is not None:
            static.close()
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
        "server": "sim" if sim is not None else "sglang-like static page" if static is not None else url,
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

"""Time and peak memory of `harness report`, `compare` and `load` on a large synthetic run.

Builds a run folder with ``--requests`` request rows (default 1,000,000) and ``--samples``
sampler rows (default 100,000; each with a realistic set of ~40 server counters), split over two
variants (off, on-r2), then runs each command in a fresh process and prints its wall time and
peak RSS (ru_maxrss). summary.json is computed from the first 20,000 rows of each variant (the
runner writes it during a run; neither command recomputes it).

First `report` with no columnar copies (`harness.analysis.frames`: it parses the JSONL and leaves the
copies beside it, as the report drawn at the end of a run does), then `report`, `compare` and
`load` reading the copies. ``--reuse DIR`` measures an existing run folder (built by ``--keep``).

    python benchmarks/report_scale.py [--requests 1000000] [--samples 100000] [--keep DIR | --reuse RUN]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from harness.store import results  # noqa: E402

PHASES = [
    ("cold_prefill", "cold", None),
    ("repeat_prefill", "cold", None),
    ("repeat_prefill", "repeat_device", None),
    ("parallel_prefixes", "pass1", "pp1"),
    ("parallel_prefixes", "pass2", "pp2"),
    ("short_ttft", "alone", None),
    ("decode", "decode", None),
]
SCENARIO = """name: scale
server: {backend: sglang, model_path: /models/x}
variants:
  - name: off
  - name: on-r2
    hicache: {ratio: 2}
workloads:
  - {kind: cold_prefill, prompt_tokens: 8000}
  - {kind: repeat_prefill, prompt_tokens: 8000}
  - {kind: parallel_prefixes, prompt_tokens: 4000}
  - {kind: short_ttft, prompt_tokens: 32}
  - {kind: decode}
expectations:
  thresholds: {ttft_p50: 5%}
"""


def _request_line(variant: str, i: int, slow: float) -> str:
    wl, ph, group = PHASES[i % len(PHASES)]
    sent = 10_000_000 + i * 1_000_000
    first = sent + int((20 + (i * 7919) % 50) * 1e6 * slow)
    chunks = [first + k * 5_000_000 for k in range(4)] if wl == "decode" else [first]
    cg = f'"{group}-{i // 700}"' if group else "null"
    return (
        f'{{"variant":"{variant}","workload":"{wl}","phase":"{ph}","repeat":{i % 3},"index":{i},'
        f'"rid":"r{i}","warmup":false,"concurrency_group":{cg},"prompt_len":8000,"input_hash":"{"0" * 64}",'
        f'"wall_start":1.7e9,"sent_ns":{sent},"first_token_ns":{first},"chunk_ns":{json.dumps(chunks)},'
        f'"chunk_new_tokens":{json.dumps([1] * len(chunks))},"done_ns":{chunks[-1]},"prompt_tokens":8000,'
        f'"completion_tokens":{len(chunks)},"cached_tokens":0,"cached_device":0,"cached_host":0,'
        f'"cached_storage":0,"output_ids":{json.dumps(list(range(len(chunks))))},"text":null,'
        f'"output_logprobs":null,"top_logprobs":null,"finish_reason":"length","error":null}}\n'
    )


def _sample_line(i: int, n: int) -> str:
    phase = "idle" if i < n // 10 else f"{PHASES[(i * len(PHASES)) // n][0]}/{PHASES[(i * len(PHASES)) // n][1]}"
    counters = {f'sglang:counter_{k}_total{{tp_rank="0",model_name="/models/x"}}': float(i * k) for k in range(36)}
    counters['sglang:load_back_bytes_total{tp_rank="0"}'] = float(i * 1_000_000)
    counters['sglang:load_back_duration_seconds_sum{tp_rank="0"}'] = float(i) * 1e-4
    return (
        json.dumps(
            {
                "t_ns": 10_000_000 + i * 500_000_000,
                "wall_time": 1.7e9 + i * 0.5,
                "phase": phase,
                "mem_available_kib": 100_000_000 - i % 1000,
                "mem_free_kib": 90_000_000,
                "cached_kib": 4_000_000,
                "mlocked_kib": 8000,
                "shmem_kib": 1,
                "swap_total_kib": 0,
                "swap_free_kib": 0,
                "pswpin_kib_s": 0.0,
                "pswpout_kib_s": 0.0,
                "pgmajfault_s": 0.0,
                "server_rss_kib": 5_000_000,
                "gpus": [{"index": 0, "mem_used_mib": 3000.0, "util_pct": 50}],
                "counters": counters,
            }
        )
        + "\n"
    )


def build(root: Path, n_requests: int, n_samples: int) -> Path:
    from harness.analysis.samples import summarize_samples
    from harness.analysis.summary import summarize
    from harness.store.records import RequestRecord

    run = root / "scale" / "20260101T000000Z-000000"
    run.mkdir(parents=True)
    variants = ["off", "on-r2"]
    manifest = {
        "schema_version": 1,
        "kind": "run",
        "scenario": {"name": "scale", "path": "scale.yaml", "text": SCENARIO, "hash": "x"},
        "harness_version": "bench",
        "backend": "sglang",
        "simulated": False,
        "created_at": "2026-01-01T00:00:00+00:00",
        "probe": None,
        "host": {},
        "variants": [
            {
                "name": v,
                "config_hash": v,
                "argv": [],
                "env": {},
                "hicache": None if v == "off" else {"ratio": 2},
                "expect": "ok",
            }
            for v in variants
        ],
    }
    results.write_json_atomic(run / "manifest.json", manifest)
    for vi, v in enumerate(variants):
        vdir = run / v
        vdir.mkdir()
        per = n_requests // len(variants)
        with open(vdir / "requests.jsonl", "w") as f:
            for i in range(per):
                f.write(_request_line(v, i, 1.0 + 0.02 * vi))
        ns = n_samples // len(variants)
        with open(vdir / "samples.jsonl", "w") as f:
            for i in range(ns):
                f.write(_sample_line(i, ns))
        head = [RequestRecord.from_json(line) for line, _ in zip(open(vdir / "requests.jsonl"), range(20_000))]
        summary = summarize(head)
        summary["sampling"] = {"phases": summarize_samples(results.read_jsonl(vdir / "samples.jsonl"))}
        results.write_json_atomic(vdir / "summary.json", summary)
        results.write_json_atomic(
            vdir / "status.json",
            {"schema_version": 1, "variant": v, "state": "ok", "expect": "ok", "expect_met": True, "pools": {}},
        )
    results.write_json_atomic(run / "COMPLETE", {"at": "x"})
    return run


def drop_copies(run: Path) -> None:
    for p in run.glob("*/*.columns.npz"):
        p.unlink()


def measure(cmd: list[str]) -> dict:
    """Run a harness command in a fresh process: wall seconds, peak RSS MiB, exit code."""
    code = (
        "import resource, sys, time; from harness.cli import main; t = time.perf_counter(); "
        f"rc = main({cmd!r}); dt = time.perf_counter() - t; "
        "print('BENCH', rc, dt, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, file=sys.stderr)"
    )
    p = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    line = next(ln for ln in p.stderr.splitlines() if ln.startswith("BENCH"))
    _, rc, dt, rss = line.split()
    return {
        "command": "harness " + " ".join(cmd[:1]),
        "exit": int(rc),
        "seconds": round(float(dt), 1),
        "peak_rss_mib": round(float(rss)),
        "loadavg_1m": round(os.getloadavg()[0], 2),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=1_000_000)
    ap.add_argument("--samples", type=int, default=100_000)
    ap.add_argument("--keep", type=Path, help="build the run here and keep it")
    ap.add_argument("--reuse", type=Path, help="measure this run folder (from an earlier --keep) instead")
    a = ap.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="report_scale."))
    base = a.keep or tmp
    try:
        if a.reuse:
            run = a.reuse
        else:
            t = time.perf_counter()
            run = build(base / "results", a.requests, a.samples)
            print(f"built {a.requests:,} request rows + {a.samples:,} samples in {time.perf_counter() - t:.0f} s")
        size = sum(p.stat().st_size for p in run.rglob("*.jsonl")) / 2**20
        print(
            f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
            f"python {platform.python_version()}; {size:,.0f} MiB of JSONL; load average {os.getloadavg()[0]:.2f}"
        )
        drop_copies(run)
        reports = tmp / "reports"
        rows = [
            {**measure(["report", str(run), "--reports-dir", str(reports)]), "command": "harness report (no copies)"},
            measure(["report", str(run), "--reports-dir", str(reports)]),
            measure(["compare", str(run), "--baseline", str(run), "--results-dir", str(run.parent.parent)]),
            measure(["load", str(run)]),
        ]
        for r in rows:
            print(
                f"{r['command']:<28} {r['seconds']:>7.1f} s  peak RSS {r['peak_rss_mib']:>6} MiB  exit {r['exit']}"
                f"  (load average {r['loadavg_1m']})"
            )
        return 0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())

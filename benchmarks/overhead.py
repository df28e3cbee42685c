"""The harness's own share of a variant's wall time, phase by phase, on the simulator's smoke run.

Runs `harness run SCENARIO --no-report` in this process with timers wrapped around what is not
the harness's own work, then splits each phase's wall time (phases as the console shows them:
`Progress.phase`) into:

  server    starting it and waiting until it is ready, stopping it (`ServerProcess.start`,
            `wait_ready`, `stop`)
  requests  a request in flight (`StreamingClient._run`, `flush_cache`, `/get_server_info`)
  waits     deliberate waits: sleeps of the main thread (idle window, watchdogs, start delays),
            the cooldown, stopping the sampler thread
  own       the rest: the harness's own work (building requests, recording rows, summaries,
            status files, the run's products)

Overlaps count once, in that order (a wait while a request is in flight is request time). The
report (`--no-report`) is left out: it is drawn after the run (see report_scale.py).

    python benchmarks/overhead.py [--scenario scenarios/sim_smoke.yaml] [--json OUT]
Target (issue #15): own ≤ 2 % of each served variant's wall time.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from harness.run import cooldown, external_variant, launched  # noqa: E402
from harness.run.progress import Progress  # noqa: E402
from harness.run.sampler import Sampler  # noqa: E402
from harness.server import process as server_mod  # noqa: E402
from harness.server.client import StreamingClient  # noqa: E402

CATEGORIES = ("server", "requests", "waits")
clock = time.perf_counter_ns


class Timeline:
    def __init__(self) -> None:
        self.phases: list[tuple[int, str, str]] = []  # (t, variant, phase)
        self.spans: dict[str, list[tuple[int, int]]] = {c: [] for c in CATEGORIES}
        self.variant = ""

    def mark(self, phase: str) -> None:
        self.phases.append((clock(), self.variant, phase))

    def add(self, cat: str, t0: int, t1: int) -> None:
        self.spans[cat].append((t0, t1))


T = Timeline()


def _timed_sync(cat: str, fn):
    def wrapper(*a, **kw):
        t0 = clock()
        try:
            return fn(*a, **kw)
        finally:
            T.add(cat, t0, clock())

    return wrapper


def _timed_async(cat: str, fn):
    async def wrapper(*a, **kw):
        t0 = clock()
        try:
            return await fn(*a, **kw)
        finally:
            T.add(cat, t0, clock())

    return wrapper


def instrument() -> None:
    orig_variant, orig_phase = Progress.variant, Progress.phase

    def variant(self, index, name, requests=None):
        T.variant = name
        orig_variant(self, index, name, requests)
        T.mark("launching")

    def phase(self, name):
        orig_phase(self, name)
        T.mark(name)

    Progress.variant, Progress.phase = variant, phase
    for name in ("start", "wait_ready", "stop"):
        setattr(server_mod.ServerProcess, name, _timed_sync("server", getattr(server_mod.ServerProcess, name)))
    StreamingClient._run = _timed_async("requests", StreamingClient._run)
    StreamingClient.flush_cache = _timed_async("requests", StreamingClient.flush_cache)
    launched.fetch_server_info = _timed_sync("requests", launched.fetch_server_info)
    external_variant.fetch_server_info = _timed_sync("requests", external_variant.fetch_server_info)
    cooldown.wait = _timed_sync("waits", cooldown.wait)
    Sampler.stop = _timed_sync("waits", Sampler.stop)
    orig_sleep, orig_asleep = time.sleep, asyncio.sleep
    main = threading.main_thread()

    def sleep(s):
        if threading.current_thread() is not main or s < 0.001:
            return orig_sleep(s)
        t0 = clock()
        try:
            return orig_sleep(s)
        finally:
            T.add("waits", t0, clock())

    async def asleep(delay, result=None):
        if delay < 0.001:
            return await orig_asleep(delay, result)
        t0 = clock()
        try:
            return await orig_asleep(delay, result)
        finally:
            T.add("waits", t0, clock())

    time.sleep, asyncio.sleep = sleep, asleep


def _union(spans: list[tuple[int, int]], lo: int, hi: int) -> list[tuple[int, int]]:
    """The union of spans clipped to [lo, hi), as sorted disjoint spans."""
    clipped = sorted((max(a, lo), min(b, hi)) for a, b in spans if b > lo and a < hi)
    out: list[list[int]] = []
    for a, b in clipped:
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return [(a, b) for a, b in out]


def _minus(spans: list[tuple[int, int]], taken: list[tuple[int, int]]) -> int:
    """Length of `spans` not covered by `taken` (both sorted and disjoint)."""
    total = 0
    for a, b in spans:
        cur = a
        for c, d in taken:
            if d <= cur or c >= b:
                continue
            if c > cur:
                total += c - cur
            cur = max(cur, d)
        if cur < b:
            total += b - cur
    return total


def split(lo: int, hi: int) -> dict[str, float]:
    """Seconds of [lo, hi) in each category (priority order) and own."""
    taken: list[tuple[int, int]] = []
    out: dict[str, float] = {}
    for cat in CATEGORIES:
        spans = _union(T.spans[cat], lo, hi)
        out[cat] = _minus(spans, taken) / 1e9
        taken = _union(taken + spans, lo, hi)
    out["wall"] = (hi - lo) / 1e9
    out["own"] = max(0.0, out["wall"] - sum(out[c] for c in CATEGORIES))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenario", default=str(ROOT / "scenarios" / "sim_smoke.yaml"))
    ap.add_argument("--json", type=Path)
    a = ap.parse_args(argv)
    instrument()
    from harness.cli import main as cli_main

    tmp = Path(tempfile.mkdtemp(prefix="overhead."))
    load0 = os.getloadavg()
    t_start = clock()
    rc = cli_main(["run", a.scenario, "--results-dir", str(tmp / "results"), "--no-report"])
    t_end = clock()
    marks = T.phases + [(t_end, "", "end")]
    rows = []
    for (t0, variant, phase), (t1, _, _) in zip(marks, marks[1:]):
        rows.append({"variant": variant, "phase": phase, **split(t0, t1)})
    per_variant: dict[str, dict[str, float]] = {}
    for r in rows:
        v = per_variant.setdefault(r["variant"] or "(run)", {k: 0.0 for k in ("wall", *CATEGORIES, "own")})
        for k in v:
            v[k] += r[k]
    print(
        f"harness run {a.scenario} --no-report: exit {rc}; machine {platform.machine()} {os.cpu_count()} CPUs, "
        f"load average {load0[0]:.2f} at start, {os.getloadavg()[0]:.2f} at end"
    )
    print("\n| variant | phase | wall s | server s | requests s | waits s | own s | own % |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        if r["wall"] < 0.0005:
            continue
        print(
            f"| {r['variant']} | {r['phase']} | {r['wall']:.3f} | {r['server']:.3f} | {r['requests']:.3f} | "
            f"{r['waits']:.3f} | {r['own']:.3f} | {100 * r['own'] / r['wall']:.1f} |"
        )
    print("\n| variant | wall s | server s | requests s | waits s | own s | own % of wall |")
    print("|---|---|---|---|---|---|---|")
    for v, s in per_variant.items():
        print(
            f"| {v} | {s['wall']:.2f} | {s['server']:.2f} | {s['requests']:.2f} | {s['waits']:.2f} | "
            f"{s['own']:.3f} | {100 * s['own'] / max(s['wall'], 1e-9):.2f} |"
        )
    total = {k: sum(s[k] for s in per_variant.values()) for k in ("wall", "own")}
    print(
        f"\nwhole run: {total['wall']:.2f} s wall, harness own {total['own']:.3f} s "
        f"({100 * total['own'] / total['wall']:.2f} %)"
    )
    if a.json:
        a.json.write_text(
            json.dumps(
                {
                    "exit": rc,
                    "phases": rows,
                    "variants": per_variant,
                    "loadavg": [load0[0], os.getloadavg()[0]],
                    "wall_s": (t_end - t_start) / 1e9,
                },
                indent=1,
            )
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

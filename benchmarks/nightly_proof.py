"""Does the shipped nightly's gate decide? Nights of its simulated twin, healthy and with each fault.

For each series it runs ``harness run SCENARIO`` night after night into a results folder of its
own and compares every night with ``harness compare RUN --baseline latest`` (the baseline that
remembers: a night whose comparison FAILed, or was INCONCLUSIVE against a baseline, is never one), then reads the comparison:
its outcome and the gating rows that regressed.

- ``healthy``: ``--nights`` healthy nights after a first one (the first has no baseline). The
  claim: >= 95 % PASS, no FAIL. ``--burn K`` runs K CPU burners (``python -c 'while 1: pass'``,
  at the runs' own niceness) for the whole series.
- ``<fault>``: one healthy night, then ``--nights`` nights of a build with the fault
  (``HARNESS_SIM_BUILD="--sim-fault NAME=ARG"``: a build flag, so the variants' config hashes
  stay the same, as a slower build's would). The claim: FAIL on every night, the first and each
  one after, by the gate row meant to catch it (``FAULTS`` below).
``--baseline-from RUN``: a healthy night already run is copied into each series as its first
night instead of running one (so the fault series share one healthy baseline). ``--jobs K``
(with ``--baseline-from``): K nights at once, from every series, in the order (series, night);
each night still compares with ``--baseline latest`` in its own series' folder when it ends, so
a fault night is set against the newest night of its series that is complete and PASSed, or the
copied first night (a night still running has no verdict and is never a baseline). The twin's nights mostly wait on
the simulated GPU's modelled time, so K of them share the cores.

Every run folder and log goes under ``--out`` (default under /tmp), never into the repository;
the harness is the one of this checkout (PYTHONPATH). ``--time-scale`` is passed as a build flag
to both the healthy and the faulty nights (``--sim-time-scale``), ``--only`` picks variants
(default: off and on-r1.3, the two the gate judges; the declared startup failures are the same
every night).

    nice -n 10 .venv/bin/python benchmarks/nightly_proof.py --series healthy --nights 20
    nice -n 10 .venv/bin/python benchmarks/nightly_proof.py --series slow_prefill --nights 10
    nice -n 10 .venv/bin/python benchmarks/nightly_proof.py --series all --nights 3 --json

Exit 0 when every series met its claim, else 1.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_SCENARIO = ROOT / "scenarios" / "wsl_tp2_sim.yaml"
HOG = "while 1: pass"

# fault series -> (the simulator fault, the gate row meant to catch it: "[variant:] row")
FAULTS: dict[str, tuple[str, str]] = {
    "slow_prefill": ("slow_prefill=1.1", "cold_8k.cold.prefill_tok_s"),
    "slow_host_load": ("slow_host_load=2", "on-r1.3:host_reuse.repeat_after_evict.ttft_ms"),
    "corrupt_host_load": ("corrupt_host_load", "on-r1.3:quality.parity"),
    "partial_host_hits": ("partial_host_hits=0.6", "on-r1.3:host_reuse.repeat_after_evict.host_hit_fraction"),
    "stall_every": ("stall_every=20", "short_tail.alone.ttft_ms_tail"),  # reported, not gated
    "slow_decode": ("slow_decode=1.15", "decode_bs1.decode.tpot_ms"),
    "slowdown_per_request": ("slowdown_per_request=0.003", "short_tail.alone.ttft_ms_drift"),
    "late_token_flips": ("late_token_flips=200", "on-r1.3:quality.parity"),
    "slow_when_concurrent": ("slow_when_concurrent=1.3", "decode_bs4.decode.tpot_ms"),
}


@dataclass
class Night:
    index: int
    build: str
    run_exit: int
    compare_exit: int | None
    outcome: str | None
    wall_s: float
    baseline: str | None
    regressed: list[str] = field(default_factory=list)  # "variant:row" of gating rows that regressed
    unsure: list[str] = field(default_factory=list)  # the comparison's reasons when not PASS


@dataclass
class Series:
    name: str
    fault: str | None
    meant: str | None
    nights: list[Night] = field(default_factory=list)

    @property
    def judged(self) -> list[Night]:
        return [n for n in self.nights if n.build != "healthy-first"]

    def counts(self) -> dict[str, int]:
        out = {"PASS": 0, "FAIL": 0, "INCONCLUSIVE": 0, "other": 0}
        for n in self.judged:
            out[n.outcome if n.outcome in out else "other"] += 1
        return out

    def caught_by_meant(self) -> int:
        return sum(1 for n in self.judged if n.outcome == "FAIL" and self.meant in n.regressed)

    def met(self) -> bool:
        c, n = self.counts(), len(self.judged)
        if self.fault is None:
            return c["FAIL"] == 0 and c["PASS"] >= 0.95 * n
        return self.caught_by_meant() == n


def harness(*args: str) -> list[str]:
    return [sys.executable, "-m", "harness", *args]


def env_for(build: str | None, time_scale: float | None) -> dict[str, str]:
    flags = []
    if time_scale is not None:
        flags += ["--sim-time-scale", f"{time_scale:g}"]
    if build:
        flags += ["--sim-fault", build]
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    env = dict(os.environ, PYTHONPATH=path)
    env["HARNESS_SIM_BUILD"] = " ".join(flags)
    return env


def _own_run(log: Path, results_dir: Path) -> Path | None:
    """The run folder a night's log names (its first "run PATH" line): with --jobs several nights
    write into one results folder at once, so the newest folder may be another night's."""
    for line in log.read_text(errors="replace").splitlines():
        m = re.search(r"\] run (\S+) \(", line)
        if m and Path(m.group(1)).is_dir():
            return Path(m.group(1))
    return None


def one_night(scenario: Path, folder: Path, index: int, fault: str | None, args: argparse.Namespace) -> Night:
    results_dir = folder / "results"
    log = folder / f"night{index:02d}.log"
    env = env_for(fault, args.time_scale)
    only = [a for v in args.only for a in ("--only", v)]
    t0 = time.monotonic()
    with log.open("w") as out:
        run = subprocess.run(
            harness("run", str(scenario), *only, "--no-report", "--results-dir", str(results_dir)),
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
        )
        run_dir = _own_run(log, results_dir)
        cmp_exit = outcome = baseline = None
        regressed: list[str] = []
        unsure: list[str] = []
        if run_dir is not None:
            cmp = subprocess.run(
                harness("compare", str(run_dir), "--baseline", "latest", "--results-dir", str(results_dir)),
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=ROOT,
            )
            cmp_exit = cmp.returncode
            path = run_dir / "comparison.json"
            if path.exists():
                data = json.loads(path.read_text())
                outcome = data.get("verdict")
                baseline = (data.get("baseline") or {}).get("run_id")
                regressed = [
                    f"{m['variant']}:{_row_name(m)}"
                    for m in data.get("metrics", [])
                    if m.get("gating") and m.get("state") == "regression"
                ]
                unsure = [] if outcome == "PASS" else list(data.get("reasons") or [])[:6]
    build = ("healthy-first" if index == 0 else "healthy") if fault is None else fault
    return Night(
        index, build, run.returncode, cmp_exit, outcome, round(time.monotonic() - t0, 1), baseline, regressed, unsure
    )


def _row_name(m: dict) -> str:
    return f"{m['workload']}.{m['metric']}" if m["phase"] == "*" else f"{m['workload']}.{m['phase']}.{m['metric']}"


def _matches(meant: str, regressed: list[str]) -> bool:
    variant, _, row = meant.rpartition(":")
    return any(r.endswith(":" + row) and (not variant or r.startswith(variant + ":")) for r in regressed)


def _seed_series(name: str, out: Path, args: argparse.Namespace) -> Series:
    """A series whose first night is the copy of ``--baseline-from``."""
    folder = out / name
    dest = folder / "results" / args.baseline_from.parent.name / args.baseline_from.name
    if not dest.exists():
        shutil.copytree(args.baseline_from, dest)
    fault, meant = FAULTS.get(name, (None, None))
    return Series(name, fault, meant)


def run_parallel(names: list[str], scenario: Path, out: Path, args: argparse.Namespace) -> list[Series]:
    """Every series' nights, ``--jobs`` at once (see the module docstring)."""
    series = [_seed_series(n, out, args) for n in names]
    lock = threading.Lock()
    hogs = [subprocess.Popen([sys.executable, "-c", HOG]) for _ in range(args.burn)]

    def one(s: Series, i: int) -> None:
        night = one_night(scenario, out / s.name, i, s.fault, args)
        if s.meant is not None and _matches(s.meant, night.regressed):
            night.regressed.append(s.meant)
        with lock:
            s.nights.append(night)
            _print_night(s.name, night)

    try:
        with ThreadPoolExecutor(max_workers=args.jobs) as pool:
            futures = []
            for i in range(1, args.nights + 1):
                for s in series:
                    futures.append(pool.submit(one, s, i))
                    time.sleep(args.stagger)  # starts spread out: the nights' heavy phases interleave
            for f in futures:
                f.result()
    finally:
        for h in hogs:
            h.kill()
            h.wait()
    for s in series:
        s.nights.sort(key=lambda n: n.index)
    return series


def run_series(name: str, scenario: Path, out: Path, args: argparse.Namespace) -> Series:
    folder = out / name
    folder.mkdir(parents=True, exist_ok=True)
    fault, meant = FAULTS.get(name, (None, None))
    s = Series(name, fault, meant)
    hogs = [subprocess.Popen([sys.executable, "-c", HOG]) for _ in range(args.burn if fault is None else 0)]
    try:
        if args.baseline_from is not None:  # a healthy night already run: its copy is the first night
            dest = folder / "results" / args.baseline_from.parent.name / args.baseline_from.name
            if not dest.exists():
                shutil.copytree(args.baseline_from, dest)
        else:
            s.nights.append(one_night(scenario, folder, 0, None, args))  # the first healthy night
            _print_night(name, s.nights[-1])
        for i in range(1, args.nights + 1):
            night = one_night(scenario, folder, i, fault, args)
            if meant is not None and _matches(meant, night.regressed):
                night.regressed.append(meant)  # caught by the row meant to catch it
            s.nights.append(night)
            _print_night(name, night)
    finally:
        for h in hogs:
            h.kill()
            h.wait()
    return s


def _print_night(name: str, n: Night) -> None:
    print(
        f"[{name}] night {n.index} {n.build}: run exit {n.run_exit}, compare {n.outcome} ({n.compare_exit}) "
        f"vs {n.baseline}, {n.wall_s:.0f} s; regressed: {', '.join(n.regressed) or '-'}"
        + (f"; reasons: {' | '.join(n.unsure[:3])}" if n.unsure and n.outcome != "FAIL" else ""),
        flush=True,
    )


def table(series: list[Series]) -> str:
    lines = [
        "| series | fault (build) | row meant to catch it | nights | PASS | FAIL | INCONCLUSIVE | FAIL by that row | median night s | claim met |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for s in series:
        c = s.counts()
        walls = sorted(n.wall_s for n in s.nights)
        med = walls[len(walls) // 2] if walls else 0
        caught = "-" if s.meant is None else f"{s.caught_by_meant()} of {len(s.judged)}"
        lines.append(
            f"| {s.name} | {s.fault or 'healthy'} | {s.meant or '-'} | {len(s.judged)} | {c['PASS']} | {c['FAIL']} | "
            f"{c['INCONCLUSIVE']} | {caught} | {med:.0f} | {'yes' if s.met() else 'NO'} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--scenario", type=Path, default=DEFAULT_SCENARIO)
    ap.add_argument("--series", action="append", help="healthy, a fault series name, or all (repeatable)")
    ap.add_argument("--nights", type=int, default=10, help="judged nights per series (after the first healthy one)")
    ap.add_argument("--burn", type=int, default=0, help="CPU burners during the healthy series")
    ap.add_argument("--time-scale", type=float, default=None, help="--sim-time-scale as a build flag (every night)")
    ap.add_argument("--only", action="append", default=None, help="variants to run (default: off, on-r1.3)")
    ap.add_argument("--out", type=Path, default=None, help="folder for runs and logs (default: a new one in /tmp)")
    ap.add_argument("--json", action="store_true", help="print the nights as JSON too")
    ap.add_argument(
        "--baseline-from",
        type=Path,
        default=None,
        help="a healthy run folder copied into each fault series as its first night (instead of running one)",
    )
    ap.add_argument("--jobs", type=int, default=1, help="nights at once, over every series (needs --baseline-from)")
    ap.add_argument("--stagger", type=float, default=20.0, help="seconds between two nights' starts with --jobs")
    args = ap.parse_args(argv)
    if args.jobs > 1 and args.baseline_from is None:
        ap.error("--jobs needs --baseline-from (the series' shared first night)")
    args.only = args.only or ["off", "on-r1.3"]
    names = args.series or ["healthy"]
    if "all" in names:
        names = ["healthy", *FAULTS]
    unknown = [n for n in names if n != "healthy" and n not in FAULTS]
    if unknown:
        ap.error(f"unknown series {unknown}; known: healthy, {', '.join(FAULTS)}")
    out = args.out or Path(tempfile.mkdtemp(prefix="nightly_proof_"))
    out.mkdir(parents=True, exist_ok=True)
    print(f"runs and logs under {out}", flush=True)
    if args.jobs > 1:
        done = run_parallel(names, args.scenario, out, args)
    else:
        done = [run_series(n, args.scenario, out, args) for n in names]
    print(table(done))
    if args.json:
        print(json.dumps([{**asdict(s), "counts": s.counts(), "met": s.met()} for s in done], indent=1))
    return 0 if all(s.met() for s in done) else 1


if __name__ == "__main__":
    sys.exit(main())

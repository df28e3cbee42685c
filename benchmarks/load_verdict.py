"""Does README's main command give the same verdict on an idle and on a saturated machine?

Runs ``harness run SCENARIO`` (default: scenarios/sim_smoke.yaml, README's main command) first
``--idle`` times on its own, then ``--n`` times while ``--hogs`` CPU hogs (``python -c 'while 1:
pass'``) and ``--copies`` other copies of the same command, each restarted as soon as it ends, run
concurrently. For each measured run it reads the exit code and the run's expectations.json, and
reports how many runs exited 0 and the min / median / max of every numeric check's measured
value (plus any ``--figure VARIANT:METRIC``, read from the variants' summaries like a check), as a
Markdown table. The copies' own runs that finished meanwhile are reported too (rows
"background": more samples under the same load; not counted in the exit code). Every run folder,
report and log goes under ``--out`` (default under /tmp), never into the repository. The runs use
the harness of the checkout this script is in (PYTHONPATH), so a copy of the tree tests itself.

    .venv/bin/python benchmarks/load_verdict.py                 # N=20 loaded, 3 idle: ~25 min on 2 cores
    .venv/bin/python benchmarks/load_verdict.py --n 5 --idle 2 --json

Exit 0 when every measured run (idle and loaded) exited 0, else 1.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from harness.analysis.expectations import lookup_metric  # noqa: E402
from harness.store import results  # noqa: E402

DEFAULT_FIGURES = ("on-r2:parallel_prefixes.second_pass_speedup", "off:parallel_prefixes.second_pass_speedup")
HOG = "while 1: pass"
STOP_TIMEOUT_S = 60  # a copy's harness gets this long after SIGINT to stop its server


def harness_command() -> list[str]:
    """The venv's ``harness`` script (README's command), else ``python -m harness``."""
    exe = Path(sys.executable).with_name("harness")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "harness"]


def child_env() -> dict[str, str]:
    """The harness of this checkout first on the path (a copy of the tree runs its own code)."""
    return dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p))


def run_command(scenario: Path, folder: Path) -> list[str]:
    return [
        *harness_command(),
        "run",
        str(scenario),
        "--results-dir",
        str(folder / "results"),
        "--reports-dir",
        str(folder / "reports"),
    ]


@dataclass
class RunResult:
    phase: str
    index: int
    exit_code: int
    wall_s: float
    loadavg_1m: float
    run_dir: str | None
    values: dict[str, float] = field(default_factory=dict)  # check or figure -> measured value
    failed_checks: list[str] = field(default_factory=list)


def loadavg_1m() -> float:
    try:
        return float(Path("/proc/loadavg").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return float("nan")


def find_run_dir(folder: Path) -> Path | None:
    runs = sorted((folder / "results").glob("*/*/manifest.json"))
    return runs[-1].parent if runs else None


def read_values(run_dir: Path, figures: list[str]) -> tuple[dict[str, float], list[str]]:
    """Numeric check values from expectations.json and the extra figures from the summaries."""
    values: dict[str, float] = {}
    failed: list[str] = []
    checked: set[str] = set()
    exp = run_dir / "expectations.json"
    if exp.exists():
        for row in json.loads(exp.read_text()).get("checks", []):
            checked.add(f"{row.get('variant')}:{row.get('metric')}")
            actual = row.get("actual")
            if isinstance(actual, (int, float)) and not isinstance(actual, bool):
                values[row["check"]] = float(actual)
            if row.get("failed"):
                failed.append(f"{row['check']} (actual {row.get('actual')!r})")
    for fig in figures:
        if fig in checked:
            continue  # already a check's row
        variant, _, metric = fig.partition(":")
        folder = run_dir / results.safe_name(variant)
        summary = _load(folder / "summary.json")
        status = _load(folder / "status.json")
        v = lookup_metric(metric, summary, status)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            values.setdefault(fig, float(v))
    return values, failed


def _load(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def measured_run(phase: str, index: int, scenario: Path, out: Path, figures: list[str]) -> RunResult:
    folder = out / phase / f"{index:02d}"
    folder.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    with open(folder / "output.txt", "wb") as log:
        rc = subprocess.run(
            run_command(scenario, folder), cwd=ROOT, env=child_env(), stdout=log, stderr=subprocess.STDOUT
        ).returncode
    wall = time.monotonic() - t0
    run_dir = find_run_dir(folder)
    values, failed = read_values(run_dir, figures) if run_dir else ({}, [])
    r = RunResult(phase, index, rc, round(wall, 1), loadavg_1m(), str(run_dir) if run_dir else None, values, failed)
    note = f" FAILED: {'; '.join(failed)}" if failed else ""
    print(
        f"[{phase} {index + 1}] exit {rc} in {wall:.0f} s, load {r.loadavg_1m:.1f}: "
        + ", ".join(f"{k} = {_num(v)}" for k, v in values.items())
        + note,
        flush=True,
    )
    return r


class Load:
    """CPU hogs plus copies of the command restarted in a loop; each in its own session, stopped
    by process group at the end (a copy gets SIGINT first so it stops its servers)."""

    def __init__(self, hogs: int, copies: int, scenario: Path, out: Path) -> None:
        self.hogs = hogs
        self.copies = copies
        self.scenario = scenario
        self.out = out
        self._stop = threading.Event()
        self._hog_procs: list[subprocess.Popen] = []
        self._copy_procs: dict[int, subprocess.Popen] = {}
        self._threads: list[threading.Thread] = []
        self.finished: list[tuple[Path, int, float]] = []  # (folder, exit code, wall s) of whole copy runs
        self._lock = threading.Lock()

    def __enter__(self) -> "Load":
        for _ in range(self.hogs):
            self._hog_procs.append(subprocess.Popen([sys.executable, "-c", HOG], start_new_session=True))
        for c in range(self.copies):
            t = threading.Thread(target=self._copy_loop, args=(c,), daemon=True)
            t.start()
            self._threads.append(t)
        return self

    def _copy_loop(self, c: int) -> None:
        k = 0
        while not self._stop.is_set():
            folder = self.out / "background" / f"copy{c}-{k:03d}"
            folder.mkdir(parents=True, exist_ok=True)
            t0 = time.monotonic()
            with open(folder / "output.txt", "wb") as log:
                p = subprocess.Popen(
                    run_command(self.scenario, folder),
                    cwd=ROOT,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=child_env(),
                    start_new_session=True,
                )
                with self._lock:
                    self._copy_procs[c] = p
                rc = p.wait()
            if not self._stop.is_set():  # a copy stopped at the end is not a result
                with self._lock:
                    self.finished.append((folder, rc, time.monotonic() - t0))
            k += 1

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        with self._lock:
            copies = list(self._copy_procs.values())
        for p in copies:
            _signal_group(p, signal.SIGINT)
        deadline = time.monotonic() + STOP_TIMEOUT_S
        for p in copies:
            try:
                p.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                # the harness did not stop in time: its servers run in their own sessions, so
                # take them down by the process tree before the group
                for child in _descendants(p.pid):
                    _kill(child)
                _signal_group(p, signal.SIGKILL)
                p.wait()
        for p in self._hog_procs:
            _signal_group(p, signal.SIGKILL)
            p.wait()
        for t in self._threads:
            t.join(5)


def _descendants(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return []


def _kill(proc: psutil.Process) -> None:
    try:
        proc.kill()
    except psutil.Error:
        pass


def _signal_group(p: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(p.pid, sig)  # start_new_session: the pid is the group id
    except ProcessLookupError:
        pass


def background_results(load: Load, figures: list[str]) -> list[RunResult]:
    """The copies' own finished runs: more samples of the same command under the same load."""
    out = []
    for i, (folder, rc, wall) in enumerate(load.finished):
        run_dir = find_run_dir(folder)
        values, failed = read_values(run_dir, figures) if run_dir else ({}, [])
        out.append(
            RunResult(
                "background", i, rc, round(wall, 1), float("nan"), str(run_dir) if run_dir else None, values, failed
            )
        )
    return out


def stats_rows(runs: list[RunResult]) -> list[tuple[str, int, float, float, float]]:
    keys: list[str] = []
    for r in runs:
        keys += [k for k in r.values if k not in keys]
    rows = []
    for k in keys:
        vs = [r.values[k] for r in runs if k in r.values]
        rows.append((k, len(vs), min(vs), statistics.median(vs), max(vs)))
    return rows


def _num(v: float) -> str:
    return f"{v:.0f}" if abs(v) >= 1000 else f"{v:.3g}"


def markdown(phases: dict[str, list[RunResult]], context: dict[str, str]) -> str:
    lines = [
        "| runs | exit 0 | wall s (median) | load 1 min (median) | value | n | min | median | max |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for phase, runs in phases.items():
        if not runs:
            continue
        ok = sum(r.exit_code == 0 for r in runs)
        loads = [r.loadavg_1m for r in runs if r.loadavg_1m == r.loadavg_1m]  # NaN: not sampled
        head = (
            f"{phase}: {len(runs)}",
            f"{ok}/{len(runs)}",
            f"{statistics.median(r.wall_s for r in runs):.0f}",
            f"{statistics.median(loads):.1f}" if loads else "",
        )
        rows = stats_rows(runs) or [("(none)", 0, float("nan"), float("nan"), float("nan"))]
        for i, (k, n, lo, med, hi) in enumerate(rows):
            cells = head if i == 0 else ("", "", "", "")
            lines.append(f"| {' | '.join(cells)} | `{k}` | {n} | {_num(lo)} | {_num(med)} | {_num(hi)} |")
    lines.append("")
    lines += [f"{k}: {v}" for k, v in context.items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scenario", default=str(ROOT / "scenarios" / "sim_smoke.yaml"))
    ap.add_argument("--n", type=int, default=20, help="runs under load (default 20)")
    ap.add_argument("--idle", type=int, default=3, help="idle baseline runs first (default 3)")
    ap.add_argument("--hogs", type=int, default=2, help="CPU hogs during the loaded runs (default 2)")
    ap.add_argument("--copies", type=int, default=2, help="concurrent copies of the command (default 2)")
    ap.add_argument(
        "--figure",
        action="append",
        default=None,
        metavar="VARIANT:METRIC",
        help=f"a figure to report besides the checks (default: {', '.join(DEFAULT_FIGURES)})",
    )
    ap.add_argument("--out", default=None, help="where runs go (default /tmp/load_verdict/<time>)")
    ap.add_argument("--json", action="store_true", help="also write results.json into --out")
    args = ap.parse_args(argv)

    out = Path(args.out or f"/tmp/load_verdict/{time.strftime('%Y%m%dT%H%M%S')}").resolve()
    out.mkdir(parents=True, exist_ok=True)
    scenario = Path(args.scenario).resolve()
    figures = list(args.figure or DEFAULT_FIGURES)
    print(
        f"load_verdict: {scenario.name}, {args.idle} idle + {args.n} loaded runs "
        f"({args.hogs} hogs, {args.copies} copies), {os.cpu_count()} CPUs, out {out}",
        flush=True,
    )

    phases: dict[str, list[RunResult]] = {"idle": [], "loaded": [], "background": []}
    for i in range(args.idle):
        phases["idle"].append(measured_run("idle", i, scenario, out, figures))
    load = Load(args.hogs, args.copies, scenario, out)
    with load:
        if args.n:
            time.sleep(5)  # let the copies get going
        for i in range(args.n):
            phases["loaded"].append(measured_run("loaded", i, scenario, out, figures))
    phases["background"] = background_results(load, figures)

    context = {
        "command": " ".join(run_command(scenario, Path("<out>/<phase>/<i>"))),
        "machine": f"{os.cpu_count()} CPUs",
        "load": f"{args.hogs} CPU hogs + {args.copies} copies of the command (the 'background' rows: their "
        "runs that finished while the measured ones ran)",
    }
    table = markdown(phases, context)
    print()
    print(table)
    (out / "table.md").write_text(table + "\n")
    if args.json:
        (out / "results.json").write_text(
            json.dumps(
                {
                    "context": context,
                    "runs": {p: [asdict(r) for r in rs] for p, rs in phases.items()},
                },
                indent=2,
            )
        )
    every = phases["idle"] + phases["loaded"]
    return 0 if all(r.exit_code == 0 for r in every) else 1


if __name__ == "__main__":
    sys.exit(main())

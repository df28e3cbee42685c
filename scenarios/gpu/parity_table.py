#!/usr/bin/env python3
"""One line per run and a table over the runs of scenarios/gpu/h200_parity_control.yaml.

    python3 scenarios/gpu/parity_table.py RESULTS_ROOT [--out FILE]

A line per run: OK/BAD (stock ON not FAIL and broken ON FAIL with the patch active), the run's
seed, the arms' states and start-to-ready seconds (off/on-r2/on-r2-broken), each ON arm's verdict
with its sign test against the control (p, keys where ON / the control strayed further, ties).

RESULTS_ROOT holds the runs (any depth; a run folder has manifest.json), e.g. results/parity
with run-1/h200_parity_control/<run_id>/ ... from scenarios/gpu/run_parity_control.sh. Reads only
stored files: each ON arm's parity.json (the verdict, the sign test against the OFF-vs-OFF
control), status.json, and the broken arm's server.log (the patch must say it was active).
Standard library only, so it runs on the GPU host and here alike.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

STOCK, BROKEN, BASELINE = "on-r2", "on-r2-broken", "off"
PATCH_LINE = "HICACHE_CORRUPT_LOAD active"
FIRST_LOAD_LINE = "HICACHE_CORRUPT_LOAD: corrupted the first host-to-device load"


def _json(path: Path) -> dict:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def _log_has(vdir: Path, needle: str) -> bool:
    for log in sorted(vdir.glob("server*.log")):
        try:
            if needle in log.read_text(encoding="utf-8", errors="replace"):
                return True
        except OSError:
            continue
    return False


def arm(run: Path, name: str) -> dict:
    """What one variant of one run says: state, parity verdict and its numbers."""
    vdir = run / name
    status = _json(vdir / "status.json")
    parity = _json(vdir / "parity.json")
    floor = parity.get("floor") or {}
    out = {
        "state": status.get("state") or "missing",
        "cause": status.get("cause"),
        "ready_s": status.get("ready_s"),
        "verdict": parity.get("verdict") or ("-" if name == BASELINE else "none"),
        "p": floor.get("p_value"),
        "on_worse": floor.get("on_worse"),
        "control_worse": floor.get("control_worse"),
        "ties": floor.get("ties"),
        "host_keys": parity.get("host_keys"),
        "host_hits": parity.get("host_hit_requests"),
        "reason": parity.get("reason") or "",
    }
    if name == BROKEN:
        out["patch_active"] = _log_has(vdir, PATCH_LINE)
        out["patch_loaded"] = _log_has(vdir, FIRST_LOAD_LINE)
    return out


def find_runs(root: Path) -> list[Path]:
    runs = [m.parent for m in root.rglob("manifest.json") if m.parent.parent.name == "h200_parity_control"
            or _json(m).get("scenario", {}).get("name") == "h200_parity_control"]
    return sorted(set(runs))


def _p(x) -> str:
    return "-" if x is None else (f"{x:.2g}" if x < 0.01 else f"{x:.2f}")


def _test(a: dict) -> str:
    if a["on_worse"] is None:
        return "no test"
    return f"p={_p(a['p'])}, worse {a['on_worse']}/{a['control_worse']}, ties {a['ties']}"


def run_line(i: int, run: Path) -> tuple[str, dict]:
    m = _json(run / "manifest.json")
    arms = {n: arm(run, n) for n in (BASELINE, STOCK, BROKEN)}
    s, b = arms[STOCK], arms[BROKEN]
    patch = ("patch active" if b.get("patch_active") else "PATCH NOT SEEN in server.log") + \
            (", loads corrupted" if b.get("patch_loaded") else "")
    ok_stock = s["verdict"] not in ("FAIL", "none")
    ok_broken = b["verdict"] == "FAIL" and b.get("patch_active")
    flag = "OK " if ok_stock and ok_broken else "BAD"
    states = "/".join(arms[n]["state"] for n in (BASELINE, STOCK, BROKEN))
    ready = "/".join("-" if arms[n]["ready_s"] is None else f"{arms[n]['ready_s']:.0f}"
                     for n in (BASELINE, STOCK, BROKEN))
    line = (f"{flag} run {i:>2} seed {m.get('seed', '?'):>3} [{states}, ready {ready} s] "
            f"stock {s['verdict']} ({_test(s)}; {s['host_keys']} host keys) | "
            f"broken {b['verdict']} ({_test(b)}; {patch})  {run}")
    return line, arms


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("root", type=Path)
    ap.add_argument("--out", type=Path, default=None, help="also write the text here")
    args = ap.parse_args(argv)
    runs = find_runs(args.root)
    lines = [f"parity control: {len(runs)} run(s) under {args.root}"]
    stock, broken, bad = Counter(), Counter(), 0
    rows = []
    for i, run in enumerate(runs, 1):
        line, arms = run_line(i, run)
        lines.append(line)
        stock[arms[STOCK]["verdict"]] += 1
        broken[arms[BROKEN]["verdict"]] += 1
        bad += line.startswith("BAD")
        rows.append(arms)
    n = len(runs)
    lines.append("")
    lines.append(f"{'arm':14} " + " ".join(f"{v:>13}" for v in ("PASS", "WARN", "INCONCLUSIVE", "NOT_EXERCISED",
                                                                   "FAIL", "none")))
    for name, c in (("on-r2 (stock)", stock), ("on-r2-broken", broken)):
        lines.append(f"{name:14} " + " ".join(f"{c.get(v, 0):>13}" for v in ("PASS", "WARN", "INCONCLUSIVE",
                                                                              "NOT_EXERCISED", "FAIL", "none")))
    if n:
        lines.append("")
        lines.append(f"false FAIL rate (stock ON judged FAIL): {stock.get('FAIL', 0)}/{n}; "
                     f"detection (broken ON judged FAIL): {broken.get('FAIL', 0)}/{n}; "
                     f"runs not as expected: {bad}/{n}")
        not_active = sum(1 for r in rows if not r[BROKEN].get("patch_active"))
        if not_active:
            lines.append(f"WARNING: {not_active} run(s) without '{PATCH_LINE}' in the broken arm's log: that arm "
                         "ran unpatched sglang (make_broken_hicache.sh output not on its PYTHONPATH?)")
    text = "\n".join(lines)
    print(text)
    if args.out:
        args.out.write_text(text + "\n", encoding="utf-8")
    return 0 if n else 3


if __name__ == "__main__":
    sys.exit(main())

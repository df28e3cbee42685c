"""A stored run's host/storage-hit rooflines and "worse than off", recomputed from its records with
the checkout that runs this (no GPU): for runs made before `harness.measures.roofline` existed, or to see
what newer code says about an old run.

    python3 scenarios/gpu/roofline_of_run.py RUN_DIR [RUN_DIR ...]

Per variant: the platform (KV bytes per token from the preflight or the server's info, pinned
H2D from the run's `--probe`), then one line per hit phase -- achieved vs floor (median), the
ratio, the variant's own recompute, the queueing sglang reported (``meta_info.queue_time``, with
--enable-metrics; runs before the harness kept it show none) -- and at the end the run's "worse
than off" findings.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from harness.analysis.run_products import off_variant
from harness.analysis.summary import summarize
from harness.compare.runs import read_run, run_workload_kinds
from harness.store import results
from harness.store.records import RequestRecord
from harness.measures import roofline
from harness.store.summary import Summary


def _fmt(v) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:,.0f}" if abs(v) >= 1000 else f"{v:.3g}"
    return str(v)


def show(run_dir: Path) -> None:
    run = read_run(run_dir)
    probe = dict(run.manifest.probe) or None
    kinds = run_workload_kinds(run.manifest)
    summaries = {}
    print(f"== {run.scenario_name} {run.run_id}")
    for v in run.variants:
        info = json.loads(v.paths.server_info.read_text()) if v.paths.server_info.exists() else None
        plat = roofline.platform_for(probe, v.status.preflight, info)
        s = summarize(
            [RequestRecord.from_dict(d) for d in results.read_jsonl(v.paths.requests)], kinds, None, None, plat
        )
        summaries[v.name] = Summary.from_json(v.paths.summary, s)
        print(
            f"{v.name}: KV {_fmt(plat.kv_bytes_per_token)} B/token, H2D {_fmt(plat.h2d_gbs)} GB/s ({plat.h2d_source})"
        )
        for w, wd in (s.get("workloads") or {}).items():
            for p, pd in ((wd or {}).get("phases") or {}).items():
                r = (pd or {}).get("roofline")
                if r:
                    print(
                        f"  {w}.{p} ({r['tier']}, {'passes' if r['concurrent'] else 'requests'} n={r['n']}): "
                        f"achieved {_fmt(r['achieved_ms'])} ms, floor {_fmt(r['floor_ms'])} ms, "
                        f"ratio {_fmt(r['ratio'])}, own recompute {_fmt(r['recompute_ms'])} ms, "
                        f"queued {_fmt(r.get('queue_ms'))} ms (queue_time on {r.get('queue_reported', 0)} of "
                        f"{r['hit_requests']} hit requests)"
                    )
    worse = roofline.worse_than_off(summaries, off_variant(run.manifest))
    print("worse than off: " + ("; ".join(w.text for w in worse) if worse else "none"))


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args:
        print(__doc__, file=sys.stderr)
        return 2
    for a in args:
        show(Path(a))
    return 0


if __name__ == "__main__":
    sys.exit(main())

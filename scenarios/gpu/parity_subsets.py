"""Re-judge a stored run's token parity on smaller samples of its own quality records, with the
parity code of the checkout that runs this (no GPU): how few keys decide a broken build?

    python3 scenarios/gpu/parity_subsets.py RUN_DIR --on on-patched [--off off-stock] \
        [--samples 1,2] [--reasks 1,2]

For each (samples per task, re-asks per sample) pair it keeps the records of the first S samples
(index < S) of every task and the asks <= R -- the records a scenario with `samples_per_task: S`
and `reasks: R` would have sent, since samples and asks are drawn in order -- from the ON arm,
the OFF arm and the OFF-vs-OFF control, runs `evaluate_parity` on them, and prints one line:
the verdict, the keys it had (ON re-asks with host hits), and its reason. The full set is the
run's own verdict (the last line per arm when S and R are the run's sizes).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from harness.quality.parity import evaluate_parity


def rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def subset(records: list[dict], samples: int, reasks: int) -> list[dict]:
    return [r for r in records if int(r["index"]) < samples and int(r["ask"]) <= reasks]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run", type=Path, help="a run folder with <variant>/quality.jsonl")
    ap.add_argument("--on", required=True, action="append", help="the ON arm(s) to judge")
    ap.add_argument("--off", default="off", help="the OFF baseline arm (its control rows too)")
    ap.add_argument("--samples", default="1,2", help="samples per task to keep, comma-separated")
    ap.add_argument("--reasks", default="1,2", help="re-asks per sample to keep, comma-separated")
    ap.add_argument("--alpha", type=float, default=None, help="the parity test's alpha (default: the code's)")
    a = ap.parse_args(argv)
    off = rows(a.run / a.off / "quality.jsonl")
    kw = {} if a.alpha is None else {"alpha": a.alpha}
    for arm in a.on:
        on = rows(a.run / arm / "quality.jsonl")
        for s in (int(x) for x in a.samples.split(",")):
            for r in (int(x) for x in a.reasks.split(",")):
                rep = evaluate_parity(subset(on, s, r), subset(off, s, r), None, None, **kw).to_dict()
                print(
                    f"{arm}  samples_per_task={s} reasks={r}: {rep['verdict']}  "
                    f"host-hit keys {rep['host_keys']}, pairs {rep['pairs']}, "
                    f"control pairs {len(rep['control_comparisons'])}  -- {rep['reason'][:300]}"
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())

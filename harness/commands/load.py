"""``harness load RUN``: print the head and shape of a run's request and sample tables."""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd

from harness import results
from harness.exit_codes import ExitCode
from harness.frames import load_frames


def cli_main(args) -> int:
    try:
        req, smp = load_frames(Path(args.run))
    except results.ResultsError as exc:
        print(f"harness load: {exc}", file=sys.stderr)
        return ExitCode.BAD_INPUT
    with pd.option_context("display.width", 200, "display.max_columns", 14):
        print(f"requests: {req.shape[0]} rows x {req.shape[1]} columns")
        print(req.head(10).to_string())
        print()
        print(f"samples: {smp.shape[0]} rows x {smp.shape[1]} columns")
        print(smp.head(10).to_string())
    print("\nIn Python: from harness.frames import load_frames; requests_df, samples_df = load_frames(RUN)")
    return ExitCode.OK

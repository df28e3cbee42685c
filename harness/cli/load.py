"""``harness load RUN [--csv DIR] [--parquet DIR]``: a run's tables (`harness.api.load_run`:
requests, samples, quality, parity, summaries, derived, variants). Without a flag it prints each
table's shape and the head of the requests and samples; ``--csv DIR`` / ``--parquet DIR`` write
``DIR/<table>.csv`` / ``.parquet`` (Parquet needs pyarrow: one line, exit 2, when it is missing)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from harness.core.exit_codes import ExitCode
from harness.store import results

if TYPE_CHECKING:
    import pandas as pd


def add_parser(sub) -> None:
    s = sub.add_parser(
        "load",
        help="a run's tables (requests, samples, quality, parity, summaries): print "
        "their shapes and heads, or write them as CSV or Parquet files",
    )
    s.add_argument("run", help="run folder")
    s.add_argument("--csv", metavar="DIR", help="write each table as DIR/<table>.csv")
    s.add_argument("--parquet", metavar="DIR", help="write each table as DIR/<table>.parquet (needs pyarrow)")
    s.set_defaults(func=cli_main)


def cli_main(args) -> int:
    from harness.api import load_run, write_tables  # heavy (pandas): only when it runs

    try:
        run = load_run(Path(args.run))
    except results.ResultsError as exc:
        print(f"harness load: {exc}", file=sys.stderr)
        return ExitCode.BAD_INPUT
    tables = run.tables()
    targets = [
        (fmt, d) for fmt, d in (("csv", getattr(args, "csv", None)), ("parquet", getattr(args, "parquet", None))) if d
    ]
    if not targets:
        _print(run, tables)
        return ExitCode.OK
    for fmt, out_dir in targets:
        if fmt == "parquet" and not _has_parquet_engine():
            print("harness load --parquet needs pyarrow: pip install pyarrow", file=sys.stderr)
            return ExitCode.BAD_INPUT
        for path in write_tables(tables, Path(out_dir), fmt):
            print(path)
    return ExitCode.OK


def _has_parquet_engine() -> bool:
    return any(importlib.util.find_spec(m) is not None for m in ("pyarrow", "fastparquet"))


def _print(run, tables: dict[str, pd.DataFrame]) -> None:
    import pandas as pd  # heavy: only when it runs

    print(
        f"run {run.run_id} of {run.scenario}{' (SIMULATED)' if run.simulated else ''}"
        f"{'' if run.complete else ' (not complete)'}"
    )
    for name, df in tables.items():
        print(f"{name}: {df.shape[0]} rows x {df.shape[1]} columns")
    with pd.option_context("display.width", 200, "display.max_columns", 14):
        for name in ("requests", "samples"):
            print(f"\n{name}:")
            print(tables[name].head(10).to_string())
    print("\nIn Python: from harness.api import load_run; run = load_run(RUN); run.requests, run.samples, ...")

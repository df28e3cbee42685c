"""GitHub annotations for a compared run: one ``::error file=...,line=...`` per regression, failed
expectation and failing variant of its comparison.json, pointing at the scenario line that
declares the workload, the check or the variant (so the job's summary page links to it).

    python .github/scripts/annotate.py RUN_DIR    # after `harness compare RUN_DIR ...`

Reads through ``harness.api.load_comparison``; prints nothing when there is nothing to flag and
exits 0 either way (the job's last step decides pass or fail). A run without comparison.json is
reported as one ``::warning``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd

from harness.store import results
from harness.api import load_comparison
from harness.core.yaml_lines import line_for, load_yaml_text

FAILING_VARIANT_STATES = {"introduced_failure", "failed", "regression", "unexpected_failure"}


def _escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(text: str) -> str:
    return _escape_data(text).replace(":", "%3A").replace(",", "%2C")


def annotation(level: str, message: str, file: str | None = None, line: int | None = None,
               title: str | None = None) -> str:
    """One workflow command line, e.g. ``::error file=s.yaml,line=3,title=x::message``."""
    props = []
    if file:
        props.append(f"file={_escape_property(file)}")
        if line:
            props.append(f"line={line}")
    if title:
        props.append(f"title={_escape_property(title)}")
    return f"::{level}{' ' + ','.join(props) if props else ''}::{_escape_data(message)}"


def _relative(path: str | None) -> str | None:
    """The scenario's path relative to the workspace (GitHub links annotations by that path)."""
    if not path or not Path(path).is_absolute():
        return path
    try:
        return str(Path(path).relative_to(Path.cwd()))
    except ValueError:
        return path


class ScenarioLines:
    """Where the stored scenario declares a workload, a check or a variant (line 0: unknown)."""

    def __init__(self, manifest: dict):
        sc = manifest.get("scenario") or {}
        self.file = _relative(sc.get("path"))
        self.lines: dict = {}
        self.data: dict = {}
        try:
            loaded = load_yaml_text(sc.get("text") or "", self.file or "scenario.yaml")
            self.lines, self.data = loaded.lines, loaded.data if isinstance(loaded.data, dict) else {}
        except Exception:  # noqa: BLE001 - no line numbers then, the annotations still name the file
            pass

    def _index(self, block: str, match) -> int | None:
        for i, item in enumerate(self.data.get(block) or []):
            if match(item):
                return i
        return None

    def workload(self, name: str) -> int:
        i = self._index("workloads", lambda w: isinstance(w, dict) and (w.get("name") or w.get("kind")) == name)
        return line_for(self.lines, ("workloads", i)) if i is not None else 0

    def check(self, text: str) -> int:
        checks = (self.data.get("expectations") or {}).get("checks") or []
        for i, c in enumerate(checks):
            if isinstance(c, str) and c.strip() == text.strip():
                return line_for(self.lines, ("expectations", "checks", i))
        return 0

    def variant(self, name: str) -> int:
        i = self._index("variants", lambda v: isinstance(v, dict) and v.get("name") == name)
        return line_for(self.lines, ("variants", i, "name")) if i is not None else 0


def annotations(run_dir: Path) -> list[str]:
    comp = load_comparison(run_dir)
    where = ScenarioLines(results.read_json(Path(run_dir) / results.MANIFEST))
    sim = " [SIMULATED]" if comp.simulated else ""
    out = []
    for m in comp.regressions.itertuples(index=False):
        change = "" if m.change != m.change else f" {m.change * 100:+.1f}%"  # NaN-safe
        out.append(annotation(
            "error", f"{m.variant}: {m.workload}.{m.phase}.{m.metric} p50 {m.baseline_p50:.4g} -> "
            f"{m.candidate_p50:.4g} {m.unit}{change} (threshold {m.threshold * 100:.0f}%, {m.test})",
            where.file, where.workload(str(m.workload)), title=f"regression: {m.variant} {m.metric}{sim}"))
    for e in comp.expectations.itertuples(index=False):
        if e.failed is not pd.NA and bool(e.failed):
            out.append(annotation("error", f"{e.variant}: {e.check}: {e.outcome} ({e.reason})", where.file,
                                  where.check(str(e.check)), title=f"expectation failed: {e.variant}{sim}"))
    for v in comp.variants.itertuples(index=False):
        if v.state in FAILING_VARIANT_STATES:
            out.append(annotation("error", f"{v.variant}: {v.state}: {v.note}", where.file, where.variant(str(v.variant)),
                                  title=f"variant {v.state}: {v.variant}{sim}"))
    return out


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    try:
        lines = annotations(Path(argv[0]))
    except results.ResultsError as exc:
        print(annotation("warning", f"no comparison to annotate: {exc}"))
        return 0
    for line in lines:
        print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

"""The one table a variant's figures are read from by the report and compare alike: its stored
summary.json, with every figure it lacks recomputed from its requests.jsonl by the same code that
wrote it (`harness.analysis.summary.summarize`).

An old run's summary predates what was added since (p95, the per-repeat figures, a new metric of
`harness.measures.metrics`, a new derived figure of a kind): here it gets them from its own
records, so a figure added later shows for old runs in the report (value and tested delta) and
in compare (rows) alike, from one source. A stored figure is never replaced: the run's own
summary was written with what only the run had (its workload configs, platform, pools), so a
recomputed value only fills a gap. A variant without requests.jsonl keeps its summary as stored.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from harness.analysis.summary import summarize
from harness.store import results
from harness.store.records import RequestRecord
from harness.store.run_folder import LoadedVariant
from harness.store.summary import Summary


def _fill(stored: dict[str, Any], computed: Mapping[str, Any]) -> None:
    """Every key of ``computed`` that ``stored`` lacks or holds null, recursively (in place)."""
    for k, v in computed.items():
        have = stored.get(k)
        if have is None:
            stored[k] = copy.deepcopy(v)
        elif isinstance(have, dict) and isinstance(v, Mapping):
            _fill(have, v)


def variant_figures(variant: LoadedVariant, names_to_kinds: Mapping[str, str]) -> Summary | None:
    """The variant's summary with the figures it lacks computed from its records (see the module
    docstring); None without a summary; the summary as stored when it measured nothing or has no
    request records. ResultsError for rows that are not request records."""
    summary = variant.summary
    if summary is None or summary.workloads is None or not variant.paths.requests.exists():
        return summary
    try:
        records = [RequestRecord.from_dict(d) for d in results.read_jsonl(variant.paths.requests)]
    except (TypeError, ValueError, AttributeError, KeyError) as exc:
        raise results.ResultsError(
            f"{variant.paths.requests}: rows that are not request records ({type(exc).__name__}: {exc})"
        ) from None
    if not records:
        return summary
    computed = summarize(records, names_to_kinds)["workloads"]
    raw = copy.deepcopy(dict(summary.raw))
    workloads = raw["workloads"]
    for wl, w in computed.items():
        if wl in workloads:  # a workload the summary left out (failed before it) stays out
            _fill(workloads[wl], w)
    return Summary.from_json(variant.paths.summary, raw)

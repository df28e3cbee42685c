"""The run-level products a run folder holds beside its variants, read back typed for their
readers (the report, ``harness show``): ``cost.json`` (`StoredCost`, written by
`harness.analysis.cost`), ``comparison.json`` (`StoredComparison`, by ``harness compare``) and
``verdict.json`` (`StoredVerdict`, by `harness.analysis.run_products`).

Each ``read_*`` gives None without the file and raises `results.ResultsError` naming a file that
is not a JSON object. Inside, lenient as their readers always were: a key an older harness did
not write reads as None (a mapping as {}), stored values keep their type, and ``raw`` is the
stored object (what the report's comparison section shows as written).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.store import results
from harness.store.stored_fields import from_keys

Json = Mapping[str, Any]

COST_FILE = "cost.json"
COMPARISON_FILE = "comparison.json"
VERDICT_FILE = "verdict.json"


def _obj(v: Any) -> Json:
    return v if isinstance(v, Mapping) else {}


def _optional(path: Path) -> Json | None:
    return results.read_json_object(path) if path.exists() else None


@dataclass(frozen=True)
class VariantCost:
    """One variant's cost as stored (`harness.analysis.cost.VariantCost`)."""

    usd_per_hour: Any
    gpu_usd_per_hour: Any
    host_usd_per_hour: Any
    storage_usd_per_hour: Any
    goodput_tok_s: Any
    usd_per_mtok: Any
    meets_slo: Any

    @classmethod
    def from_json(cls, data: Any) -> VariantCost | None:
        if not data or not isinstance(data, Mapping):
            return None
        return from_keys(cls, data)


@dataclass(frozen=True)
class StoredCost:
    variants: Mapping[str, VariantCost]  # the priced variants
    cheapest: Any  # the cheapest variant that met the SLO (None: none did)
    text: Any  # the one line that says so
    prices: Any
    raw: Json

    @classmethod
    def from_json(cls, data: Json) -> StoredCost:
        priced = {str(n): c for n, v in _obj(data.get("variants")).items() if (c := VariantCost.from_json(v))}
        return from_keys(cls, data, variants=priced, raw=data)


def read_cost(root: Path) -> StoredCost | None:
    """A run folder's cost.json, typed; None without one."""
    data = _optional(Path(root) / COST_FILE)
    return None if data is None else StoredCost.from_json(data)


@dataclass(frozen=True)
class StoredComparison:
    """What readers show of comparison.json: the verdict, the baseline, the counts, the reasons,
    the advice, what changed between the nights, and the metric rows."""

    verdict: Any
    baseline_run_id: Any
    baseline_path: Any
    counts: Json  # {regression | improved | ...: n}
    reasons: tuple[str, ...]
    advice: str
    changes: tuple[str, ...]  # the ranked texts of what differs between the two nights
    metrics: tuple[Json, ...]  # the metric rows (variant, workload, phase, metric, change, state)
    raw: Json

    @classmethod
    def from_json(cls, data: Json) -> StoredComparison:
        base = _obj(data.get("baseline"))
        reasons = data.get("reasons")
        return cls(
            verdict=data.get("verdict"),
            baseline_run_id=base.get("run_id"),
            baseline_path=base.get("path"),
            counts=_obj(data.get("counts")),
            reasons=tuple(str(r) for r in reasons) if isinstance(reasons, list) else (),
            advice=str(data.get("advice") or ""),
            changes=tuple(str(x.get("text")) for x in data.get("changes") or () if isinstance(x, Mapping)),
            metrics=tuple(m for m in data.get("metrics") or () if isinstance(m, Mapping)),
            raw=data,
        )


def read_comparison(root: Path) -> StoredComparison | None:
    """A run folder's comparison.json, typed; None without one."""
    data = _optional(Path(root) / COMPARISON_FILE)
    return None if data is None else StoredComparison.from_json(data)


@dataclass(frozen=True)
class StoredVerdict:
    outcome: Any
    variants: Mapping[Any, Any]  # {variant: its outcome}
    raw: Json

    @classmethod
    def from_json(cls, data: Json) -> StoredVerdict:
        outcomes = {v.get("variant"): v.get("outcome") for v in data.get("variants") or () if isinstance(v, Mapping)}
        return cls(data.get("outcome"), outcomes, data)


def read_verdict(root: Path) -> StoredVerdict | None:
    """A run folder's verdict.json, typed; None without one."""
    data = _optional(Path(root) / VERDICT_FILE)
    return None if data is None else StoredVerdict.from_json(data)

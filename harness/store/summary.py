"""A variant's summary.json as typed, read-only objects: `Summary` → `WorkloadSummary` →
`PhaseSummary` → `Stats` (the statistic keys of `harness.store.stats`).

`read_summary` brings an older file up to today's version first (`harness.store.versions`), then
checks the shape every reader relies on: a file that is not a summary is a ResultsError (exit 2)
naming the file and the key, never a KeyError further on. The sections other modules own and
shape (``quality``, ``sampling`` (also typed: `harness.store.phase_samples`), ``unexercised``, ``tier_prediction``, ``attribution``, ``energy``, a phase's
``figures`` and ``roofline``) are kept as the JSON they are, each behind its own attribute;
`Summary.raw` is the whole upgraded object (what summary.csv and a merge copy).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.store import results, versions
from harness.store.phase_samples import SamplingSummary
from harness.store.stats import STAT_KEYS

Json = Mapping[str, Any]


def _bad(path: Path, where: str, what: str) -> results.ResultsError:
    return results.ResultsError(f"{path}: {where}: {what}")


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _mapping(path: Path, where: str, v: Any, *, optional: bool = True) -> Json:
    if v is None and optional:
        return {}
    if not isinstance(v, Mapping):
        raise _bad(path, where, f"expected an object, found {type(v).__name__}")
    return v


def _numbers(path: Path, where: str, v: Any) -> tuple[float | None, ...]:
    if not isinstance(v, Sequence) or isinstance(v, str):
        raise _bad(path, where, "expected a list of numbers")
    if not all(x is None or _number(x) for x in v):
        raise _bad(path, where, "expected a list of numbers or nulls")
    return tuple(v)


@dataclass(frozen=True)
class Stats:
    """The stored statistics of one metric of one phase: {key of `STAT_KEYS`: value or None}."""

    values: Mapping[str, float | None]

    def __getitem__(self, key: str) -> float | None:
        return self.values.get(key)

    @classmethod
    def from_json(cls, path: Path, where: str, data: Any) -> Stats:
        data = _mapping(path, where, data, optional=False)
        unknown = sorted(set(data) - set(STAT_KEYS))
        if unknown:
            raise _bad(path, where, f"unknown statistic {unknown[0]!r} (known: {', '.join(STAT_KEYS)})")
        if not all(v is None or _number(v) for v in data.values()):
            raise _bad(path, where, "a statistic that is not a number")
        return cls({k: data.get(k) for k in STAT_KEYS})


@dataclass(frozen=True)
class PhaseSummary:
    """One phase of one workload: counts, each metric's `Stats` (None: not measured), tier hits."""

    n: int
    n_errors: int
    errors: Mapping[str, int]
    n_warmup: int
    filler: bool
    metrics: Mapping[str, Stats | None]
    hits: Mapping[str, int]
    figures: Json  # the kind's phase figures ({} when it declares none)
    roofline: Json  # {} without host/storage hits or a platform

    def stat(self, metric: str, key: str = "p50") -> float | None:
        s = self.metrics.get(metric)
        return s[key] if s is not None else None

    @classmethod
    def from_json(cls, path: Path, where: str, data: Any) -> PhaseSummary:
        data = _mapping(path, where, data, optional=False)
        metrics = {
            m: None if s is None else Stats.from_json(path, f"{where}.metrics.{m}", s)
            for m, s in _mapping(path, f"{where}.metrics", data.get("metrics")).items()
        }
        for key in ("n", "n_errors", "n_warmup"):
            if not isinstance(data.get(key, 0), int):
                raise _bad(path, f"{where}.{key}", "expected an integer")
        return cls(
            n=int(data.get("n", 0)),
            n_errors=int(data.get("n_errors", 0)),
            errors=dict(_mapping(path, f"{where}.errors", data.get("errors"))),
            n_warmup=int(data.get("n_warmup", 0)),
            filler=bool(data.get("filler", False)),
            metrics=metrics,
            hits=dict(_mapping(path, f"{where}.hits", data.get("hits"))),
            figures=_mapping(path, f"{where}.figures", data.get("figures")),
            roofline=_mapping(path, f"{where}.roofline", data.get("roofline")),
        )


@dataclass(frozen=True)
class WorkloadSummary:
    """One workload: its phases, its derived figures pooled, and per repeat (None: the summary
    predates them; `harness.analysis.figures` recomputes them from the records)."""

    phases: Mapping[str, PhaseSummary]
    derived: Mapping[str, float | None]
    derived_by_repeat: Mapping[str, tuple[float | None, ...]] | None
    history_stats_by_repeat: Mapping[str, tuple[float | None, ...]] | None
    from_samples: Json  # the kind's judgement of the samples (a soak's slopes and findings), {} without one
    tokens_per_request: float | None = None  # mean prompt + generated tokens per answered request

    def repeat_values(self, figure: str) -> tuple[float | None, ...]:
        """A derived figure's per-repeat values (() when there are none)."""
        by_repeat = self.derived_by_repeat
        return by_repeat.get(figure, ()) if by_repeat is not None else ()

    @classmethod
    def from_json(cls, path: Path, where: str, data: Any) -> WorkloadSummary:
        data = _mapping(path, where, data, optional=False)
        derived = dict(_mapping(path, f"{where}.derived", data.get("derived")))
        if not all(v is None or _number(v) for v in derived.values()):
            raise _bad(path, f"{where}.derived", "a figure that is not a number")

        def per_repeat(key: str) -> dict[str, tuple[float | None, ...]] | None:
            block = data.get(key)
            if block is None:
                return None
            return {
                k: _numbers(path, f"{where}.{key}.{k}", v) for k, v in _mapping(path, f"{where}.{key}", block).items()
            }

        return cls(
            phases={
                ph: PhaseSummary.from_json(path, f"{where}.phases.{ph}", p)
                for ph, p in _mapping(path, f"{where}.phases", data.get("phases")).items()
            },
            derived=derived,
            derived_by_repeat=per_repeat("derived_by_repeat"),
            history_stats_by_repeat=per_repeat("history_stats_by_repeat"),
            from_samples=_mapping(path, f"{where}.from_samples", data.get("from_samples")),
            tokens_per_request=data["tokens_per_request"] if _number(data.get("tokens_per_request")) else None,
        )


@dataclass(frozen=True)
class TierPrediction:
    """``tier_prediction`` (`harness.measures.tier_model`): per workload and phase the predicted
    and achieved tier tokens (each phase's stored object), and the phases that fell short."""

    phases: Mapping[str, Mapping[str, Json]]
    shortfalls: frozenset[tuple[Any, Any]]  # (workload, phase)

    @classmethod
    def from_json(cls, path: Path, data: Json) -> TierPrediction:
        phases = {
            wl: {
                ph: _mapping(path, f"tier_prediction.phases.{wl}.{ph}", p)
                for ph, p in _mapping(path, f"tier_prediction.phases.{wl}", v).items()
            }
            for wl, v in _mapping(path, "tier_prediction.phases", data.get("phases")).items()
        }
        short = data.get("shortfalls") or []
        if not isinstance(short, list) or not all(isinstance(x, Mapping) for x in short):
            raise _bad(path, "tier_prediction.shortfalls", "expected a list of objects")
        return cls(phases, frozenset((x.get("workload"), x.get("phase")) for x in short))


@dataclass(frozen=True)
class Summary:
    """A variant's summary.json, today's version. ``workloads`` is None for a variant that
    measured nothing (never zeros)."""

    schema_version: int
    variant: str
    state: str | None
    cause: str | None
    n_requests: int
    n_errors: int
    errors: Mapping[str, int]
    repeats: tuple[int, ...]
    workloads: Mapping[str, WorkloadSummary] | None
    quality: Json  # {n_records, parity: its headline} ({} without quality rows)
    sampling: Json  # harness.analysis.samples per phase ({} without samples)
    samples: SamplingSummary  # the same, typed (`harness.store.phase_samples`)
    unexercised: tuple[Json, ...]  # harness.analysis.summary.unexercised_phases
    tier_prediction: Json  # harness.measures.tier_model ({} without pools)
    tiers: TierPrediction  # the same, typed
    attribution: tuple[Json, ...]  # harness.analysis.attribution
    energy: Json  # harness.analysis.energy: joules per token, per phase and in all ({} without one)
    raw: Json  # the whole upgraded object

    @property
    def measured(self) -> Mapping[str, WorkloadSummary]:
        """The workloads it measured, in order ({} for a variant that measured nothing)."""
        return self.workloads if self.workloads is not None else {}

    def workload(self, name: str) -> WorkloadSummary | None:
        return self.measured.get(name)

    def phases(self, workload: str) -> Mapping[str, PhaseSummary]:
        w = self.workload(workload)
        return w.phases if w is not None else {}

    def derived(self, workload: str, figure: str) -> float | None:
        w = self.workload(workload)
        return w.derived.get(figure) if w is not None else None

    @property
    def parity(self) -> Json:
        """The quality parity headline (`harness.quality.parity`), {} without one."""
        p = self.quality.get("parity")
        return p if isinstance(p, Mapping) else {}

    @classmethod
    def from_json(cls, path: Path, data: Any) -> Summary:
        data = _mapping(path, "summary", data, optional=False)
        data = versions.upgrade(path, dict(data), versions.SUMMARY)
        wls = data.get("workloads")
        workloads = (
            None
            if wls is None
            else {
                w: WorkloadSummary.from_json(path, f"workloads.{w}", v)
                for w, v in _mapping(path, "workloads", wls).items()
            }
        )
        for key in ("n_requests", "n_errors"):
            if not isinstance(data.get(key, 0), int):
                raise _bad(path, key, "expected an integer")
        repeats = data.get("repeats") or []
        if not isinstance(repeats, list) or not all(isinstance(r, int) for r in repeats):
            raise _bad(path, "repeats", "expected a list of integers")

        def listed(key: str) -> tuple[Json, ...]:
            v = data.get(key) or []
            if not isinstance(v, list) or not all(isinstance(x, Mapping) for x in v):
                raise _bad(path, key, "expected a list of objects")
            return tuple(v)

        quality = _mapping(path, "quality", data.get("quality"))
        tier_prediction = _mapping(path, "tier_prediction", data.get("tier_prediction"))
        if quality.get("parity") and not isinstance(quality["parity"], Mapping):
            raise _bad(path, "quality.parity", "expected an object")
        return cls(
            schema_version=int(data["schema_version"]),
            variant=str(data.get("variant") or ""),
            state=data.get("state"),
            cause=data.get("cause"),
            n_requests=int(data.get("n_requests", 0)),
            n_errors=int(data.get("n_errors", 0)),
            errors=dict(_mapping(path, "errors", data.get("errors"))),
            repeats=tuple(repeats),
            workloads=workloads,
            quality=quality,
            sampling=_mapping(path, "sampling", data.get("sampling")),
            samples=SamplingSummary.from_json(data.get("sampling")),
            unexercised=listed("unexercised"),
            tier_prediction=tier_prediction,
            tiers=TierPrediction.from_json(path, tier_prediction),
            attribution=listed("attribution"),
            energy=_mapping(path, "energy", data.get("energy")),
            raw=data,
        )


def read_summary(path: Path) -> Summary:
    """A summary.json as a :class:`Summary` (upgraded and checked); ResultsError naming the file."""
    return Summary.from_json(Path(path), results.read_json_object(path))

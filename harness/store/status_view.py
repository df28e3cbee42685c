"""A variant's status.json as its readers see it: `StatusView`, frozen, with the sections the
runner writes as JSON typed once — its pools (`Pools`, `harness.server.logscan.PoolSizes.to_json`),
the preflight record (`Preflight`, `harness.run.hostpool`; with its `Boundary`,
`harness.run.ratio_boundary`), the matched log lines (`LogExcerpt`) and the start's phases
(`StartupRecord`, `harness.server.startup_phases`).

`VariantStatus` is the runner's mutable record, written after every step; this is what a reader
is handed (`StatusView.of`, from a status read back and upgraded by `harness.store.variant_status`),
or, for a variant without a status.json, `StatusView.absent` (``missing`` or ``not_run``). Lenient
as its readers always were: a section an older run did not write is None, a figure it lacks is
None; stored values keep their type (the report prints them as before).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from harness.store.stored_fields import from_keys
from harness.store.variant_status import ATTACHED, LAUNCHED, ServerOrigin, VariantStatus

Json = Mapping[str, Any]


def _obj(v: Any) -> Json:
    return v if isinstance(v, Mapping) else {}


@dataclass(frozen=True)
class Pools:
    """The pools the server log showed (per rank)."""

    max_total_num_tokens: int | None
    host_pool_tokens: int | None
    host_pool_gb: float | None
    mamba_device_slots: int | None
    mamba_host_slots: int | None
    refused_kind: str | None  # the pool sglang refused for host memory: its kind and tokens
    refused_tokens: int | None
    raw: Json

    def value(self, key: str) -> Any:
        """A figure by its stored key (what a scenario check's ``pools.<key>`` names)."""
        return self.raw.get(key)

    @classmethod
    def from_json(cls, data: Any) -> Pools | None:
        if not isinstance(data, Mapping):
            return None
        refused = _obj(data.get("refused_pool"))
        return from_keys(cls, data, refused_kind=refused.get("kind"), refused_tokens=refused.get("tokens"), raw=data)


@dataclass(frozen=True)
class BoundaryLimit:
    """One side of the safe-ratio boundary: the highest value that passes, the next, and why it fails."""

    value: Any
    next_value: Any
    reason: Any

    @classmethod
    def from_json(cls, data: Any) -> BoundaryLimit:
        return from_keys(cls, _obj(data))


@dataclass(frozen=True)
class Boundary:
    knob: Any  # "ratio" | "size_gb"
    safe: Any  # the lower of the two limits (None unless both have one)
    starts: BoundaryLimit
    keeps_page_cache: BoundaryLimit

    @classmethod
    def from_json(cls, data: Any) -> Boundary | None:
        if not data or not isinstance(data, Mapping):
            return None
        return from_keys(
            cls,
            data,
            starts=BoundaryLimit.from_json(data.get("starts")),
            keeps_page_cache=BoundaryLimit.from_json(data.get("keeps_page_cache")),
        )


@dataclass(frozen=True)
class Preflight:
    """The host-pool prediction made before the launch (and after it, with the real pools)."""

    fits: bool | None  # None: not predicted (``reason`` says why)
    requested_gb: Any
    budget_gb: Any
    reason: Any
    kv_bytes_per_token: Any  # the prediction's
    mamba_host_slots: Any  # the prediction's
    boundary: Boundary | None

    @classmethod
    def from_json(cls, data: Any) -> Preflight | None:
        if not data or not isinstance(data, Mapping):
            return None
        prediction = _obj(data.get("prediction"))
        return from_keys(
            cls,
            data,
            kv_bytes_per_token=prediction.get("kv_bytes_per_token"),
            mamba_host_slots=prediction.get("mamba_host_slots"),
            boundary=Boundary.from_json(data.get("boundary")),
        )


@dataclass(frozen=True)
class LogExcerpt:
    """The server-log lines around the matched one (numbered from ``first_line``)."""

    file: Any
    first_line: int
    lines: tuple[str, ...]
    match_line: Any

    @classmethod
    def from_json(cls, data: Any) -> LogExcerpt:
        d = _obj(data)
        return cls(d.get("file"), d.get("first_line") or 1, tuple(d.get("lines") or ()), d.get("match_line"))


@dataclass(frozen=True)
class StartupRecord:
    """Where the (last) start went: its phases and the figures sglang reported."""

    phases: Json
    reported: Json

    @classmethod
    def from_json(cls, data: Any) -> StartupRecord | None:
        if not isinstance(data, Mapping) or not data.get("phases"):
            return None
        return cls(data["phases"], _obj(data.get("reported")))


@dataclass(frozen=True)
class StatusView:
    """What a reader needs of a variant's status.json."""

    variant: str
    state: str
    cause: str | None = None
    cause_detail: Any = None
    expect: str | None = "ok"
    expect_cause: str | None = None
    expect_met: bool | None = None
    attempts: int | None = None
    exit_code: int | None = None
    ready_s: float | None = None
    env_not_clean: bool | None = None
    pools: Pools | None = None
    preflight: Preflight | None = None
    log_excerpt: LogExcerpt = LogExcerpt(None, 1, (), None)
    startup: StartupRecord | None = None
    timing: Json | None = None  # `harness.store.gpu_time`'s, as it wrote it
    external: bool = False  # attached to a server somebody else runs (``backend: external``)

    @property
    def ok(self) -> bool:
        return self.state == "ok"

    @property
    def origin(self) -> ServerOrigin:
        """How its server came to be, as status.json records it (``server.external``)."""
        return ATTACHED if self.external else LAUNCHED

    @classmethod
    def of(cls, status: VariantStatus) -> StatusView:
        return from_keys(
            cls,
            status.to_json(),
            pools=Pools.from_json(status.pools),
            preflight=Preflight.from_json(status.preflight),
            log_excerpt=LogExcerpt.from_json(status.log_excerpt),
            startup=StartupRecord.from_json(status.startup),
            timing=status.timing if isinstance(status.timing, Mapping) else None,
            external=isinstance(status.server, Mapping) and status.server.get("external") is True,
        )

    @classmethod
    def absent(cls, variant: str, state: str, cause: str) -> StatusView:
        """A variant without a status.json (``missing``, or ``not_run`` in an interrupted run)."""
        return cls(variant=variant, state=state, cause=cause, expect=None)

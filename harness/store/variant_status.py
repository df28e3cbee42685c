"""A variant's ``status.json``: how far its lifecycle got and why it ended (docs/architecture.md).

A :class:`VariantStatus` is a frozen value: the runner makes a new one at each step of the
variant, from preflight to cooldown (``dataclasses.replace``; `harness.run.variant_io.RunState`
holds the latest, which an interrupt marks), and writes it with :meth:`VariantStatus.write` after
every step, so a harness killed at any moment leaves the last step on disk. Resume and merge read it back with
:func:`read_status` / :func:`variant_state`; both decide with :data:`FINAL_STATES`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.store import results, versions
from harness.store.gpu_time import PhaseClock

# Values of ``state``.
RUNNING = "running"  # written first; a SIGKILLed harness leaves it so
OK = "ok"
STARTUP_FAILED = "startup_failed"
PARTIAL = "partial"  # the server died or hung mid-workload (rows kept)
FAILED = "failed"  # died after the last response, or a workload/quality error
INTERRUPTED = "interrupted"  # SIGINT/SIGTERM reached the harness while this variant ran
REFUSED = "refused"  # preflight strict: never launched
NOT_RUN = "not_run"  # no status.json: the variant was never reached (what readers are given)

# A variant in one of these states is done: resume skips it (given its summary.json), merge
# counts it complete. partial/interrupted/running are rerun.
FINAL_STATES = frozenset({OK, STARTUP_FAILED, REFUSED, FAILED})

# Keys written only once the step they describe happened (absent before, as they always were).
_ONLY_WHEN_SET = ("server", "failed_attempts", "survivors", "stop", "cooldown", "gpu_ids", "startup", "timing")
# One startup attempt's failure evidence, set aside under ``failed_attempts`` before a retry.
_ATTEMPT_KEYS = ("exit_code", "cause", "cause_detail", "log_excerpt", "survivors")


@dataclass(frozen=True)
class ServerOrigin:
    """How a variant's server comes to be, in the words every sink uses (console progress,
    samples, report): the harness launches it, or attaches to one somebody else runs
    (``backend: external``)."""

    start_phase: str  # the progress phase until the server answers
    first_sample_phase: str  # the samples' label before the first workload
    t0: str  # what the samples' t = 0 is

    @property
    def external(self) -> bool:
        return self is ATTACHED


LAUNCHED = ServerOrigin("launching", "startup", "the server was launched")
ATTACHED = ServerOrigin("attaching", "attached", "the harness attached to the server")


def server_origin(backend: str) -> ServerOrigin:
    """The origin of a variant's server by its backend (``external``: attached)."""
    return ATTACHED if backend == "external" else LAUNCHED


@dataclass
class VariantOutcome:
    """What the run's exit code needs of a finished variant."""

    name: str
    state: str
    cause: str | None = None
    expect_met: bool = True


@dataclass(frozen=True)
class VariantStatus:
    """The fields of status.json, in the order they are written."""

    variant: str = ""
    state: str = RUNNING
    cause: str | None = None  # a logscan cause, "preflight", "workload_error", "quality_error", ...
    cause_detail: Any = field(default_factory=dict)  # e.g. {requested_gb, free_gb}
    log_excerpt: dict | None = None  # the matched server-log line ± context, with its line number
    attempts: int = 0
    exit_code: int | None = None  # the server's, when it exited before ready
    started_at: str | None = None
    ready_s: float | None = None
    ended_at: str | None = None
    pools: dict | None = None  # logscan.PoolSizes.to_json()
    expect: str = "ok"  # declared in the scenario
    expect_cause: str | None = None
    expect_met: bool | None = None  # set when the variant ends
    env_not_clean: bool = False  # the previous variant's cooldown did not come back
    preflight: Any = None  # the host-pool prediction (hostpool.py)
    simulated: bool = False
    server: dict | None = None  # {pid, sid, create_time, host}: evidence (orphans are found by their marker)
    failed_attempts: list[dict] | None = None  # earlier startup attempts when a retry followed
    survivors: list[int] | None = None  # pids that outlived the stop of a server that never got ready
    stop: dict | None = None  # server.StopResult of a server that got ready
    cooldown: Any = None  # the cooldown wait's result
    startup: dict | None = None  # harness.server.startup_phases: where the (last) start went, from the log
    gpu_ids: list[str] | None = None  # the GPU set `harness run --gpus` gave it (CUDA_VISIBLE_DEVICES)
    timing: dict | None = None  # harness.store.gpu_time: wall, seconds and GPU-minutes per bucket
    schema_version: int = results.SCHEMA_VERSION
    # Applied to the JSON before every write (the run's secret scrubbing); never written itself.
    redact: Callable[[dict], dict] | None = field(default=None, repr=False, compare=False)
    # Where the variant's time goes (harness.store.gpu_time); its reading is ``timing`` at every write
    # (the clock runs on while the status is a value: it is the variant's meter, not a field).
    clock: PhaseClock | None = field(default=None, repr=False, compare=False)

    # -- writing ---------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        """status.json's object: today's keys, in today's order; the step keys only once set."""
        out: dict[str, Any] = {"schema_version": self.schema_version}
        timing = self.clock.to_json() if self.clock is not None else self.timing
        for f in dataclasses.fields(self):
            if f.name in ("schema_version", "redact", "clock"):
                continue
            value = timing if f.name == "timing" else getattr(self, f.name)
            if f.name in _ONLY_WHEN_SET and value is None:
                continue
            out[f.name] = value
        return out

    def write(self, path: Path) -> None:
        data = self.to_json()
        results.write_json_atomic(path, self.redact(data) if self.redact is not None else data)

    # -- lifecycle steps -------------------------------------------------------------------
    def with_failed_attempt_set_aside(self, attempt: int) -> VariantStatus:
        """A retry follows: this attempt's evidence kept under ``failed_attempts``, so that a later
        success reads clean."""
        kept = {k: getattr(self, k) for k in _ATTEMPT_KEYS} | {"attempt": attempt}
        return dataclasses.replace(
            self,
            failed_attempts=[*(self.failed_attempts or []), kept],
            exit_code=None,
            cause=None,
            log_excerpt=None,
            survivors=None,
            cause_detail={},
        )

    def finished(self, state: str, cause: str | None, detail: Any = None) -> VariantStatus:
        """The variant ended in ``state``: the end stamped and the declared expectation judged. An
        interrupted variant stays interrupted (a side-by-side variant's thread may finish after
        the run's interrupt marked it, `harness.run.lanes`)."""
        if self.state == INTERRUPTED:
            return self
        if self.clock is not None:
            self.clock.stop()
        done = dataclasses.replace(
            self,
            state=state,
            cause=cause,
            cause_detail=self.cause_detail if detail is None else detail,
            ended_at=results.utc_now_iso(),
        )
        return dataclasses.replace(done, expect_met=done.expectation_met())

    def interrupted(self) -> VariantStatus:
        """SIGINT/SIGTERM reached the harness while this variant ran (no expectation is judged)."""
        if self.clock is not None:
            self.clock.stop()
        return dataclasses.replace(self, state=INTERRUPTED, ended_at=results.utc_now_iso())

    def expectation_met(self) -> bool:
        if self.expect == STARTUP_FAILED:
            return self.state == STARTUP_FAILED and self.expect_cause in (None, self.cause)
        return self.state == OK

    def outcome(self) -> VariantOutcome:
        return VariantOutcome(self.variant, self.state, self.cause, bool(self.expect_met))

    # -- reading ---------------------------------------------------------------------------
    @classmethod
    def from_json(cls, data: dict[str, Any]) -> VariantStatus:
        """From a stored status (unknown keys ignored, missing ones take their defaults)."""
        names = {f.name for f in dataclasses.fields(cls)} - {"redact", "clock"}
        return cls(**{k: v for k, v in data.items() if k in names})


def read_status(path: Path) -> VariantStatus:
    """status.json as a :class:`VariantStatus`; ResultsError when missing, torn or not an object."""
    data = results.read_json_object(path)
    return VariantStatus.from_json(versions.upgrade(Path(path), data, versions.STATUS))


def variant_state(run: results.RunPaths, name: str) -> str:
    """The state that decides resume and merge: status.json's state, ``missing`` or ``unreadable``;
    a final state without its summary.json counts as ``no_summary`` (killed between the two writes)."""
    vpaths = run.variant(name)
    if not vpaths.status.exists():
        return "missing"
    try:
        data = results.read_json(vpaths.status)
    except results.ResultsError:
        return "unreadable"
    state = data.get("state") if isinstance(data, dict) else None
    if state in FINAL_STATES and not vpaths.summary.exists():
        return "no_summary"
    return str(state)

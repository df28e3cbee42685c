"""The fields every workload kind's config shares; each kind's module adds its own."""

from __future__ import annotations

from abc import abstractmethod
from pathlib import Path
from typing import Literal

from pydantic import model_validator

from harness.spec.numbers import WEEK_S, seconds, tokens
from harness.spec.values import Name, ScenarioModel

DEFAULT_NEW_TOKENS = 16


class WorkloadConfig(ScenarioModel):
    """One entry of the scenario's ``workloads`` list (subclassed per kind, with ``kind: Literal``).
    Abstract: a kind's config that does not define ``longest_request_tokens`` cannot be built
    (pydantic models are ABCs)."""

    name: Name | None = None  # default: the kind
    flush_before: bool = False  # POST /flush_cache before the workload starts
    timeout_s: seconds(0.01, WEEK_S) | None = None  # the whole workload, per repeat
    api: Literal["generate", "completions"] = "generate"

    @model_validator(mode="after")
    def _default_name(self):
        if self.name is None:
            self.name = self.kind  # type: ignore[attr-defined]
        return self

    def new_tokens(self) -> int:
        """Output tokens per request unless the workload passes its own."""
        return DEFAULT_NEW_TOKENS

    def input_problems(self, base_dir: Path | None) -> list[tuple[tuple, str]]:
        """What is wrong with the files this workload reads (``base_dir``: the scenario's folder),
        as (key path under the workload, message naming the file): checked when the scenario is
        loaded, so `validate` and `run` refuse them before anything starts (exit 2). None here."""
        return []

    def restarts_before(self) -> dict[str, bool]:
        """{phase: comes back changed} of the phases the server is restarted before (the tier model
        empties its pools there: harness.measures.tier_model). None here (storage_restart has one)."""
        return {}

    @abstractmethod
    def longest_request_tokens(self, pool_tokens: int) -> int:
        """Prompt + output tokens of the longest single request this workload sends on a server
        whose GPU pool holds ``pool_tokens`` (checked against the context before anything runs)."""


class PrefillConfig(WorkloadConfig):
    """A workload that measures prefill: one output token per request unless told otherwise."""

    max_new_tokens: tokens() = 1

    def new_tokens(self) -> int:
        return self.max_new_tokens

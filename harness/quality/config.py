"""The scenario's ``quality:`` block, declared where the quality arm lives (as each workload
kind declares its own config in ``harness/workloads/kinds/``); ``harness.scenario.models`` puts
it in the ``Scenario``. The arm reads it typed: `harness.quality.run.plan_quality` resolves it
once against the server's pool into a frozen ``QualityPlan``."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from harness.quality.tasks import TASKS
from harness.spec.numbers import count, ranged, tokens
from harness.spec.values import ScenarioModel, TokenSize, TokenSizeOrZeroT, TokenSizeT


class Quality(ScenarioModel):
    enabled: bool = False
    baseline_variant: str | None = None  # None: the first variant without HiCache (filled at load)
    control: bool = True
    tasks: Annotated[list[Literal[TASKS]], Field(min_length=1)] = list(TASKS)  # type: ignore[valid-type]
    lengths: Annotated[list[TokenSizeT], Field(min_length=1)] = [TokenSize(tokens=8000)]
    samples_per_task: count("samples per task") = 2
    max_new_tokens: tokens() = 32
    churn_tokens: TokenSizeOrZeroT = TokenSize(pool_fraction=1.5)  # 0: no churn (parity NOT_EXERCISED)
    reasks: count("re-asks") = 2
    top_logprobs: count("logprobs per token", 1000) = 5
    tie_epsilon: ranged(float, 0, 100, "nats (log-probability)") = 0.05
    mode: Literal["auto", "text", "token_ids"] = "auto"
    # the ON arm's churn also fills the host pool, so re-asks come back from the storage tier (L3)
    churn_past_host: bool = False

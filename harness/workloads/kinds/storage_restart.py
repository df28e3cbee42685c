"""storage_restart: the storage tier (L3) after a restart -- stop the server, keep the storage
directory, start it again, replay the same prompts.

Phases, each one request at a time:
  "before"         the N prompts, first time: computed, written through the host pool to storage
  (restart)        the server stopped and started again on the same port; the storage directory
                   (``hicache.storage.dir``) is kept, the GPU and host pools start empty
  "after_restart"  the same N again: storage-tier hits (prefetched from the files), their TTFT,
                   and their outputs against the first pass's (``restart_output_match``)
With ``restart_with`` (another model, KV dtype, page size, layout, TP size -- any flags over the
variant's), the server comes back changed and the phase is "after_change": entries written by the
old server must be refused, not served. A storage hit there is a FAIL of the variant (the
workload raises), whatever else was measured: sglang's file backend keys a page by the model name
and TP rank/size and its token hash (page size), not by dtype or layout (docs/simulator.md).
"""

from __future__ import annotations

import hashlib
from typing import Any, Literal, Mapping, Sequence

from pydantic import BaseModel, ConfigDict

from harness.core.errors import Broken
from harness.spec.numbers import count, tokens
from harness.spec.values import TokenSizeT
from harness.workloads.config import PrefillConfig
from harness.workloads.context import WorkloadContext, WorkloadScope
from harness.workloads.estimating import EstimateContext, WorkEstimate, est, mul
from harness.workloads.kind import Derived, PhaseStat, ReportRow, WorkloadKind, ratio


class RestartChange(BaseModel):
    """``restart_with``: what the server comes back with (over the variant's own)."""

    model_config = ConfigDict(extra="forbid")

    model_path: str | None = None  # another model (relative: to the scenario's folder)
    args: dict[str, str | int | float | bool] = {}  # e.g. {--kv-cache-dtype: fp8_e4m3}


class StorageRestart(PrefillConfig):
    """The same prompts before and after a restart that keeps the storage directory."""

    kind: Literal["storage_restart"]
    n: count("prompts") = 2
    prompt_tokens: TokenSizeT
    max_new_tokens: tokens() = 8  # enough output to compare after the restart
    restart_with: RestartChange | None = None

    def longest_request_tokens(self, pool_tokens: int) -> int:
        return self.prompt_tokens.resolve(pool_tokens) + self.new_tokens()

    def restarts_before(self) -> dict[str, bool]:
        """The phase the server is restarted before, and whether it comes back changed (the tier
        model empties its pools there: harness.measures.tier_model)."""
        return {after_phase(self): self.restart_with is not None}


class StorageServedAcrossChange(Broken, RuntimeError):
    """A storage hit after the server came back with another model, dtype or layout."""


class StorageHeldBefore(Broken, RuntimeError):
    """The first pass was served from storage: its pages were there before the run."""


def after_phase(cfg: StorageRestart) -> str:
    return "after_change" if cfg.restart_with is not None else "after_restart"


async def run(ctx: WorkloadContext, cfg: StorageRestart) -> None:
    if ctx.restart is None:
        raise RuntimeError("storage_restart needs a server the harness starts (not backend: external)")
    w = WorkloadScope(ctx, cfg)
    # the seed's prompts (same seed, same prompts); the storage directory keeps pages across runs,
    # so a "before" phase served from storage is an earlier run's pages: this run wrote nothing
    prompts = w.prompts(cfg.n, ctx.tokens(cfg.prompt_tokens), "measured")
    w.phase("before")
    found = 0
    for i, ids in enumerate(prompts):
        rec = await w.send("before", i, ids)
        found += rec.cached_storage or 0
    if found:
        raise StorageHeldBefore(
            f"{found} prompt tokens of the first pass came from storage: the storage directory already "
            "held these prompts' pages (an earlier run with the same seed); empty the storage directory "
            "(hicache.storage.dir) or set another `seed:` in the scenario"
        )
    change = cfg.restart_with.model_dump() if cfg.restart_with is not None else None
    await ctx.restart(change)
    phase = after_phase(cfg)
    w.phase(phase)
    served = 0
    for i, ids in enumerate(prompts):
        rec = await w.send(phase, i, ids)
        served += rec.cached_storage or 0
    if change is not None and served:
        raise StorageServedAcrossChange(
            f"{served} prompt tokens served from storage entries written before the restart by another "
            f"configuration ({change}): they must be refused"
        )


def phase_figures(cfg: StorageRestart, phase: str, records: Sequence[Any]) -> Mapping[str, Any]:
    """Per prompt (by index) a digest of its output ids, and the storage tokens the phase got."""
    measured = sorted((r for r in records if not r.warmup and r.error is None), key=lambda r: r.index)
    return {
        "output_digests": {
            str(r.index): hashlib.sha256(repr(list(r.output_ids or ())).encode()).hexdigest()[:16] for r in measured
        },
        "storage_tokens": sum(r.cached_storage or 0 for r in measured),
    }


def _output_match(p: Mapping[str, Any]) -> float | None:
    before = ((p.get("before") or {}).get("figures") or {}).get("output_digests") or {}
    after = ((p.get("after_restart") or {}).get("figures") or {}).get("output_digests") or {}
    common = [k for k in before if k in after]
    if not common:
        return None
    return sum(before[k] == after[k] for k in common) / len(common)


def _foreign_tokens(p: Mapping[str, Any]) -> float | None:
    figures = (p.get("after_change") or {}).get("figures")
    return None if figures is None else float(figures.get("storage_tokens") or 0)


def estimate(w: StorageRestart, c: EstimateContext) -> WorkEstimate:
    """n x L twice (the second pass counted as computed: a storage hit is not known before
    launch), and one more server start (the estimate's ``startup_s``) in between."""
    L = c.size(w.prompt_tokens)
    prompts = mul(w.n, L)
    sent = mul(2 * w.n, L)
    reqs = 2 * w.n * c.repeats
    return est(
        w.name,
        w.kind,
        reqs,
        mul(sent, c.repeats),
        mul(sent, c.repeats),
        mul(sent, c.repeats),
        reqs * w.new_tokens(),
        c.decode_s(reqs * max(0, w.new_tokens() - 1)),
        c.too_long(L) + c.aligned("prompt_tokens", L),
        prompts,
    )


_BEFORE_TTFT = PhaseStat("before", "ttft_ms")
_AFTER_TTFT = PhaseStat("after_restart", "ttft_ms")

KIND = WorkloadKind(
    config=StorageRestart,
    run=run,
    estimate=estimate,
    phase_figures=phase_figures,
    tier_hit_phases=True,
    hit_tier=lambda phase: "storage" if phase == "after_restart" else None,
    derived=(
        Derived(
            "restart_storage_hit_fraction",
            "fraction",
            True,
            "storage-tier share of the prompts after the restart, median",
            PhaseStat("after_restart", "storage_hit_fraction").of,
            needs=("after_restart",),
            compared=True,
            counts_hits=True,
        ),
        Derived(
            "restart_speedup",
            "ratio",
            True,
            "TTFT before the restart / TTFT after it (storage-tier hits)",
            lambda p: ratio(_BEFORE_TTFT.of(p), _AFTER_TTFT.of(p)),
            needs=("before", "after_restart"),
            compared=True,
        ),
        Derived(
            "restart_output_match",
            "fraction",
            True,
            "prompts whose output after the restart equals the first pass's, token by token",
            _output_match,
            needs=("before", "after_restart"),
            compared=True,
        ),
        Derived(
            "foreign_storage_tokens",
            "tokens",
            False,
            "prompt tokens served from storage written by the server before a changed restart (must be 0)",
            _foreign_tokens,
            needs=("after_change",),
            compared=True,
            counts_hits=True,
        ),
    ),
    report_rows=(
        ReportRow("TTFT after restart (storage)", "ms", _AFTER_TTFT, False, "{workload}: the same prompts again"),
        ReportRow("restart: outputs equal", "", "restart_output_match", True, "{workload}: token by token"),
    ),
)

"""How much churn pushes a quality prompt out of the GPU pool but keeps it in the host pool.

One job, pure: pool sizes, the server's input limit and the longest prompt → a `ChurnPlan`
(tokens of churn before each re-ask, tokens per churn request, and a sentence saying how it was
sized or why it cannot work). `harness.quality.run` sends it; `harness.quality.parity` quotes
its note when the re-asks missed the host tier.

The window (write-through, sglang's default policy; L = longest prompt + max_new_tokens,
P = GPU pool, H = host pool, m = margin):
- out of the GPU: churn >= P + m. The GPU radix cache evicts least-recently-used leaves, the
  prompt is older than every churn request, so once P tokens of churn went in it is gone.
- still in the host: churn <= H - L - m. Write-through keeps a host copy of everything on the
  GPU, so only H - P host tokens are left for evicted pages, and they keep the most recently
  evicted: the churn that left the GPU (churn - P) plus the prompt must fit: churn + L <= H.
  Write-back copies a page to the host only when the GPU evicts it: churn <= H + P - L - m.
The configured churn is clamped into the window. An empty window (e.g. ``--hicache-ratio 1``:
H = P + one page) is reported with the numbers, and the plan sends P + m so the GPU misses are
at least clean.
Churn requests are token-id prompts of at most ``max_input`` tokens (the server's
``max_req_input_len`` minus the one token of output) and at most half the GPU pool.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

DEFAULT_MARGIN_TOKENS = 64  # one large page: partial pages, the token being decoded


@dataclass(frozen=True)
class ChurnPlan:
    tokens: int  # churn tokens sent before each re-ask (0: none)
    chunk: int  # tokens per churn request
    requested: int  # quality.churn_tokens as configured (resolved)
    device_pool: int | None
    host_pool: int | None  # None: unknown; 0: the server has no host tier
    max_input: int | None  # longest prompt the server accepts, None: unknown
    prompt: int  # longest sample + max_new_tokens: what one sample occupies
    low: int | None  # least churn that empties the GPU pool of the prompt
    high: int | None  # most churn that keeps the prompt in the host pool
    note: str  # how the churn was sized, or why it cannot work

    @property
    def can_reach_host(self) -> bool:
        """Whether the window is non-empty (unknown sizes count as "maybe")."""
        return self.tokens > 0 and (self.low is None or self.high is None or self.low <= self.high)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def margin_tokens(device_pool: int) -> int:
    return max(DEFAULT_MARGIN_TOKENS, device_pool // 64)


def plan_churn(
    requested: int,
    *,
    device_pool: int | None,
    host_pool: int | None,
    max_input: int | None,
    prompt_tokens: int,
    write_policy: str | None = None,
    needs_host: bool = True,
) -> ChurnPlan:
    """Size the churn for one arm. ``needs_host`` is False for the OFF baseline (and its control):
    there the churn only has to empty the GPU pool, so there is no upper bound."""
    requested = max(0, int(requested))
    chunk_cap = [c for c in (device_pool // 2 if device_pool else None, max_input) if c]
    if requested == 0:
        return ChurnPlan(
            0,
            0,
            0,
            device_pool,
            host_pool,
            max_input,
            prompt_tokens,
            None,
            None,
            "churn disabled (quality.churn_tokens 0): every re-ask is a GPU-cache hit",
        )

    def plan(tokens: int, low: int | None, high: int | None, note: str) -> ChurnPlan:
        chunk = max(1, min([tokens] + chunk_cap))
        return ChurnPlan(tokens, chunk, requested, device_pool, host_pool, max_input, prompt_tokens, low, high, note)

    if not device_pool:
        return plan(requested, None, None, f"GPU pool unknown: churn {requested} tokens as configured")
    m = margin_tokens(device_pool)
    low = device_pool + m
    if not needs_host:
        tokens = max(requested, low)
        return plan(tokens, low, None, f"churn {tokens} tokens >= GPU pool {device_pool} + margin {m}")
    if host_pool is None:
        tokens = max(requested, low)
        return plan(
            tokens,
            low,
            None,
            f"churn {tokens} tokens >= GPU pool {device_pool} + margin {m}; host pool "
            "size unknown, so not checked against it",
        )
    if host_pool <= 0:
        return plan(max(requested, low), low, None, "the server has no host tier (HiCache off)")
    write_back = (write_policy or "").strip() == "write_back"
    high = host_pool + (device_pool if write_back else 0) - prompt_tokens - m
    if high < low:
        bound = (
            f"host {host_pool} + GPU {device_pool} - prompt {prompt_tokens}"
            if write_back
            else f"host pool {host_pool} - prompt {prompt_tokens}"
        )
        need = device_pool + prompt_tokens + 2 * m - (device_pool if write_back else 0)
        why = (
            ""
            if write_back
            else " (write-through keeps a host copy of everything on the GPU, so only "
            f"{max(0, host_pool - device_pool)} host tokens are left for evicted prompts)"
        )
        return plan(
            low,
            low,
            high,
            f"no churn can push a {prompt_tokens}-token prompt out of the GPU pool ({device_pool} tokens) "
            f"and keep it in the host pool: {bound} - margin {m} = {high} < GPU pool + margin = {low}"
            f"{why}; needs a host pool of at least {need} tokens "
            f"(--hicache-ratio >= {need / device_pool:.2f}) or shorter quality.lengths",
        )
    tokens = min(max(requested, low), high)
    if tokens == requested:
        note = f"churn {tokens} tokens as configured, within [{low}, {high}]"
    else:
        note = (
            f"churn {tokens} tokens (configured {requested}, clamped into [{low}, {high}]: "
            f"GPU pool {device_pool} + margin {m} .. host pool {host_pool}"
            f"{' + GPU pool' if write_back else ''} - prompt {prompt_tokens} - margin {m})"
        )
    return plan(tokens, low, high, note)

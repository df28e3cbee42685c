"""decode: a batch of B requests at once, fixed output length (`ignore_eos`), phase "decode".

Reports decode tok/s, ITL, TPOT. `n` (default 1) batches run one after another.
"""

from __future__ import annotations

from typing import Literal

from harness.spec.numbers import count, tokens
from harness.spec.values import TokenSize, TokenSizeT
from harness.workloads.config import WorkloadConfig
from harness.workloads.context import WorkloadContext, WorkloadScope
from harness.workloads.estimating import EstimateContext, WorkEstimate, est, mul
from harness.workloads.kind import Derived, ReportRow, WorkloadKind


class Decode(WorkloadConfig):
    """``n`` batches of ``batch`` requests generating ``output_tokens`` each (ignore_eos)."""

    kind: Literal["decode"]
    batch: count("requests at once") = 1
    n: count("batches") = 1
    prompt_tokens: TokenSizeT = TokenSize(tokens=128)
    output_tokens: tokens() = 256

    def longest_request_tokens(self, pool_tokens: int) -> int:
        return self.prompt_tokens.resolve(pool_tokens) + self.output_tokens


async def run(ctx: WorkloadContext, cfg: Decode) -> None:
    w = WorkloadScope(ctx, cfg)
    n_tokens = ctx.tokens(cfg.prompt_tokens)
    w.phase("decode")
    for r in range(cfg.n):
        group = f"{w.group('decode')}/b{r}"
        prompts = w.prompts(cfg.batch, n_tokens, f"decode{r}")
        await w.gather(
            w.send("decode", r * cfg.batch + i, ids, max_new_tokens=cfg.output_tokens, ignore_eos=True, group=group)
            for i, ids in enumerate(prompts)
        )


def estimate(w: Decode, c: EstimateContext) -> WorkEstimate:
    """batch x n prompts, then output_tokens each (a batch decodes together)."""
    r = c.repeats
    L = c.size(w.prompt_tokens)
    reqs = w.batch * w.n
    sent = mul(reqs, L, r)
    return est(
        w.name,
        w.kind,
        reqs * r,
        sent,
        sent,
        sent,
        reqs * r * w.output_tokens,
        c.decode_s(w.n * r * (w.output_tokens - 1)),
        c.too_long(L),
    )


KIND = WorkloadKind(
    config=Decode,
    table_cells={"decode_tok_s": "decode_tok_s"},
    estimate=estimate,
    run=run,
    derived=(
        Derived.phase_median("decode", "decode_tok_s", "output tokens after the first / decode time, median"),
        Derived.phase_median("decode", "tpot_ms", "time per output token after the first, median"),
    ),
    report_rows=(ReportRow("decode ({workload})", "tok/s", "decode_tok_s", True),),
)

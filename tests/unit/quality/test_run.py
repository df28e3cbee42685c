"""run_quality's request sequence and records, against an in-process stand-in for the client."""

from __future__ import annotations

import asyncio
import hashlib
from dataclasses import dataclass, field

import pytest

from harness.quality.churn import plan_churn
from harness.quality.config import Quality
from harness.quality.parity import evaluate_parity
from harness.quality.run import (
    QualityArm,
    ServerLimits,
    plan_quality,
    resolve_tokens,
    run_quality,
    server_limits,
)
from harness.store.records import RequestRecord


class TinyServer:
    """Greedy outputs are a hash of the prompt; a prompt seen before is a device hit, or a host
    hit once at least ``pool`` tokens of other prompts were sent since (its KV left the GPU) --
    while the host pool (``host`` tokens, None: unbounded) still holds it and what came after.
    Prompts longer than ``max_input`` tokens are refused with HTTP 400."""

    def __init__(self, pool: int, hicache: bool, host: int | None = None, max_input: int | None = None):
        self.pool, self.hicache, self.host, self.max_input = pool, hicache, host, max_input
        self.sent: list[tuple[list[int], object]] = []
        self.last_seen: dict[tuple, int] = {}
        self.tokens = 0

    async def generate(self, req, labels, *, abort=None):
        ids = tuple(req.input_ids)
        self.sent.append((list(ids), labels))
        if self.max_input is not None and len(ids) > self.max_input:
            return RequestRecord(
                variant=labels.variant,
                workload=labels.workload,
                phase=labels.phase,
                repeat=labels.repeat,
                index=labels.index,
                rid=f"r{len(self.sent)}",
                error="http_400",
            )
        dev = host = 0
        if ids in self.last_seen:
            since = self.tokens - self.last_seen[ids]
            if since < self.pool:
                dev = len(ids)
            elif self.hicache and (self.host is None or since + len(ids) <= self.host):
                host = len(ids)
        self.tokens += len(ids)
        self.last_seen[ids] = self.tokens
        h = hashlib.sha256(repr(ids).encode()).digest()
        out = [3 + b for b in h[: req.max_new_tokens]]
        top = [[[t, -0.1], [t + 1, -2.0]] for t in out] if req.top_logprobs_num else None
        return RequestRecord(
            variant=labels.variant,
            workload=labels.workload,
            phase=labels.phase,
            repeat=labels.repeat,
            index=labels.index,
            rid=f"r{len(self.sent)}",
            output_ids=out,
            output_logprobs=[-0.1] * len(out) if req.return_logprob else None,
            top_logprobs=top,
            cached_tokens=dev + host,
            cached_device=dev,
            cached_host=host,
            finish_reason="length",
        )


@dataclass
class Ctx:
    client: TinyServer
    pool_tokens: int
    seed: int = 0
    variant: str = "v"
    vocab_size: int = 1000
    phases: list[str] = field(default_factory=list)
    details: list[str | None] = field(default_factory=list)  # the console line's part, per phase
    rows: list = field(default_factory=list)
    tokenizer: object = None
    confirm_death = None  # the server is never gone unless a test says so

    def record(self, r):
        self.rows.append(r)

    def set_phase(self, p, detail=None):
        self.phases.append(p)
        self.details.append(detail)


CFG = dict(
    tasks=["needle", "aggregation"],
    lengths=["0.25x pool"],
    samples_per_task=2,
    max_new_tokens=4,
    churn_tokens="1.5x pool",
    reasks=2,
    top_logprobs=5,
    mode="auto",
    control=True,
)


def run(ctx, cfg, role, **server):
    """The arm on ``ctx``'s stand-in server, as the serving window builds it; ``server``: what
    it knows of the server (host_pool_tokens, server_info)."""
    cfg = Quality(**cfg)
    arm = QualityArm(
        client=ctx.client,
        role=role,
        variant=ctx.variant,
        seed=ctx.seed,
        vocab_size=ctx.vocab_size,
        pool_tokens=ctx.pool_tokens,
        record=ctx.record,
        set_phase=ctx.set_phase,
        confirm_death=ctx.confirm_death,
        tokenizer=ctx.tokenizer,
        **server,
    )
    return asyncio.run(run_quality(arm, plan_quality(cfg, ctx.pool_tokens, ctx.tokenizer is not None)))


def test_resolve_tokens():
    assert resolve_tokens(100, None) == 100
    assert resolve_tokens("0.5x pool", 1000) == 500
    assert resolve_tokens(" 2 x pool", 1000) == 2000
    assert resolve_tokens("300", None) == 300
    with pytest.raises(ValueError):
        resolve_tokens("1x pool", None)


def test_plan_modes():
    assert plan_quality(Quality(**CFG), 4000, have_tokenizer=False).mode == "token_ids"
    assert plan_quality(Quality(**CFG), 4000, have_tokenizer=True).mode == "text"
    with pytest.raises(ValueError, match="tokenizer"):
        plan_quality(Quality(**{**CFG, "mode": "text"}), 4000, have_tokenizer=False)
    with pytest.raises(ValueError, match="tasks"):  # the block refuses an unknown task as it is read
        Quality(**{**CFG, "tasks": ["bogus"]})


def test_sequence_records_and_parity():
    on_ctx = Ctx(TinyServer(4000, hicache=True), 4000)
    on = run(on_ctx, CFG, "on")
    assert len(on) == 2 * 2 * 3 and on_ctx.rows == on
    assert [r.ask for r in on[:3]] == [0, 1, 2]
    assert all(r.mode == "token_ids" and r.correct is None and r.prompt_tokens == 1000 for r in on)
    assert all(r.cached_host == 1000 for r in on if r.ask > 0)  # churn pushed each one to host
    assert all(not r.cached_host for r in on if r.ask == 0)
    assert {"quality_cold", "quality_churn", "quality_reask"} <= set(on_ctx.phases)
    # the console names the question being asked; the phase labels (samples, records) stay plain
    assert "on: needle@1000 sample 0 ask 0/2" in on_ctx.details
    assert "on: aggregation@1000 sample 1 ask 2/2 (churn first)" in on_ctx.details
    assert all(d for d in on_ctx.details)
    # churn: 1.5x pool in chunks of half a pool = 3 prompts before each re-ask, distinct first tokens
    churn = [ids for ids, lab in on_ctx.client.sent if lab.phase == "quality_churn"]
    assert len(churn) == 3 * 2 * 4 and all(len(c) == 2000 for c in churn)
    samples = [ids for ids, lab in on_ctx.client.sent if lab.phase != "quality_churn"]
    firsts = [c[0] for c in churn] + list({s[0] for s in map(tuple, samples)})
    assert len(firsts) == len(set(firsts))

    assert all(r.churn["accepted"] == 6000 and r.churn["failed"] == 0 for r in on if r.ask > 0)
    assert all(r.churn is None for r in on if r.ask == 0)

    off_ctx = Ctx(TinyServer(4000, hicache=False), 4000)
    off = run(off_ctx, CFG, "off")
    assert {r.arm_role for r in off} == {"off", "control"} and len(off) == 2 * len(on)
    control = [r for r in off if r.arm_role == "control"]
    assert all(not r.cached_tokens for r in control if r.ask == 0)  # cold: one churn opened the pass
    assert all(r.cached_device == 1000 and r.churn is None for r in control if r.ask > 0)  # GPU hits, no churn
    assert [r.input_hash for r in off if r.arm_role == "off"] == [r.input_hash for r in on]
    rep = evaluate_parity(on, off, cfg=Quality(**CFG))
    assert rep.verdict == "PASS" and rep.reasks == rep.reasks_with_host_hit == 8


def test_no_churn_is_not_exercised():
    cfg = {**CFG, "churn_tokens": 0, "control": False}
    on = run(Ctx(TinyServer(4000, True), 4000), cfg, "on")
    off = run(Ctx(TinyServer(4000, False), 4000), cfg, "off")
    assert all(r.cached_device == 1000 for r in on if r.ask > 0)
    assert evaluate_parity(on, off, cfg=Quality(**cfg)).verdict == "NOT_EXERCISED"


def test_text_mode_scores_with_tokenizer():
    pytest.importorskip("tokenizers")
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    from harness.quality.tasks import filler_corpus

    tok = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator(filler_corpus(500), trainers.WordLevelTrainer(special_tokens=["[UNK]"]))

    from harness.core.tokenizers import as_tokenizer

    ctx = Ctx(TinyServer(4000, True), 4000, tokenizer=as_tokenizer(tok))
    recs = run(ctx, {**CFG, "tasks": ["needle"], "reasks": 1, "control": False}, "on")
    assert all(r.mode == "text" and r.correct is False and r.score == 0.0 and r.answer for r in recs)
    assert all(r.prompt_tokens <= 1000 for r in recs)


def test_scenario_quality_model_is_accepted():
    scenario = pytest.importorskip("harness.scenario")
    q = scenario.Quality(enabled=True, lengths=["0.25x pool", 900], churn_tokens="8k", tasks=["needle"])
    plan = plan_quality(q, 4000, have_tokenizer=False)
    assert plan.lengths == (1000, 900) and plan.churn_tokens == 8000 and plan.tasks == ("needle",)
    assert resolve_tokens("8k", None) == 8000


def test_stops_when_the_server_is_gone():
    class Dead(TinyServer):
        async def generate(self, req, labels, *, abort=None):
            r = await super().generate(req, labels, abort=abort)
            r.error, r.output_ids = "connection", []
            return r

    @dataclass
    class DCtx(Ctx):
        async def confirm_death(self):  # type: ignore[override]
            return True

    ctx = DCtx(Dead(4000, True), 4000)
    recs = run(ctx, CFG, "off")
    assert len(recs) == 1 and recs[0].error == "connection" and len(ctx.client.sent) == 1


# --- churn sizing --------------------------------------------------------------------------------


def test_churn_window_from_the_pools():
    p = plan_churn(6144, device_pool=4096, host_pool=8193, max_input=None, prompt_tokens=1008)
    assert (p.low, p.high, p.tokens, p.chunk) == (4160, 7121, 6144, 2048) and "as configured" in p.note
    big = plan_churn(20000, device_pool=4096, host_pool=8193, max_input=None, prompt_tokens=1008)
    assert big.tokens == 7121 and "clamped" in big.note
    small = plan_churn(1000, device_pool=4096, host_pool=8193, max_input=None, prompt_tokens=1008)
    assert small.tokens == 4160
    # write-back copies to the host only on eviction: the whole host pool is free for evicted prompts
    wb = plan_churn(
        20000, device_pool=4096, host_pool=4097, max_input=None, prompt_tokens=1008, write_policy="write_back"
    )
    assert wb.can_reach_host and wb.tokens == 4097 + 4096 - 1008 - 64
    # the baseline only needs the GPU pool emptied; no upper bound
    assert (
        plan_churn(20000, device_pool=4096, host_pool=0, max_input=None, prompt_tokens=1008, needs_host=False).tokens
        == 20000
    )
    assert plan_churn(0, device_pool=4096, host_pool=8193, max_input=None, prompt_tokens=1008).tokens == 0


def test_churn_chunks_follow_the_context_length():
    p = plan_churn(12288, device_pool=8192, host_pool=16385, max_input=2046, prompt_tokens=1008)
    assert p.chunk == 2046 and p.tokens == 12288


def test_ratio_one_host_pool_says_why_no_churn_works():
    p = plan_churn(6144, device_pool=4096, host_pool=4097, max_input=None, prompt_tokens=1008)
    assert not p.can_reach_host and p.tokens == p.low == 4160
    assert (
        "no churn can push a 1008-token prompt out of the GPU pool (4096 tokens) and keep it in the host pool" in p.note
    )
    assert "only 1 host tokens are left" in p.note and "--hicache-ratio >= 1.28" in p.note


def test_server_limits_from_server_info():
    sim = {
        "max_total_num_tokens": 8192,
        "max_req_input_len": 2047,
        "host_pool_tokens": 16385,
        "hicache_write_policy": "write_through",
    }
    assert server_limits(sim, None, None) == ServerLimits(8192, 16385, 2046, "write_through")
    real = {
        "max_total_num_tokens": 8192,
        "context_length": None,
        "max_req_input_len": 8191,
        "enable_hierarchical_cache": True,
        "hicache_ratio": 1.5,
        "hicache_size": 0,
    }
    assert server_limits(real, 8192, None).host_pool == 12288
    assert server_limits(real, 8192, 12353).host_pool == 12353  # the log's figure wins
    assert server_limits({**real, "enable_hierarchical_cache": False}, 8192, None).host_pool == 0
    assert server_limits({"context_len": 4096}, 8192, None).max_input == 4094
    assert server_limits(None, 8192, None) == ServerLimits(8192, None, None, None)
    # an answer the harness cannot use (harness.server.info refuses it) reads as unknown
    assert server_limits({"max_req_input_len": "lots", "hicache_ratio": -1}, 8192, None) == ServerLimits(
        8192, None, None, None
    )


def test_pool_over_twice_the_context_still_reaches_the_host():
    """GPU pool 8000, context 1500: half-pool churn requests (4000) would all be refused; churn
    sized from the server's input limit reaches the host tier on every re-ask."""
    info = {"max_total_num_tokens": 8000, "max_req_input_len": 1500}
    cfg = {**CFG, "lengths": [1000], "control": False}
    ctx = Ctx(TinyServer(8000, True, host=24000, max_input=1500), 8000)
    on = run(ctx, cfg, "on", server_info=info, host_pool_tokens=24000)
    churn = [ids for ids, lab in ctx.client.sent if lab.phase == "quality_churn"]
    assert churn and max(map(len, churn)) == 1499
    assert all(r.cached_host == 1000 and r.churn["failed"] == 0 for r in on if r.ask > 0)
    # the limit unknown: the first refused churn request halves the chunk, then it gets through
    ctx2 = Ctx(TinyServer(8000, True, host=24000, max_input=1500), 8000)
    on2 = run(ctx2, cfg, "on", host_pool_tokens=24000)
    assert all(r.cached_host == 1000 for r in on2 if r.ask > 0)
    assert on2[1].churn["failed"] == 2 and on2[1].churn["error"] == "http_400 (churn request of 4000 tokens)"
    assert on2[1].churn["chunk"] == 1000


def test_ratio_one_host_pool_is_not_exercised_with_the_reason():
    cfg = {**CFG, "lengths": [1000], "control": False}
    on = run(Ctx(TinyServer(4000, True, host=4001), 4000), cfg, "on", host_pool_tokens=4001)
    off = run(Ctx(TinyServer(4000, False), 4000), cfg, "off")
    rep = evaluate_parity(on, off, cfg=Quality(**cfg))
    assert rep.verdict == "NOT_EXERCISED"
    assert "0 of 8 re-asks hit the host tier: no churn can push a 1004-token prompt out of the GPU pool" in rep.reason
    assert "--hicache-ratio >= " in rep.reason

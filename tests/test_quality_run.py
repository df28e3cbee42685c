"""run_quality's request sequence and records, against an in-process stand-in for the client."""

from __future__ import annotations

import asyncio
import hashlib
from dataclasses import dataclass, field

import pytest

from harness.quality.parity import evaluate_parity
from harness.quality.run import plan_quality, resolve_tokens, run_quality
from harness.records import RequestRecord


class TinyServer:
    """Greedy outputs are a hash of the prompt; a prompt seen before is a device hit, or a host
    hit once at least ``pool`` tokens of other prompts were sent since (its KV left the GPU)."""

    def __init__(self, pool: int, hicache: bool):
        self.pool, self.hicache = pool, hicache
        self.sent: list[tuple[list[int], object]] = []
        self.last_seen: dict[tuple, int] = {}
        self.tokens = 0

    async def generate(self, req, labels, *, abort=None):
        ids = tuple(req.input_ids)
        self.sent.append((list(ids), labels))
        dev = host = 0
        if ids in self.last_seen:
            if self.tokens - self.last_seen[ids] < self.pool:
                dev = len(ids)
            elif self.hicache:
                host = len(ids)
        self.tokens += len(ids)
        self.last_seen[ids] = self.tokens
        h = hashlib.sha256(repr(ids).encode()).digest()
        out = [3 + b for b in h[: req.max_new_tokens]]
        top = [[[t, -0.1], [t + 1, -2.0]] for t in out] if req.top_logprobs_num else None
        return RequestRecord(variant=labels.variant, workload=labels.workload, phase=labels.phase,
                             repeat=labels.repeat, index=labels.index, rid=f"r{len(self.sent)}",
                             output_ids=out, output_logprobs=[-0.1] * len(out) if req.return_logprob else None,
                             top_logprobs=top, cached_tokens=dev + host, cached_device=dev, cached_host=host,
                             finish_reason="length")


@dataclass
class Ctx:
    client: TinyServer
    pool_tokens: int
    seed: int = 0
    variant: str = "v"
    vocab_size: int = 1000
    phases: list[str] = field(default_factory=list)
    rows: list = field(default_factory=list)

    def record(self, r):
        self.rows.append(r)

    def set_phase(self, p):
        self.phases.append(p)


CFG = dict(tasks=["needle", "aggregation"], lengths=["0.25x pool"], samples_per_task=2, max_new_tokens=4,
           churn_tokens="1.5x pool", reasks=2, top_logprobs=5, mode="auto", control=True)


def run(ctx, cfg, role):
    return asyncio.run(run_quality(ctx, cfg, role))


def test_resolve_tokens():
    assert resolve_tokens(100, None) == 100
    assert resolve_tokens("0.5x pool", 1000) == 500
    assert resolve_tokens(" 2 x pool", 1000) == 2000
    assert resolve_tokens("300", None) == 300
    with pytest.raises(ValueError):
        resolve_tokens("1x pool", None)


def test_plan_modes():
    assert plan_quality(CFG, 4000, have_tokenizer=False).mode == "token_ids"
    assert plan_quality(CFG, 4000, have_tokenizer=True).mode == "text"
    with pytest.raises(ValueError, match="tokenizer"):
        plan_quality({**CFG, "mode": "text"}, 4000, have_tokenizer=False)
    with pytest.raises(ValueError, match="unknown quality task"):
        plan_quality({**CFG, "tasks": ["bogus"]}, 4000, False)


def test_sequence_records_and_parity():
    on_ctx = Ctx(TinyServer(4000, hicache=True), 4000)
    on = run(on_ctx, CFG, "on")
    assert len(on) == 2 * 2 * 3 and on_ctx.rows == on
    assert [r.ask for r in on[:3]] == [0, 1, 2]
    assert all(r.mode == "token_ids" and r.correct is None and r.prompt_tokens == 1000 for r in on)
    assert all(r.cached_host == 1000 for r in on if r.ask > 0)  # churn pushed each one to host
    assert all(not r.cached_host for r in on if r.ask == 0)
    assert {"quality_cold", "quality_churn", "quality_reask"} <= set(on_ctx.phases)
    # churn: 1.5x pool in chunks of half a pool = 3 prompts before each re-ask, distinct first tokens
    churn = [ids for ids, lab in on_ctx.client.sent if lab.phase == "quality_churn"]
    assert len(churn) == 3 * 2 * 4 and all(len(c) == 2000 for c in churn)
    samples = [ids for ids, lab in on_ctx.client.sent if lab.phase != "quality_churn"]
    firsts = [c[0] for c in churn] + list({s[0] for s in map(tuple, samples)})
    assert len(firsts) == len(set(firsts))

    off_ctx = Ctx(TinyServer(4000, hicache=False), 4000)
    off = run(off_ctx, CFG, "off")
    assert {r.arm_role for r in off} == {"off", "control"} and len(off) == 2 * len(on)
    assert [r.input_hash for r in off if r.arm_role == "off"] == [r.input_hash for r in on]
    rep = evaluate_parity(on, off, cfg=CFG)
    assert rep.verdict == "PASS" and rep.reasks == rep.reasks_with_host_hit == 8


def test_no_churn_is_not_exercised():
    cfg = {**CFG, "churn_tokens": 0, "control": False}
    on = run(Ctx(TinyServer(4000, True), 4000), cfg, "on")
    off = run(Ctx(TinyServer(4000, False), 4000), cfg, "off")
    assert all(r.cached_device == 1000 for r in on if r.ask > 0)
    assert evaluate_parity(on, off, cfg=cfg).verdict == "NOT_EXERCISED"


def test_text_mode_scores_with_tokenizer():
    pytest.importorskip("tokenizers")
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    from harness.quality.tasks import filler_corpus

    tok = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator(filler_corpus(500), trainers.WordLevelTrainer(special_tokens=["[UNK]"]))

    @dataclass
    class TCtx(Ctx):
        tokenizer: object = None

    from harness.quality.fit import as_tokenizer

    ctx = TCtx(TinyServer(4000, True), 4000, tokenizer=as_tokenizer(tok))
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
        async def confirm_death(self):
            return True

    ctx = DCtx(Dead(4000, True), 4000)
    recs = run(ctx, CFG, "off")
    assert len(recs) == 1 and recs[0].error == "connection" and len(ctx.client.sent) == 1

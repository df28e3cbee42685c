"""dataset_replay: requests from a local dataset or trace file (`harness.workloads.datasets`), sent on a
clock — ShareGPT conversations, long-document QA (LooGLE / LongBench: the questions on one
document share it as a prefix) or a mooncake-style trace replayed on its own clock.

Arrivals: ``arrivals: trace`` (mooncake only) sends each request at its timestamp (``speed``
times as fast); otherwise Poisson, gamma or constant at ``rate`` (a list: a sweep, one phase per
rate, the same requests each point; ``flush_between_points`` empties the cache between them),
or closed loop at ``max_concurrency`` — the machinery and figures of
`harness.workloads.arrivals` and `harness.workloads.slo`, as for open_loop. Phases: ``trace``,
or one per load point (``rate_4``, ``conc_8``). The run stops when the file's requests run out
(``max_requests`` cuts it; ``duration_s``, when given, too).

Tokens: every request is sent as token ids, so each variant gets exactly the same ones. Text
(ShareGPT, doc_qa) is tokenized here with ``tokenizer`` (a ``tokenizer.json`` or a model folder;
default: the variant's model_path) — ``mode: text`` requires one, ``mode: token_ids`` never uses
one (ids made from the words, `harness.workloads.datasets.WordIds`), ``mode: auto`` uses one when there is
one and otherwise falls back to word ids **with a warning on the console** (never silently).
Traces need no tokenizer: a hash id is ``block_tokens`` seeded ids. Output lengths: the
dataset's (the reply's tokens, the trace's ``output_length``), capped at ``max_output_tokens``,
or ``output_tokens`` for all; ``ignore_eos``. A request whose prompt is over
``max_prompt_tokens`` is skipped (the console says how many).

Relative paths resolve against the scenario file's folder. Each repeat sends the same text again
(give ``flush_before: true`` for a cold start per repeat); a trace's blocks are seeded per
repeat, so its repeats do not hit each other's cache.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import model_validator

from harness.spec.errors import field_error
from harness.spec.numbers import WEEK_S, count, ranged, seconds, tokens
from harness.spec.values import TokenSize, TokenSizeT
from harness.store.records import RequestRecord
from harness.workloads import datasets as D
from harness.workloads.arrivals import CLOCK_DERIVED, CLOCK_ROWS, Load, Outgoing, Point, point_figures, run_point
from harness.workloads.config import WorkloadConfig
from harness.workloads.context import WorkloadContext, WorkloadScope
from harness.workloads.estimating import EstimateContext, WorkEstimate, est, point_requests
from harness.workloads.kind import WorkloadKind
from harness.workloads.prompts import derive_seed
from harness.workloads.slo import SLOFields

log = logging.getLogger(__name__)

TRACE_PHASE = "trace"


class DatasetReplay(Load, SLOFields, WorkloadConfig):
    """A local dataset or trace file replayed on a clock."""

    kind: Literal["dataset_replay"]
    format: Literal["sharegpt", "doc_qa", "mooncake"]
    path: str  # the file; relative: to the scenario's folder
    tokenizer: str | None = None  # tokenizer.json or a model folder; default: the variant's model_path
    mode: Literal["auto", "text", "token_ids"] = "auto"
    max_requests: count("requests") | None = None  # the first N usable requests of the file
    order: Literal["file", "shuffled"] = "file"
    max_prompt_tokens: TokenSizeT = TokenSize(pool_fraction=0.5)  # longer prompts are skipped
    output_tokens: tokens() | None = None  # for every request; default: the dataset's, capped below
    max_output_tokens: tokens() = 256
    block_tokens: ranged(int, 1, 65_536, "tokens per hash id") = D.MOONCAKE_BLOCK_TOKENS  # mooncake: tokens per hash id
    arrivals: Literal["trace", "poisson", "gamma", "constant"] = "poisson"
    speed: ranged(float, 0.0001, 1e6, "x the trace's pace") = 1.0  # arrivals: trace, this many times as fast
    duration_s: seconds(0.01, WEEK_S) | None = (
        None  # each load point at most this long (default: until the requests run out)
    )
    flush_between_points: bool = True  # a sweep replays the same requests: start each point cold

    @model_validator(mode="after")
    def _check_replay(self):
        if self.arrivals == "trace":
            if self.format != "mooncake":
                raise field_error(
                    f"arrivals: trace needs timestamps: only the mooncake format has them, not {self.format}"
                )
            if self.rate is not None:
                raise field_error("arrivals: trace sets its own clock: leave out rate (speed scales it)")
            if isinstance(self.max_concurrency, list):
                raise field_error("arrivals: trace is one load point: max_concurrency must be one number")
            if self.order != "file":
                raise field_error("arrivals: trace keeps the trace's order: leave out order: shuffled")
        elif self.speed != 1.0:
            raise field_error("speed scales a trace's clock: it needs arrivals: trace")
        if self.output_tokens is not None and self.output_tokens > self.max_output_tokens:
            raise field_error(
                f"output_tokens ({self.output_tokens}) is over max_output_tokens ({self.max_output_tokens})"
            )
        return self

    def new_tokens(self) -> int:
        return self.output_tokens or self.max_output_tokens

    def longest_request_tokens(self, pool_tokens: int) -> int:
        return self.max_prompt_tokens.resolve(pool_tokens) + self.new_tokens()

    def input_problems(self, base_dir: Path | None) -> list[tuple[tuple, str]]:
        """The file, read as the run reads it (an empty, truncated, mistyped or non-UTF-8 file
        started the run and failed its variant; some crashed it, exit 3). A path where nothing is
        yet is no problem here (the data may be put on the box that runs it; the estimate says it
        cannot read it, the run fails the variant naming it)."""
        path = resolve_path(self.path, base_dir)
        if not os.path.lexists(path):
            return []
        try:
            requests = D.load_dataset(self.format, path)
        except D.DatasetError as exc:
            return [(("path",), str(exc))]
        if not requests:
            return [(("path",), f"{path}: no usable request in the {self.format} file")]
        return []

    def load_points(self) -> list[Point]:
        if self.arrivals == "trace":
            cap = self.max_concurrency if isinstance(self.max_concurrency, int) else None
            return [Point("rate", 0.0, None, cap, label=TRACE_PHASE)]
        return self.points()


def resolve_path(path: str, base: Path | None) -> Path:
    """``path`` with ``~`` expanded; a relative one against ``base`` (the scenario's folder)."""
    p = Path(path).expanduser()
    return p if p.is_absolute() or base is None else base / p


def _encoder(ctx: WorkloadContext, cfg: DatasetReplay) -> Any:
    """The text encoder of ``cfg.mode`` (see the module docstring); says so when it falls back."""
    if cfg.mode == "token_ids":
        return D.WordIds(ctx.vocab_size)
    where = resolve_path(cfg.tokenizer, ctx.scenario_dir) if cfg.tokenizer else ctx.model_path
    tok = D.load_text_tokenizer(where)
    if tok is not None:
        return tok
    if cfg.mode == "text":
        raise ValueError(
            f"mode: text needs a tokenizer, and there is none at {where or '(no model path)'}: "
            "give tokenizer: (a tokenizer.json or a model folder), or mode: token_ids"
        )
    log.warning(
        "%s: no tokenizer at %s: sending token ids made from the words of the text (lengths "
        "approximate, not the model's tokens); give tokenizer: for real tokens, or mode: token_ids "
        "to say this is meant",
        cfg.name,
        where or "(no model path)",
    )
    return D.WordIds(ctx.vocab_size)


def prepare(ctx: WorkloadContext, cfg: DatasetReplay, requests: Sequence[D.DatasetRequest]) -> tuple[list, list[int]]:
    """(builders, kept dataset indexes): one ``() -> Outgoing`` per usable request, in order;
    prompts over ``max_prompt_tokens`` skipped (the console says how many)."""
    longest = ctx.tokens(cfg.max_prompt_tokens)
    salt = (ctx.seed, cfg.name, ctx.repeat)
    parts = D.PartIds(_encoder(ctx, cfg)) if cfg.format != "mooncake" else None
    builders, kept, skipped = [], [], 0
    for req in requests:
        if cfg.max_requests is not None and len(builders) >= cfg.max_requests:
            break
        if parts is None:
            n, out = req.input_length or 0, req.output_length or 1
        else:
            n = parts.length(req)
            out = len(parts.encoder.encode(req.reply)) if req.reply else 1
        if n < 1 or n > longest:
            skipped += 1
            continue
        out = min(cfg.output_tokens or max(1, out), cfg.max_output_tokens)
        if parts is None:
            builders.append(
                lambda req=req, out=out: Outgoing(D.trace_input_ids(req, cfg.block_tokens, ctx.vocab_size, salt), out)
            )
        else:
            builders.append(lambda req=req, out=out: Outgoing(parts.ids(req), out))
        kept.append(req.index)
    if skipped:
        log.warning(
            "%s: skipped %d of the file's requests: prompt empty or over max_prompt_tokens (%d)",
            cfg.name,
            skipped,
            longest,
        )
    return builders, kept


async def run(ctx: WorkloadContext, cfg: DatasetReplay) -> None:
    w = WorkloadScope(ctx, cfg)
    path = resolve_path(cfg.path, ctx.scenario_dir)
    try:
        requests = D.load_dataset(cfg.format, path)
    except D.DatasetError as exc:
        raise ValueError(str(exc)) from None
    log.info("%s: %s (%s, sha256 %s): %d requests", w.name, path, cfg.format, D.file_digest(path), len(requests))
    if cfg.order == "shuffled":
        requests = D.shuffled(requests, ctx.seed)
    builders, kept = prepare(ctx, cfg, requests)
    if not builders:
        raise ValueError(f"{path}: no usable request (all over max_prompt_tokens, or none in the file)")
    by_index = {r.index: r for r in requests}
    offsets = None
    if cfg.arrivals == "trace":
        offsets = D.trace_offsets_ns([by_index[i] for i in kept], cfg.speed)
        if cfg.duration_s is not None:
            offsets = [o for o in offsets if o < cfg.duration_s * 1e9]
    for k, point in enumerate(cfg.load_points()):
        if k and cfg.flush_between_points and not await ctx.client.flush_cache():
            log.warning(
                "%s: /flush_cache refused before %s: this point may hit the last one's cache", w.name, point.phase
            )
        await run_point(
            w,
            cfg,
            point,
            lambda i: builders[i](),
            limit=len(builders),
            offsets_ns=offsets,
            seed=derive_seed(ctx.seed, w.name, ctx.repeat, point.phase),
        )


def _span_s(records: Sequence[RequestRecord]) -> float | None:
    """One repeat's span of the measured requests' schedule (the mean over the repeats; the
    figures multiply it by the repeats again)."""
    spans = []
    for rep in sorted({r.repeat for r in records}):
        sched = [r.scheduled_ns for r in records if not r.warmup and r.scheduled_ns is not None and r.repeat == rep]
        if len(sched) > 1 and max(sched) > min(sched):
            spans.append((max(sched) - min(sched)) / 1e9)
    return sum(spans) / len(spans) if spans else None


def phase_figures(cfg: DatasetReplay | None, phase: str, records: Sequence[RequestRecord]) -> dict[str, Any]:
    """A load point's figures (`arrivals.point_figures`); goodput over ``duration_s`` less the
    warm-up and cool-down, or over the measured requests' span when the replay has no duration."""
    if cfg is None:
        return point_figures(None, phase, records, [], None)
    window = cfg.measured_window_s() if cfg.duration_s is not None else _span_s(records)
    return point_figures(cfg, phase, records, cfg.load_points(), window)


def _file_requests(cfg: DatasetReplay, c: EstimateContext) -> tuple[list[tuple[int, int, int]], list[str]]:
    """(prompt tokens, output tokens, tokens an earlier request shares with it) of the requests
    the replay would send (max_requests, max_prompt_tokens applied), and the estimate's notes. Shared: a
    trace's leading hash ids seen before (block_tokens each), a document asked about before. Text
    lengths are word counts (`datasets.WordIds`): approximate, no tokenizer is loaded here."""
    requests = D.load_dataset(cfg.format, resolve_path(cfg.path, c.scenario_dir))
    if cfg.order == "shuffled":
        requests = D.shuffled(requests, 0)
    longest = c.size(cfg.max_prompt_tokens)
    parts = D.PartIds(D.WordIds(32000)) if cfg.format != "mooncake" else None
    warn = [] if parts is None else ["prompt lengths are the texts' word counts (the tokenizer's differ)"]
    seen: set = set()
    out: list[tuple[int, int, int]] = []
    for req in requests:
        if cfg.max_requests is not None and len(out) >= cfg.max_requests:
            break
        if parts is None:
            n, o = req.input_length or 0, req.output_length or 1
            chains = [tuple(req.hash_ids[: k + 1]) for k in range(len(req.hash_ids))]
            shared = min(n, cfg.block_tokens * next((k for k, ch in enumerate(chains) if ch not in seen), len(chains)))
        else:
            n, o = parts.length(req), (len(parts.encoder.encode(req.reply)) if req.reply else 1)
            chains = [req.parts[:-1]] if len(req.parts) > 1 else []
            shared = sum(len(parts.of(x)) for x in req.parts[:-1]) if chains and chains[0] in seen else 0
        if n < 1 or (longest is not None and n > longest):
            continue
        seen.update(chains)
        out.append((n, min(cfg.output_tokens or max(1, o), cfg.max_output_tokens), shared))
    return out, warn


def estimate(cfg: DatasetReplay, c: EstimateContext) -> WorkEstimate:
    """Reads the file (nothing else): each load point sends the file's usable requests (at
    ``rate``: as many as ``duration_s`` allows; a trace: on its own clock, ``speed`` times as
    fast). Computed: every prompt (the upper bound); expected: what an earlier request shares
    with it (a document's questions, a trace's leading hash ids) is not computed again while the
    file's distinct tokens fit the GPU pool (or, with HiCache, the host pool)."""
    try:
        reqs, notes = _file_requests(cfg, c)
    except (D.DatasetError, OSError) as exc:
        return est(cfg.name, cfg.kind, 0, None, None, None, 0, None, [f"cannot read the dataset: {exc}"])
    r = c.repeats
    if not reqs:
        return est(cfg.name, cfg.kind, 0, 0, 0, 0, 0, 0.0, ["no usable request in the file"], notes=notes)
    tokens = sum(n for n, _, _ in reqs)
    distinct = tokens - sum(x for _, _, x in reqs)
    host_ok, w = c.host_window("the file's distinct tokens", distinct)
    warn: list[str] = []
    once = distinct if (host_ok or not c.evicted(distinct)) else tokens
    avg_in, avg_out = tokens / len(reqs), sum(o for _, o, _ in reqs) / len(reqs)
    n_total, clock = 0, 0.0
    sent = computed = expected = 0
    for point in cfg.load_points():
        if cfg.arrivals == "trace":
            offsets = D.trace_offsets_ns(
                [D.DatasetRequest(i, timestamp_ms=t) for i, t in enumerate(_stamps(cfg, c))], cfg.speed
            )
            span = offsets[-1] / 1e9 if offsets else 0.0
            k = len(reqs) if cfg.duration_s is None else sum(1 for o in offsets if o < cfg.duration_s * 1e9)
            clock += span if cfg.duration_s is None else min(span, cfg.duration_s)
        elif point.rate is not None:
            k = len(reqs) if cfg.duration_s is None else min(len(reqs), round(point.rate * cfg.duration_s))
            clock += k / point.rate
            _, m = point_requests(point.rate, point.cap, k / point.rate, round(avg_in), round(avg_out), c)
            warn += [f"{point.phase}: {x}" for x in m]
        else:
            k = len(reqs)  # a closed loop sends them all (or until duration_s)
        frac = k / len(reqs)
        n_total += k
        sent += round(tokens * frac)
        computed += round(tokens * frac)
        expected += round(once * frac)
    return est(
        cfg.name,
        cfg.kind,
        n_total * r,
        sent * r,
        computed * r,
        expected * r,
        round(n_total * avg_out) * r,
        None if c.decode_tok_s is None else 0.0,  # decoding overlaps the clock
        warn + w + c.too_long(max(n for n, _, _ in reqs)),
        distinct,
        clock_s=clock * r,
        notes=notes,
    )


def _stamps(cfg: DatasetReplay, c: EstimateContext) -> list[float]:
    """The trace's timestamps (ms) of the requests the replay sends."""
    longest = c.size(cfg.max_prompt_tokens)
    out = []
    for req in D.load_dataset(cfg.format, resolve_path(cfg.path, c.scenario_dir)):
        if cfg.max_requests is not None and len(out) >= cfg.max_requests:
            break
        n = req.input_length or 0
        if n >= 1 and (longest is None or n <= longest):
            out.append(req.timestamp_ms or 0.0)
    return out


KIND = WorkloadKind(
    config=DatasetReplay,
    estimate=estimate,
    load_points=True,
    run=run,
    derived=CLOCK_DERIVED,
    report_rows=CLOCK_ROWS,
    tier_hit_phases=True,
    phase_figures=phase_figures,
)

"""What a scenario will cost before it runs: prompt tokens per variant, the GPU and host pools its
"x pool" sizes resolve against, whether each working set can produce host-tier hits, and a
duration from stated speeds. Pure: reads the loaded `Scenario` (and a model's config.json when
it needs bytes), starts nothing. `harness run --dry-run` prints `estimate_run(...).to_lines()`.

Token arithmetic, per variant and per repeat (``scenario.repeats``), from each workload's config
exactly as its module sends it: each kind declares it (``KIND = WorkloadKind(..., estimate=...)``,
`harness.workloads.estimating`; its docstring says what it counts), so this module names no
kind. Kinds that send on a clock (load points of ``duration_s``, a trace's span, a client's
rate) also give their clock: such a workload lasts its clock or its serving, whichever is
longer; think times add to the serving. L = prompt tokens, P = GPU pool, H = host pool.

- quality (once per variant, not per repeat): every sample (tasks x lengths x samples_per_task)
  asked 1 + reasks times, churn before each re-ask; the OFF baseline also runs the control pass
  (the same asks; its re-asks without churn). The churn is what the arm will send on that
  variant: its planner's (``harness.quality.churn.plan_churn``, which clamps the configured
  churn into the host-tier window of each variant) where the tree has one, else the configured
  churn in full chunks of min(churn, P/2).

"sent" counts every prompt token; "computed" is an upper bound on the tokens the server must
prefill: prompts expected to hit the GPU tier (an immediate repeat, a later multi-turn turn's
history, the fan-out prefix, the control pass's re-asks, a second pass whose working set fits
the GPU pool) are not counted, and everything that needs the host tier is counted as if
recomputed (HiCache can only make it faster). Duration = computed / prefill_tok_s + output
tokens / decode_tok_s (per request; concurrent requests decode together), or a clocked
workload's clock when longer, + server starts
(``startup_s`` per attempt; an expected ``host_memory`` refusal is retried ``startup_retries``
times) + the idle window and the final liveness wait. Speeds are the caller's (a scenario's
measured numbers, e.g. seed 000's 1010 tok/s cold prefill); prefill is taken as flat in the
prompt length.

Host-tier hits need a prompt to be pushed out of the GPU pool and still be on the host when it
comes back. sglang's host tier is inclusive: write_through keeps a host copy of every page on
the GPU, and host eviction only takes pages that are no longer on the GPU ("The host memory
should be larger than the device memory with the current protocol", pool_host). So what comes
back must have had more than P and at most H tokens of traffic since its last use (itself
included): a working set W with P < W <= H, or quality churn with P < churn + L <= H. At ratio 1
(H = P + one page) that window is empty: only the overlap of concurrent requests gives host hits.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from typing import Any, Iterable, Mapping, Sequence

from harness.core.model_config import ModelConfigError, ModelShape, load_model_shape
from harness.run import lanes
from harness.run.hostpool import (
    DEFAULT_RESERVE_GIB,
    check_budget,
    host_size_split,
    kv_dtype_bytes_for,
    pool_args_from_server_args,
    predict_gpu_pool_tokens,
    predict_host_pool,
)
from harness.server import logscan
from harness.store import gpu_time
from harness.workloads import kinds
from harness.workloads.estimating import EstimateContext, WorkEstimate
from harness.workloads.estimating import est as _est
from harness.workloads.estimating import size as _size

try:  # the quality arm's churn planner, where this tree has it: the estimate sends what the arm sends
    from harness.quality import churn as _churn_planner
except ImportError:  # pragma: no cover - older trees: full chunks of the configured churn
    _churn_planner = None  # type: ignore[assignment]

GIB = 1024**3
SIM_DEFAULT_POOL_TOKENS = 20480  # harness.sim.server.DEFAULT_MAX_TOTAL_TOKENS (not imported: it pulls in uvicorn)

# Where the GPU pool of a variant came from.
POOL_ARG = "--max-total-tokens"
POOL_SIM_DEFAULT = "simulator default"
POOL_STATED = "stated"
POOL_PREDICTED = "predicted"
POOL_UNKNOWN = "unknown"


# ----------------------------------------------------------------------------- results


@dataclass(frozen=True)
class PoolEstimate:
    """A variant's pools as the estimate sees them (tokens per TP rank; the GPU pool is
    sglang's ``max_total_num_tokens``)."""

    gpu_tokens: int | None
    source: str  # POOL_ARG | POOL_SIM_DEFAULT | POOL_STATED | POOL_PREDICTED | POOL_UNKNOWN
    host_tokens: int | None  # KV host pool; 0 with HiCache off; None when unknown
    host_gb_per_rank: float | None = None  # KV + mamba host pools, when the model config is readable
    context_tokens: int | None = None
    note: str = ""

    @property
    def known(self) -> bool:
        return self.gpu_tokens is not None

    @property
    def host_ratio(self) -> float | None:
        if self.gpu_tokens is None or self.host_tokens is None or self.gpu_tokens <= 0:
            return None
        return self.host_tokens / self.gpu_tokens


def _sum(values: Iterable[int | float | None]) -> Any:
    vals = list(values)
    return None if any(v is None for v in vals) else sum(vals)  # type: ignore[arg-type]


@dataclass(frozen=True)
class VariantEstimate:
    name: str
    expect: str
    expect_cause: str | None
    hicache: bool
    startup_attempts: int
    pool: PoolEstimate
    work: tuple[WorkEstimate, ...]
    prefill_tok_s: float | None  # None: no speed given, no durations
    decode_s: float | None  # None: no decode speed given
    overhead_s: float  # server starts, idle window, final liveness wait
    warnings: tuple[str, ...] = ()
    gpus: int = 1  # the GPUs it holds (tp_size): its GPU-minutes are its seconds x gpus / 60
    startup_s: float = 0.0  # of overhead_s: its server starts (every attempt)

    @property
    def sent_tokens(self) -> int | None:
        return _sum(w.sent_tokens for w in self.work)

    @property
    def computed_tokens(self) -> int | None:
        return _sum(w.computed_tokens for w in self.work)

    @property
    def expected_tokens(self) -> int | None:
        return _sum(w.expected_tokens for w in self.work)

    def _seconds(self, tokens: str) -> float | None:
        """Each workload's serving (``tokens`` of it computed, then decoded) or its own clock,
        whichever is longer, plus its waits; then the starts and idle windows."""
        walls = [w.wall_s(getattr(w, tokens), self.prefill_tok_s) for w in self.work]
        return None if any(x is None for x in walls) else sum(walls) + self.overhead_s  # type: ignore[arg-type]

    @property
    def seconds(self) -> float | None:
        """Upper bound: every token that needs the host tier is recomputed."""
        return self._seconds("computed_tokens")

    @property
    def expected_seconds(self) -> float | None:
        """A healthy stack: host-tier hits wherever the pools allow them."""
        return self._seconds("expected_tokens")

    def bucket_seconds(self) -> dict[str, float] | None:
        """Its expected seconds in `harness.store.gpu_time`'s buckets (a healthy stack): startup, work
        (the workloads), quality (the quality arm), idle (the idle window and the final liveness
        wait); cooldown is not estimated (0). None without a prefill speed."""
        walls = {}
        for w in self.work:
            s = w.wall_s(w.expected_tokens, self.prefill_tok_s)
            if s is None:
                return None
            walls[w.kind == "quality"] = walls.get(w.kind == "quality", 0.0) + s
        if self.work and self.prefill_tok_s is None:
            return None
        return {
            gpu_time.STARTUP: self.startup_s,
            gpu_time.WORK: walls.get(False, 0.0),
            gpu_time.QUALITY: walls.get(True, 0.0),
            gpu_time.COOLDOWN: 0.0,
            gpu_time.IDLE: max(0.0, self.overhead_s - self.startup_s),
        }

    @property
    def gpu_minutes(self) -> dict[str, float] | None:
        """`bucket_seconds` as GPU-minutes (x ``gpus`` / 60)."""
        secs = self.bucket_seconds()
        return None if secs is None else {b: v * self.gpus / 60.0 for b, v in secs.items()}

    @property
    def design_warnings(self) -> tuple[str, ...]:
        """What its workloads will not exercise as designed (no cache hit at all, no host-tier
        hit, refused prompts), each prefixed with its workload: the kinds' estimate hooks'
        warnings, which need no speed (`design_warnings`)."""
        return tuple(f"{w.name}: {m}" for w in self.work for m in w.warnings)

    @property
    def all_warnings(self) -> tuple[str, ...]:
        """The variant's own warnings (pools, host memory), the design warnings, then what the
        estimate could not count."""
        notes = tuple(f"{w.name}: {m}" for w in self.work for m in w.notes)
        return tuple(self.warnings) + self.design_warnings + notes


@dataclass(frozen=True)
class RunEstimate:
    scenario: str
    prefill_tok_s: float | None
    decode_tok_s: float | None
    startup_s: float
    repeats: int
    variants: tuple[VariantEstimate, ...]
    limit_minutes: float | None = None
    notes: tuple[str, ...] = ()

    @property
    def sent_tokens(self) -> int | None:
        return _sum(v.sent_tokens for v in self.variants)

    @property
    def computed_tokens(self) -> int | None:
        return _sum(v.computed_tokens for v in self.variants)

    @property
    def expected_tokens(self) -> int | None:
        return _sum(v.expected_tokens for v in self.variants)

    @property
    def seconds(self) -> float | None:
        """Upper bound of the whole run (nothing from the host tier)."""
        return _sum(v.seconds for v in self.variants)

    @property
    def expected_seconds(self) -> float | None:
        return _sum(v.expected_seconds for v in self.variants)

    @property
    def gpu_minutes(self) -> dict[str, float] | None:
        """Expected GPU-minutes per `harness.store.gpu_time` bucket over its variants (None: no speed)."""
        per = [v.gpu_minutes for v in self.variants]
        if any(p is None for p in per):
            return None
        return {b: sum(p[b] for p in per) for b in gpu_time.BUCKETS}  # type: ignore[index]

    @property
    def minutes(self) -> float | None:
        s = self.seconds
        return None if s is None else s / 60.0

    @property
    def expected_minutes(self) -> float | None:
        s = self.expected_seconds
        return None if s is None else s / 60.0

    @property
    def over_limit(self) -> bool:
        """The upper bound exceeds ``limit_minutes``."""
        m = self.minutes
        return self.limit_minutes is not None and m is not None and m > self.limit_minutes

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.update(
            sent_tokens=self.sent_tokens,
            computed_tokens=self.computed_tokens,
            expected_tokens=self.expected_tokens,
            seconds=self.seconds,
            expected_seconds=self.expected_seconds,
            over_limit=self.over_limit,
        )
        for vd, v in zip(d["variants"], self.variants):
            vd.update(
                sent_tokens=v.sent_tokens,
                computed_tokens=v.computed_tokens,
                expected_tokens=v.expected_tokens,
                seconds=v.seconds,
                expected_seconds=v.expected_seconds,
                gpu_minutes=v.gpu_minutes,
                warnings=list(v.all_warnings),
            )
        d["gpu_minutes"] = self.gpu_minutes
        return d

    def side_by_side_line(self, gpu_ids: Sequence[str]) -> str:
        """``--dry-run --gpus``: the expected wall time with the variants side by side on
        ``gpu_ids`` (`harness.run.lanes`' rule), next to one after another; the GPU-minutes do not
        change (each variant holds its GPUs as long)."""
        spans = [(v.expected_seconds, v.gpus) for v in self.variants]
        if any(s is None for s, _ in spans):
            return f"side by side on GPUs {','.join(gpu_ids)}: no speed given, no wall time"
        wall = lanes.planned_wall_s(spans, gpu_ids)  # type: ignore[arg-type]
        seq = sum(s for s, _ in spans)  # type: ignore[misc]
        return (
            f"side by side on GPUs {','.join(gpu_ids)}: expected wall {wall / 60:.1f} min "
            f"(one after another {seq / 60:.1f} min); GPU-minutes unchanged"
        )

    def to_lines(self) -> list[str]:
        """A text table (one row per variant, then the total) and each variant's warnings.
        "est. min" assumes a healthy stack (host-tier hits where the pools allow them), "max min"
        counts everything that needs the host tier as recomputed."""
        speed = f"prefill {_num(self.prefill_tok_s)} tok/s" if self.prefill_tok_s else "no prefill speed (no minutes)"
        speed += f", decode {_num(self.decode_tok_s)} tok/s" if self.decode_tok_s else ", decode not counted"
        speed += f", {_num(self.startup_s)} s per server start" if self.startup_s else ", starts not counted"
        lines = [f"estimate for {self.scenario}: {speed}, {self.repeats} repeat{'s' if self.repeats != 1 else ''}"]
        head = (
            "variant",
            "expect",
            "GPU pool",
            "host pool",
            "prefill tokens",
            "computed max",
            "est. min",
            "max min",
            "GPU-min",
        )
        rows = []
        for v in self.variants:
            expect = v.expect if v.expect == "ok" else f"{v.expect}:{v.expect_cause or '?'}"
            gpu = _tok(v.pool.gpu_tokens) + (
                "" if v.pool.source == POOL_ARG or not v.pool.known else f" ({v.pool.source})"
            )
            if not v.hicache:
                host = "-"
            elif v.pool.host_tokens is None:
                host = "unknown"
            else:
                host = f"{_tok(v.pool.host_tokens)} ({_num(v.pool.host_ratio, 2)}x)"
                if v.pool.host_gb_per_rank is not None:
                    host += f" {v.pool.host_gb_per_rank:.2f} GB/rank"
            if v.expect != "ok":
                host += f", {v.startup_attempts} start{'s' if v.startup_attempts != 1 else ''}"
            rows.append(
                (
                    v.name,
                    expect,
                    gpu,
                    host,
                    _tok(v.sent_tokens),
                    _tok(v.computed_tokens),
                    _min(v.expected_seconds),
                    _min(v.seconds),
                    _gpu_min(v.gpu_minutes),
                )
            )
        rows.append(
            (
                "total",
                "",
                "",
                "",
                _tok(self.sent_tokens),
                _tok(self.computed_tokens),
                _min(self.expected_seconds),
                _min(self.seconds),
                _gpu_min(self.gpu_minutes),
            )
        )
        widths = [max(len(str(r[i])) for r in [head, *rows]) for i in range(len(head))]

        def fmt(r: Sequence[str]) -> str:
            return "  ".join(
                str(c).ljust(w) if i < 4 else str(c).rjust(w) for i, (c, w) in enumerate(zip(r, widths))
            ).rstrip()

        rule = "  ".join("-" * w for w in widths)
        lines += [fmt(head), rule, *(fmt(r) for r in rows[:-1]), rule, fmt(rows[-1])]
        gm = self.gpu_minutes
        if gm is not None:
            lines.append(
                "expected GPU-minutes: "
                + ", ".join(f"{b} {gm[b]:.1f}" for b in gpu_time.BUCKETS if b != gpu_time.COOLDOWN)
                + " (cooldown not estimated)"
            )
        if self.limit_minutes is not None and self.minutes is not None:
            verdict = "OVER" if self.over_limit else "within"
            lines.append(f"upper bound {self.minutes:.1f} min: {verdict} the {_num(self.limit_minutes)}-minute limit")
        for v in self.variants:
            ws = v.all_warnings
            if ws:
                lines.append(f"{v.name}:")
                lines += [f"  - {w}" for w in ws]
        lines += [f"note: {n}" for n in self.notes]
        return lines


def _gpu_min(minutes: Mapping[str, float] | None) -> str:
    return "?" if minutes is None else f"{sum(minutes.values()):.1f}"


def _min(seconds: float | None) -> str:
    return "?" if seconds is None else f"{seconds / 60:.1f}"


def _num(v: float | None, digits: int = 1) -> str:
    if v is None:
        return "?"
    return f"{v:.{digits}f}".rstrip("0").rstrip(".") if v != int(v) else f"{int(v)}"


def _tok(v: int | None) -> str:
    return "?" if v is None else f"{v:,}"


# ----------------------------------------------------------------------------- pools


def _arg(args: Mapping[str, Any], flag: str) -> Any:
    v = args.get(flag)
    return None if v is False else v


def _shape_of(variant: Any) -> tuple[ModelShape | None, str]:
    try:
        return load_model_shape(variant.model_path), ""
    except (ModelConfigError, OSError, TypeError, ValueError) as e:
        return None, f"model config unreadable ({e})"


def variant_pool(
    scenario: Any,
    variant: Any,
    *,
    gpu_pool_tokens: int | None = None,
    gpu_mem_gib: float | None = None,
    shape: ModelShape | None = None,
    shape_note: str = "",
) -> PoolEstimate:
    """The GPU pool a variant's "x pool" sizes resolve against, and its host pool, before launch.

    GPU pool: ``--max-total-tokens`` in the variant's merged args (sglang caps it at what fits,
    so it is exact when it fits); for ``backend: sim`` without it, the simulator's default; else
    ``gpu_pool_tokens`` (a pool stated for this box, e.g. read from an earlier run's status.json);
    else a prediction from config.json and ``gpu_mem_gib`` when ``--mem-fraction-static`` is
    given; else unknown (it is known only once the server reports ``max_total_num_tokens``)."""
    args = dict(variant.args or {})
    pool_args = pool_args_from_server_args(args)
    tp = int(variant.tp_size or 1)
    context = _arg(args, "--context-length")
    context_tokens = (
        int(context) if context not in (None, True) else (shape.max_position_embeddings if shape is not None else None)
    )
    notes: list[str] = []
    if pool_args.max_total_tokens is not None:
        gpu, source = pool_args.max_total_tokens, POOL_ARG
        page = max(1, pool_args.page_size)
        gpu = max(page, gpu // page * page)
    elif variant.backend == "sim":
        gpu, source = SIM_DEFAULT_POOL_TOKENS, POOL_SIM_DEFAULT
    elif gpu_pool_tokens is not None:
        gpu, source = int(gpu_pool_tokens), POOL_STATED
    else:
        gpu, source = None, POOL_UNKNOWN
        mfs = _arg(args, "--mem-fraction-static")
        if gpu_mem_gib is None:
            notes.append(
                "GPU pool unknown before launch: no --max-total-tokens, no stated pool and no "
                'stated GPU memory; "x pool" sizes resolve only when the server reports '
                "max_total_num_tokens"
            )
        elif shape is None:
            notes.append(f"GPU pool unknown before launch: {shape_note or 'no model config'}")
        elif mfs in (None, True):
            notes.append(
                "GPU pool unknown before launch: sglang chooses --mem-fraction-static at launch; "
                "give it (or --max-total-tokens) to predict the pool"
            )
        else:
            gpu, why = predict_gpu_pool_tokens(
                shape,
                tp,
                float(gpu_mem_gib),
                float(mfs),
                kv_dtype_bytes_for(pool_args.kv_cache_dtype),
                pool_args.max_mamba_cache_size,
            )
            source = POOL_PREDICTED if gpu is not None else POOL_UNKNOWN
            notes.append(why if gpu is not None else f"GPU pool unknown before launch: {why}")

    host_tokens: int | None = 0
    host_gb: float | None = None
    if variant.hicache is not None:
        host_tokens = None
        if shape is not None:
            mamba_slots = pool_args.max_mamba_cache_size
            pred = predict_host_pool(
                shape,
                variant.hicache,
                gpu,
                tp,
                page_size=pool_args.page_size,
                mamba_device_slots=mamba_slots,
                kv_dtype_bytes=kv_dtype_bytes_for(pool_args.kv_cache_dtype),
                size_split=host_size_split(scenario),
                mamba_size_gb=pool_args.mamba_size_gb,
            )
            host_tokens = pred.kv_host_tokens
            if pred.known and pred.total_bytes_per_rank is not None:
                host_gb = pred.total_bytes_per_rank / 1e9
        elif gpu is not None and not variant.hicache.size_gb:
            ratio = variant.hicache.effective_ratio
            page = max(1, pool_args.page_size)
            host_tokens = (int(gpu * ratio) // page + 1) * page  # sglang aligns up one page
    return PoolEstimate(
        gpu_tokens=gpu,
        source=source,
        host_tokens=host_tokens,
        host_gb_per_rank=host_gb,
        context_tokens=context_tokens,
        note="; ".join(notes),
    )


# ----------------------------------------------------------------------------- per workload


def _decode_s(steps: int, decode_tok_s: float | None) -> float | None:
    """Seconds to generate ``steps`` tokens one after another (the first comes with the prefill)."""
    if decode_tok_s is None:
        return None
    return max(0, steps) / decode_tok_s


def _ctx(
    pool: PoolEstimate,
    hicache: bool,
    hybrid: bool,
    repeats: int,
    decode_tok_s: float | None,
    scenario: Any,
    prefill_tok_s: float | None = None,
) -> EstimateContext:
    return EstimateContext(
        pool.gpu_tokens,
        pool.host_tokens,
        pool.context_tokens,
        hicache,
        hybrid,
        repeats,
        decode_tok_s,
        getattr(scenario, "base_dir", None),
        prefill_tok_s,
    )


def _workload(w: Any, c: EstimateContext) -> WorkEstimate:
    """One workload, all repeats: its kind's ``estimate`` hook (`WorkloadKind.estimate`)."""
    kind = kinds().get(str(w.kind))
    if kind is None or kind.estimate is None:
        return _est(
            str(w.name),
            str(w.kind),
            0,
            None,
            None,
            None,
            0,
            None,
            notes=[f"workload kind {w.kind} has no estimate: its tokens are not counted"],
        )
    return kind.estimate(w, c)


def churn_chunks(churn_tokens: int, pool_tokens: int | None) -> list[int]:
    """The churn prompts of one re-ask when the quality arm has no churn planner
    (``harness.quality.churn``): ``ceil(churn / chunk)`` full chunks of min(churn, pool / 2)."""
    if churn_tokens <= 0:
        return []
    chunk = max(1, min(churn_tokens, (pool_tokens or churn_tokens) // 2 or 1))
    return [chunk] * math.ceil(churn_tokens / chunk)


@dataclass(frozen=True)
class _Churn:
    tokens: int  # churn sent before each re-ask
    requests: int  # churn requests before each re-ask
    control_start: bool  # the control pass churns once before it starts
    host_ok: bool | None  # the planner's verdict (None: no planner, judge by the window)
    note: str


def _plan_churn(
    requested: int, c: EstimateContext, prompt_tokens: int, write_policy: str | None, needs_host: bool
) -> _Churn:
    """The churn the quality arm will send on this variant: the arm's own planner when this tree has
    it (it clamps the configured churn into the window per variant), else the configured churn in
    full chunks."""
    if _churn_planner is None:
        chunks = churn_chunks(requested, c.P)
        return _Churn(sum(chunks), len(chunks), False, None, "")
    host = (c.H if c.H is not None else None) if c.hicache else 0
    max_input = None if c.max_input is None else max(1, c.max_input - 1)  # room for the output token
    plan = _churn_planner.plan_churn(
        requested,
        device_pool=c.P,
        host_pool=host,
        max_input=max_input,
        prompt_tokens=prompt_tokens,
        write_policy=write_policy,
        needs_host=needs_host,
    )
    n = math.ceil(plan.tokens / plan.chunk) if plan.tokens > 0 else 0
    ok = None if not needs_host or plan.low is None or plan.high is None else plan.low <= plan.high
    return _Churn(plan.tokens, n, True, ok, plan.note)


def _quality(q: Any, c: EstimateContext, baseline: bool, write_policy: str | None) -> WorkEstimate:
    """The quality arm on one variant (once, not per repeat)."""
    P = c.P
    lengths = [_size(x, P) for x in q.lengths]
    requested = _size(q.churn_tokens, P)
    per_length = len(q.tasks) * q.samples_per_task
    asks = 1 + q.reasks
    passes = 2 if (baseline and q.control) else 1
    n_asks = passes * asks * per_length * len(lengths)
    dec = _decode_s(n_asks * (q.max_new_tokens - 1), c.decode_tok_s)
    if requested is None or any(x is None for x in lengths):
        return _est(
            "quality",
            "quality",
            n_asks,
            None,
            None,
            None,
            n_asks * q.max_new_tokens,
            dec,
            notes=['"x pool" sizes need the GPU pool: tokens not counted'],
        )
    longest = max(x for x in lengths if x is not None) + q.max_new_tokens
    churn = _plan_churn(requested, c, longest, write_policy, needs_host=c.hicache and not baseline)
    # the OFF baseline (no lower tier) flushes its cache instead of churning (harness.quality.run._churn)
    flushed = baseline and not c.hicache
    churn_tokens, churn_requests = (0, 0) if flushed else (churn.tokens, churn.requests)
    n_samples = per_length * len(lengths)
    requests = n_asks + n_samples * q.reasks * churn_requests
    sent = computed = expected = 0
    warn: list[str] = []
    if churn.host_ok is False:  # the arm's planner found no churn that leaves the host tier a chance
        warn.append(f"the quality arm sends {churn.tokens:,} tokens of churn per re-ask: {churn.note}")
    for L in lengths:
        assert L is not None
        traffic = churn.tokens + L  # the sample's age when it is asked again
        evicted = flushed or c.evicted(traffic)
        host_ok, w = c.host_window(f"churn + length ({churn.tokens:,} + {L:,})", traffic)
        if churn.host_ok is not None:
            host_ok = host_ok and churn.host_ok
        if c.hicache and not baseline and churn.host_ok is not False:
            warn += w
        # the asking pass: a cold ask, then churn and a re-ask, reasks times
        sent += per_length * (asks * L + q.reasks * churn_tokens)
        base = per_length * (L + q.reasks * churn_tokens)
        computed += base + (per_length * q.reasks * L if evicted else 0)
        expected += base + (per_length * q.reasks * L if evicted and not host_ok else 0)
        if passes == 2:  # the control pass: the same asks without churn; its re-asks hit the GPU
            sent += per_length * asks * L
            computed += per_length * L
            expected += per_length * L
        warn += c.too_long(L) + c.aligned("quality length", L)
    if passes == 2 and churn.control_start:  # one churn (or flush) before the control pass
        sent, computed, expected = sent + churn_tokens, computed + churn_tokens, expected + churn_tokens
        requests += churn_requests
    est = _est(
        "quality",
        "quality",
        requests,
        sent,
        computed,
        expected,
        n_asks * q.max_new_tokens,
        dec,
        warn,
        churn.tokens + longest - q.max_new_tokens,
    )
    return replace(est, churn_requests=requests - n_asks)


# ----------------------------------------------------------------------------- the run


def _scenario_estimate_block(scenario: Any) -> Any:
    """The scenario's optional ``estimate`` block (proposed key), if the loaded model has one."""
    return getattr(scenario, "estimate", None)


def estimate_run(
    scenario: Any,
    variants: Sequence[Any] | None = None,
    prefill_tok_s: float | None = None,
    decode_tok_s: float | None = None,
    *,
    startup_s: float | None = None,
    gpu_pool_tokens: int | None = None,
    gpu_mem_gib: float | None = None,
    mem_available_gib: float | None = None,
    limit_minutes: float | None = None,
) -> RunEstimate:
    """Estimate a run of ``variants`` (default: all of the scenario's) of a loaded `Scenario`.

    ``prefill_tok_s`` (here or in the scenario's ``estimate`` block): uncached prompt tokens per
    second; without it the tokens, pools and warnings are estimated and every duration is None; ``decode_tok_s``: one request's output tokens per second (None: decode
    time not counted); ``startup_s``: one server start attempt (None: starts not counted);
    ``gpu_pool_tokens``: the GPU pool when the args do not pin it; ``gpu_mem_gib``: one GPU's
    memory, to predict the pool (with ``--mem-fraction-static``); ``mem_available_gib``:
    MemAvailable while weights load, to check the host pools against sglang's budget (default
    ``server.sim.mem_available_gib`` for the simulator); ``limit_minutes``: flag a longer run.
    Arguments not given fall back to the scenario's ``estimate`` block when it has one."""
    block = _scenario_estimate_block(scenario)

    def pick(value: Any, key: str) -> Any:
        return value if value is not None or block is None else getattr(block, key, None)

    prefill_tok_s = pick(prefill_tok_s, "prefill_tok_s")
    decode_tok_s = pick(decode_tok_s, "decode_tok_s")
    startup_s = pick(startup_s, "startup_s")
    gpu_pool_tokens = pick(gpu_pool_tokens, "gpu_pool_tokens")
    gpu_mem_gib = pick(gpu_mem_gib, "gpu_mem_gib")
    mem_available_gib = pick(mem_available_gib, "mem_available_gib")
    limit_minutes = pick(limit_minutes, "limit_minutes")
    if prefill_tok_s is not None and prefill_tok_s <= 0:
        raise ValueError("prefill_tok_s must be > 0 (argument or the scenario's estimate block)")
    prefill = None if prefill_tok_s is None else float(prefill_tok_s)
    if decode_tok_s is not None and decode_tok_s <= 0:
        raise ValueError("decode_tok_s must be > 0")
    startup = float(startup_s or 0.0)
    variants = list(scenario.expand_variants() if variants is None else variants)
    repeats = int(scenario.repeats)
    q = scenario.quality
    baseline_name = q.baseline_variant
    server = scenario.server
    sim = getattr(server, "sim", None)
    if mem_available_gib is None and getattr(server, "backend", None) == "sim" and sim is not None:
        mem_available_gib = sim.mem_available_gib
    pre = scenario.preflight
    reserve = float(getattr(pre, "reserve_gib", DEFAULT_RESERVE_GIB))
    ranks = int(getattr(pre, "ranks_on_host", None) or server.tp_size or 1)
    idle = float(scenario.sampling.idle_window_s) if scenario.sampling.enabled else 0.0
    liveness = float(server.liveness_idle_s)

    out: list[VariantEstimate] = []
    for v in variants:
        shape, shape_note = _shape_of(v)
        pool = variant_pool(
            scenario, v, gpu_pool_tokens=gpu_pool_tokens, gpu_mem_gib=gpu_mem_gib, shape=shape, shape_note=shape_note
        )
        warn: list[str] = [pool.note] if pool.note else []
        # host memory: does the predicted host pool fit sglang's budget with the stated MemAvailable?
        if v.hicache is not None and shape is not None and mem_available_gib is not None:
            pa = pool_args_from_server_args(v.args)
            pred = predict_host_pool(
                shape,
                v.hicache,
                pool.gpu_tokens,
                int(v.tp_size or 1),
                page_size=pa.page_size,
                mamba_device_slots=pa.max_mamba_cache_size,
                kv_dtype_bytes=kv_dtype_bytes_for(pa.kv_cache_dtype),
                size_split=host_size_split(scenario),
                mamba_size_gb=pa.mamba_size_gb,
            )
            res = check_budget(pred, int(mem_available_gib * 1024 * 1024), reserve, ranks)
            if res.fits is False and v.expect == "ok":
                warn.append(
                    f"host pool refused at {mem_available_gib:g} GiB MemAvailable: {res.reason} "
                    f"(declare expect: startup_failed, expect_cause: host_memory)"
                )
            elif res.fits is True and v.expect == "startup_failed" and v.expect_cause == logscan.HOST_MEMORY:
                warn.append(
                    f"declared a host_memory refusal, but at {mem_available_gib:g} GiB MemAvailable "
                    f"the host pool fits: {res.reason}"
                )
        if v.expect == "startup_failed":
            attempts = 1 + (max(0, int(v.startup_retries)) if v.expect_cause in logscan.TRANSIENT_CAUSES else 0)
            out.append(
                VariantEstimate(
                    name=v.name,
                    expect=v.expect,
                    expect_cause=v.expect_cause,
                    hicache=v.hicache is not None,
                    startup_attempts=attempts,
                    pool=pool,
                    work=(),
                    prefill_tok_s=prefill,
                    decode_s=0.0,
                    overhead_s=attempts * startup,
                    warnings=tuple(warn),
                    gpus=int(v.tp_size or 1),
                    startup_s=attempts * startup,
                )
            )
            continue
        c = _ctx(
            pool,
            v.hicache is not None,
            bool(shape is not None and shape.is_hybrid),
            repeats,
            decode_tok_s,
            scenario,
            prefill,
        )
        work = [_workload(w, c) for w in scenario.workloads]
        if q.enabled:
            work.append(
                _quality(
                    q,
                    c,
                    baseline=v.name == baseline_name,
                    write_policy=v.hicache.write_policy if v.hicache is not None else None,
                )
            )
        decode_s = None if decode_tok_s is None else sum(w.decode_s or 0.0 for w in work)
        out.append(
            VariantEstimate(
                name=v.name,
                expect=v.expect,
                expect_cause=v.expect_cause,
                hicache=v.hicache is not None,
                startup_attempts=1,
                pool=pool,
                work=tuple(work),
                prefill_tok_s=prefill,
                decode_s=decode_s,
                overhead_s=startup + idle + liveness,
                warnings=tuple(dict.fromkeys(warn)),
                gpus=int(v.tp_size or 1),
                startup_s=startup,
            )
        )

    notes = []
    if decode_tok_s is None:
        notes.append("no decode speed given: output tokens are not counted in the duration")
    if not startup:
        notes.append("no server start time given: starts are not counted")
    if prefill is None:
        notes.append("no prefill speed given (`estimate: {prefill_tok_s: <measured tok/s>}`): no durations")
    return RunEstimate(
        scenario=scenario.name,
        prefill_tok_s=prefill,
        decode_tok_s=None if decode_tok_s is None else float(decode_tok_s),
        startup_s=startup,
        repeats=repeats,
        variants=tuple(out),
        limit_minutes=None if limit_minutes is None else float(limit_minutes),
        notes=tuple(notes),
    )


def design_warnings(scenario: Any, variants: Sequence[Any] | None = None) -> dict[str, tuple[str, ...]]:
    """{variant: its design warnings} of a loaded `Scenario` before anything starts: what its
    workloads will not exercise as designed (a prompt length a hybrid model can reuse nothing of,
    a working set that stays on the GPU or overflows the host pool, a prompt the server refuses),
    from the kinds' estimate hooks (`VariantEstimate.design_warnings`); needs no speed. Variants
    expected to fail at startup and variants without a warning are left out. ``harness run``
    prints them before the first variant and keeps them in the manifest; ``--dry-run`` prints them."""
    estimate = estimate_run(scenario, variants)
    return {v.name: v.design_warnings for v in estimate.variants if v.design_warnings}


def design_warning_lines(warnings: Mapping[str, Sequence[str]]) -> list[str]:
    """`design_warnings` as console lines: one per variant and warning."""
    return [f"design warning: {name}: {w}" for name, ws in warnings.items() for w in ws]


def request_counts(
    scenario: Any, variants: Sequence[Any] | None = None, *, gpu_pool_tokens: int | None = None
) -> dict[str, int]:
    """{variant: the requests it will record} (rows of requests.jsonl and quality.jsonl, all
    repeats, warm-ups included; the quality arm's churn is not recorded) of a loaded `Scenario`,
    before anything starts; needs no speeds. A variant expected to fail at startup records none;
    one without workloads records the smoke request. Where a count depends on a GPU pool that is
    unknown before launch (repeat_prefill's eviction filler), those requests are not counted:
    the count is then a lower bound. The console's progress line shows done/total from it."""
    out: dict[str, int] = {}
    repeats = int(scenario.repeats)
    q = scenario.quality
    for v in scenario.expand_variants() if variants is None else variants:
        if v.expect == "startup_failed":
            out[v.name] = 0
            continue
        if not scenario.workloads:
            n = 1
        else:
            shape, note = _shape_of(v)
            pool = variant_pool(scenario, v, gpu_pool_tokens=gpu_pool_tokens, shape=shape, shape_note=note)
            c = _ctx(pool, v.hicache is not None, bool(shape is not None and shape.is_hybrid), repeats, None, scenario)
            n = sum(_workload(w, c).recorded_requests for w in scenario.workloads)
        if q.enabled:
            shape, note = _shape_of(v)
            pool = variant_pool(scenario, v, gpu_pool_tokens=gpu_pool_tokens, shape=shape, shape_note=note)
            c = _ctx(pool, v.hicache is not None, bool(shape is not None and shape.is_hybrid), repeats, None, scenario)
            n += _quality(
                q,
                c,
                baseline=v.name == q.baseline_variant,
                write_policy=v.hicache.write_policy if v.hicache is not None else None,
            ).recorded_requests
        out[v.name] = n
    return out


__all__ = [
    "PoolEstimate",
    "RunEstimate",
    "VariantEstimate",
    "WorkEstimate",
    "churn_chunks",
    "design_warning_lines",
    "design_warnings",
    "estimate_run",
    "predict_gpu_pool_tokens",
    "request_counts",
    "variant_pool",
]

"""What an estimate says: a variant's pools (`PoolEstimate`: where its GPU pool came from), each
variant's work, durations and GPU-minutes (`VariantEstimate`), and the run's (`RunEstimate`) with
the lines ``harness run --dry-run`` prints. Built by `harness.run.estimate.estimate_run`. Pure.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Iterable, Mapping, Sequence

from harness.run import lanes
from harness.store import gpu_time
from harness.workloads.estimating import WorkEstimate

# Where the GPU pool of a variant came from.
POOL_ARG = "--max-total-tokens"
POOL_SIM_DEFAULT = "simulator default"
POOL_STATED = "stated"
POOL_PREDICTED = "predicted"
POOL_UNKNOWN = "unknown"


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

    def _seconds(self, expected: bool) -> float | None:
        """Each workload's serving (its expected or its computed tokens, then decoded) or its own
        clock, whichever is longer, plus its waits; then the starts and idle windows."""
        walls = [w.wall_s(w.expected_tokens if expected else w.computed_tokens, self.prefill_tok_s) for w in self.work]
        return None if any(x is None for x in walls) else sum(walls) + self.overhead_s  # type: ignore[arg-type]

    @property
    def seconds(self) -> float | None:
        """Upper bound: every token that needs the host tier is recomputed."""
        return self._seconds(expected=False)

    @property
    def expected_seconds(self) -> float | None:
        """A healthy stack: host-tier hits wherever the pools allow them."""
        return self._seconds(expected=True)

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

"""Metric declarations: one `Metric` per metric — name, unit, direction, what it means, whether it
is per request or per concurrency group, its formula, and whether (and where) `harness compare`
judges it.

Nothing here measures: every number is recomputed from the raw integer-ns fields of the records,
so a changed definition applies to old runs too. Each formula is written once, on columns of
inputs (numpy arrays; NaN = missing), and the same function serves both paths:

  one record    `Metric.of_record(r)` and `group_walls(records)` (the summary), on that record's
                (that group's) inputs;
  a whole run   `request_metrics(columns)` and `group_metrics(columns)` (`harness.analysis.frames`, which
                compare reads), on one array per input.

The inputs are the raw fields of `REQUEST_FIELDS`, a record's chunk reductions (`chunk_stats`:
`CHUNK_INPUTS`) and, per concurrency group, `GROUP_INPUTS`. Definitions:

  ttft_ms              first chunk with new output ids − sent
  e2e_ms               [DONE] − sent
  itl_ms               per chunk after the first: gap to the previous token-bearing chunk ÷ its
                       new tokens (per-request value: mean; summaries pool all chunks,
                       `itl_values_ms`, like sglang bench_serving's ITL)
  tpot_ms              (last token chunk − first token chunk) ÷ tokens after the first chunk
  prefill_tok_s        (prompt tokens − cached tokens) ÷ TTFT: the tokens actually computed
  prefill_total_tok_s  prompt tokens ÷ TTFT (seed 000's "75K tok / TTFT")
  decode_tok_s         tokens after the first chunk ÷ (last token chunk − first token chunk)
  cached_fraction, device_hit_fraction, host_hit_fraction, storage_hit_fraction
                       server-reported cached ÷ prompt tokens (storage: the L3 tier's share)
  pass_wall_s          per concurrency group: last done − first sent (parallel_prefixes passes)
Prompt tokens are the server's `prompt_tokens` where reported, else the `prompt_len` we sent
(0: undefined). A workload's derived figures (second_pass_speedup, host_speedup, ...) are declared
by its kind (`harness.workloads`), not here.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

if TYPE_CHECKING:  # frames are handed in; `harness validate` loads no pandas
    import pandas as pd

from harness.store.records import RequestRecord

Columns = Mapping[str, Any]  # input name → np.ndarray (one row per request or group) or a number

REQUEST_FIELDS = (
    "sent_ns",
    "first_token_ns",
    "done_ns",
    "prompt_len",
    "prompt_tokens",
    "cached_tokens",
    "cached_device",
    "cached_host",
    "cached_storage",
)
CHUNK_INPUTS = ("first_chunk_ns", "last_chunk_ns", "tokens_after_first", "itl_mean_ms")
GROUP_INPUTS = ("first_sent_ns", "last_done_ns")

PREFILL_MIN_PROMPT = 1024  # tokens: a shorter prompt's TTFT is scheduling, not prefill throughput

_NS_PER_MS = 1e6
_NS_PER_S = 1e9


# ---------------------------------------------------------------------------- chunk reductions


def _scan_chunks(
    chunk_ns: Sequence[int], chunk_new: Sequence[int], gaps: list[float] | None = None
) -> tuple[float, float, float, float]:
    """`chunk_stats`, appending each ITL value to ``gaps`` when given (one pass: this runs once
    per request of a million-row run)."""
    first = prev = None
    after = n_gaps = 0
    total = 0.0
    for t, n in zip(chunk_ns, chunk_new):
        if n <= 0:
            continue
        if prev is None:
            first = t
        else:
            gap = (t - prev) / n / _NS_PER_MS
            after += n
            total += gap
            n_gaps += 1
            if gaps is not None:
                gaps.append(gap)
        prev = t
    if prev is None:
        return math.nan, math.nan, math.nan, math.nan
    if not n_gaps:
        return first, prev, math.nan, math.nan
    return first, prev, after, total / n_gaps


def chunk_stats(chunk_ns: Sequence[int], chunk_new: Sequence[int]) -> tuple[float, float, float, float]:
    """`CHUNK_INPUTS` of one request: (first token chunk ns, last token chunk ns, tokens after the
    first chunk, mean ITL ms) over its token-bearing chunks (new tokens > 0); NaN where undefined
    (no token chunk; the last two need a second one)."""
    return _scan_chunks(chunk_ns, chunk_new)


def itl_values_ms(r: RequestRecord) -> list[float]:
    """One value per token-bearing chunk after the first: gap to the previous one ÷ its new tokens."""
    gaps: list[float] = []
    _scan_chunks(r.chunk_ns, r.chunk_new_tokens, gaps)
    return gaps


# ----------------------------------------------------------------------------------- formulas
# A formula's inputs are numpy arrays (a whole run) or floats (one record): these helpers do the
# same element-wise thing for both, so that each formula is written once.


def _ratio(num: Any, den: Any) -> Any:
    """num / den where den > 0, else NaN."""
    if isinstance(den, np.ndarray):
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(den > 0, num / den, np.nan)
    return num / den if den > 0 else math.nan


def _positive(x: Any) -> Any:
    """x where x > 0, else NaN."""
    if isinstance(x, np.ndarray):
        return np.where(x > 0, x, np.nan)
    return x if x > 0 else math.nan


def _or(x: Any, fallback: Any) -> Any:
    """x where it is not NaN, else fallback."""
    if isinstance(x, np.ndarray):
        return np.where(np.isnan(x), fallback, x)
    return fallback if math.isnan(x) else x


def _prompt(c: Columns) -> Any:
    return _positive(_or(c["prompt_tokens"], c["prompt_len"]))  # 0 prompt tokens: undefined


def _ttft_ms(c: Columns) -> Any:
    return (c["first_token_ns"] - c["sent_ns"]) / _NS_PER_MS


def _decode_span_ns(c: Columns) -> Any:
    return c["last_chunk_ns"] - c["first_chunk_ns"]


def _prefill_tok_s(c: Columns) -> Any:
    return _ratio(_prompt(c) - _or(c["cached_tokens"], 0.0), _ttft_ms(c) / 1e3)


def _prefill_total_tok_s(c: Columns) -> Any:
    return _ratio(_prompt(c), _ttft_ms(c) / 1e3)


def _tpot_ms(c: Columns) -> Any:
    return _ratio(_decode_span_ns(c), c["tokens_after_first"]) / _NS_PER_MS


def _decode_tok_s(c: Columns) -> Any:
    return _ratio(c["tokens_after_first"], _decode_span_ns(c) / _NS_PER_S)


def _fraction_of_prompt(field: str) -> Callable[[Columns], Any]:
    return lambda c: c[field] / _prompt(c)


def _measures_prefill(phase: pd.DataFrame) -> bool:
    """Where prefill_tok_s measures prefill: the phase's median prompt is ≥ `PREFILL_MIN_PROMPT`
    tokens and mostly not cached (a cached share the server did not report counts as computed)."""
    prompt = phase["prompt_tokens"].fillna(phase["prompt_len"])
    mostly_computed = not (phase["cached_fraction"].median() >= 0.5)
    return bool(prompt.median() >= PREFILL_MIN_PROMPT and mostly_computed)


def _any_positive(values: np.ndarray) -> bool:
    """Where host_hit_fraction is judged: a phase in which some request of either run got
    host-tier hits (a phase that never reaches the host tier, or a server without one, has
    nothing to compare)."""
    return bool((np.nan_to_num(values) > 0).any())


# ------------------------------------------------------------------------------- declarations


@dataclass(frozen=True)
class Metric:
    """One metric. ``formula`` maps columns of inputs to the metric (NaN where undefined);
    ``compared``: judged by `harness compare`, in every phase or, with ``compared_when``, in the
    phases whose measured requests (a requests frame) it holds for."""

    name: str
    unit: str
    higher_is_better: bool
    description: str
    formula: Callable[[Columns], Any]
    per: Literal["request", "group"] = "request"
    compared: bool = False
    compared_when: Callable[[pd.DataFrame], bool] | None = None
    # Where compared, compare also adds a tail row "<name>_p<q>" (the quantile q of one value per
    # independent unit, `harness.compare.tails.decide_tail`; lower-is-better metrics only), a
    # tail-share row "<name>_tail" (the share of units beyond (1 + threshold) x each night's own
    # median, `decide_tail_share`) and, with ``drift``, a row "<name>_drift": a phase's last third
    # against its first third, in the order sent, the candidate's ratio against the baseline's
    # (`harness.compare.tails.decide_drift`).
    tail: float | None = None
    drift: bool = False
    # A row is kept only where this holds of one side's values or the other's (None: always):
    # host_hit_fraction where either run hit the host tier, so a candidate that lost every host
    # hit is a regression from the baseline's share, not a row that vanished.
    kept_when: Callable[[np.ndarray], bool] | None = None

    @property
    def tail_name(self) -> str | None:
        """The tail row's metric name, e.g. ``ttft_ms_p99``; None without a tail."""
        return None if self.tail is None else f"{self.name}_p{round(self.tail * 100):d}"

    @property
    def tail_share_name(self) -> str | None:
        """The tail-share row's metric name, e.g. ``ttft_ms_tail``; None without a tail."""
        return None if self.tail is None else f"{self.name}_tail"

    @property
    def drift_name(self) -> str | None:
        return f"{self.name}_drift" if self.drift else None

    def compute(self, columns: Columns) -> np.ndarray:
        """The metric over columns of inputs (arrays, one row per request or group)."""
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.asarray(self.formula(columns), dtype=float)

    def value(self, inputs: Columns) -> float | None:
        """The metric of one request or group from its inputs as floats; None where undefined."""
        v = float(self.formula(inputs))
        return None if math.isnan(v) else v

    def of_record(self, r: RequestRecord) -> float | None:
        return self.value(_RecordInputs(r))

    def compared_in(self, phase: pd.DataFrame) -> bool:
        """Whether compare judges this metric in a phase, given its measured ok requests."""
        return self.compared and (self.compared_when is None or self.compared_when(phase))


METRICS: dict[str, Metric] = {
    m.name: m
    for m in [
        Metric("ttft_ms", "ms", False, "time to first token", _ttft_ms, compared=True, tail=0.99, drift=True),
        Metric(
            "itl_ms", "ms", False, "inter-token latency (per token, pooled over chunks)", lambda c: c["itl_mean_ms"]
        ),
        Metric("tpot_ms", "ms", False, "time per output token after the first", _tpot_ms, compared=True, tail=0.99),
        Metric(
            "e2e_ms", "ms", False, "end-to-end request latency", lambda c: (c["done_ns"] - c["sent_ns"]) / _NS_PER_MS
        ),
        Metric(
            "prefill_tok_s",
            "tok/s",
            True,
            "uncached prompt tokens / TTFT",
            _prefill_tok_s,
            compared=True,
            compared_when=_measures_prefill,
        ),
        Metric("prefill_total_tok_s", "tok/s", True, "all prompt tokens / TTFT", _prefill_total_tok_s),
        Metric(
            "decode_tok_s", "tok/s", True, "output tokens after the first / decode time", _decode_tok_s, compared=True
        ),
        Metric(
            "host_hit_fraction",
            "fraction",
            True,
            "prompt tokens served from the host tier",
            _fraction_of_prompt("cached_host"),
            compared=True,
            kept_when=_any_positive,
        ),
        Metric(
            "storage_hit_fraction",
            "fraction",
            True,
            "prompt tokens served from the storage tier (L3)",
            _fraction_of_prompt("cached_storage"),
        ),
        Metric(
            "device_hit_fraction",
            "fraction",
            True,
            "prompt tokens served from the GPU tier",
            _fraction_of_prompt("cached_device"),
        ),
        Metric(
            "cached_fraction",
            "fraction",
            True,
            "prompt tokens served from any cache tier",
            _fraction_of_prompt("cached_tokens"),
        ),
        Metric(
            "pass_wall_s",
            "s",
            False,
            "wall time of one concurrent group (a pass)",
            lambda c: (c["last_done_ns"] - c["first_sent_ns"]) / _NS_PER_S,
            per="group",
            compared=True,
        ),
    ]
}
REQUEST_METRICS = [m.name for m in METRICS.values() if m.per == "request"]
# The metric names a gate may name as ``workload.phase.<name>``: every compared metric, its tail
# row and its drift row (what `harness.compare` judges).
GATEABLE: dict[str, Metric] = {
    name: m
    for m in METRICS.values()
    if m.compared
    for name in (m.name, m.tail_name, m.tail_share_name, m.drift_name)
    if name is not None
}
# The per-record derivation of each request metric (what the summary applies to each record).
DERIVATIONS: dict[str, Callable[[RequestRecord], float | None]] = {
    name: METRICS[name].of_record for name in REQUEST_METRICS
}


def request_metrics(columns: Columns) -> dict[str, np.ndarray]:
    """Every request metric over columns of `REQUEST_FIELDS` + `CHUNK_INPUTS` (vectorised)."""
    return {name: METRICS[name].compute(columns) for name in REQUEST_METRICS}


def group_metrics(columns: Columns) -> dict[str, np.ndarray]:
    """Every group metric over columns of `GROUP_INPUTS` (vectorised)."""
    return {m.name: m.compute(columns) for m in METRICS.values() if m.per == "group"}


# --------------------------------------------------------------------------- one record, one group


def _scalar(v: float | None) -> float:
    return math.nan if v is None else v  # ints stay ints: ns differences exact past 2**53 ns


class _RecordInputs(Mapping[str, float]):
    """The formulas' inputs of one record (`REQUEST_FIELDS` + `CHUNK_INPUTS`, NaN where missing),
    read when a formula asks: most read two or three, and only three need the chunk reduction."""

    def __init__(self, r: RequestRecord):
        self._r = r
        self._chunks: tuple[float, ...] | None = None

    def __getitem__(self, key: str) -> float:
        i = _CHUNK_INDEX.get(key)
        if i is None:
            if key not in _FIELD_SET:
                raise KeyError(key)
            return _scalar(getattr(self._r, key))
        if self._chunks is None:
            self._chunks = chunk_stats(self._r.chunk_ns, self._r.chunk_new_tokens)
        return self._chunks[i]

    def __iter__(self) -> Iterator[str]:
        return iter(REQUEST_FIELDS + CHUNK_INPUTS)

    def __len__(self) -> int:
        return len(REQUEST_FIELDS) + len(CHUNK_INPUTS)


_CHUNK_INDEX = {name: i for i, name in enumerate(CHUNK_INPUTS)}
_FIELD_SET = frozenset(REQUEST_FIELDS)


def prompt_token_count(r: RequestRecord) -> int | None:
    """Prompt tokens of one record: the server's count where reported, else what we sent."""
    n = _prompt(_RecordInputs(r))
    return None if math.isnan(n) else int(n)


@dataclass(frozen=True)
class GroupWall:
    """Wall time of one concurrency group (e.g. one parallel_prefixes pass of one repeat)."""

    workload: str
    phase: str
    repeat: int
    group: str
    n: int
    n_errors: int
    wall_s: float | None


def group_walls(records: Iterable[RequestRecord]) -> list[GroupWall]:
    """Per non-warm-up concurrency group (all its phases; labelled with its first request's
    phase): last done − first sent. None if no request finished. (Compare takes a group's
    requests of each phase apart: `harness.analysis.frames.groups_frame`.)"""
    groups: dict[str, list[RequestRecord]] = {}
    for r in records:
        if r.concurrency_group is not None and not r.warmup:
            groups.setdefault(r.concurrency_group, []).append(r)
    wall = METRICS["pass_wall_s"]
    out = []
    for g, rs in groups.items():
        done = [r.done_ns for r in rs if r.done_ns is not None]
        inputs = {"first_sent_ns": min(r.sent_ns for r in rs), "last_done_ns": max(done) if done else math.nan}
        out.append(
            GroupWall(
                rs[0].workload,
                rs[0].phase,
                rs[0].repeat,
                g,
                len(rs),
                sum(1 for r in rs if r.error is not None),
                wall.value(inputs),
            )
        )
    return out

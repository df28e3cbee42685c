"""Metric declarations (name, unit, direction) and pure derivations from `RequestRecord`s.

Nothing here measures: every number is recomputed from the raw integer-ns fields, so a changed
definition applies to old runs too. Definitions:

  ttft_ms              first chunk with new output ids − sent
  e2e_ms               [DONE] − sent
  itl_ms               per chunk after the first: gap to the previous token-bearing chunk ÷ its
                       new tokens (per-request value: mean; summaries pool all chunks, like
                       sglang bench_serving's ITL)
  tpot_ms              (last token chunk − first token chunk) ÷ tokens after the first chunk
  prefill_tok_s        (prompt tokens − cached tokens) ÷ TTFT: the tokens actually computed
  prefill_total_tok_s  prompt tokens ÷ TTFT (seed 000's "75K tok / TTFT")
  decode_tok_s         tokens after the first chunk ÷ (last token chunk − first token chunk)
  cached_fraction, device_hit_fraction, host_hit_fraction   server-reported cached ÷ prompt tokens
  pass_wall_s          per concurrency group: last done − first sent (parallel_prefixes passes)
Prompt tokens are the server's `prompt_tokens` where reported, else the `prompt_len` we sent.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Literal, Sequence

import numpy as np
import pandas as pd

from harness.records import RequestRecord


@dataclass(frozen=True)
class Metric:
    name: str
    unit: str
    higher_is_better: bool
    description: str
    per: Literal["request", "group", "workload"] = "request"


METRICS: dict[str, Metric] = {m.name: m for m in [
    Metric("ttft_ms", "ms", False, "time to first token"),
    Metric("itl_ms", "ms", False, "inter-token latency (per token, pooled over chunks)"),
    Metric("tpot_ms", "ms", False, "time per output token after the first"),
    Metric("e2e_ms", "ms", False, "end-to-end request latency"),
    Metric("prefill_tok_s", "tok/s", True, "uncached prompt tokens / TTFT"),
    Metric("prefill_total_tok_s", "tok/s", True, "all prompt tokens / TTFT"),
    Metric("decode_tok_s", "tok/s", True, "output tokens after the first / decode time"),
    Metric("host_hit_fraction", "fraction", True, "prompt tokens served from the host tier"),
    Metric("device_hit_fraction", "fraction", True, "prompt tokens served from the GPU tier"),
    Metric("cached_fraction", "fraction", True, "prompt tokens served from any cache tier"),
    Metric("pass_wall_s", "s", False, "wall time of one concurrent group (a pass)", per="group"),
]}
REQUEST_METRICS = [m.name for m in METRICS.values() if m.per == "request"]

# Ratios `harness.summary.derived` computes per workload (one number per variant).
DERIVED_METRICS: dict[str, Metric] = {m.name: m for m in [
    Metric("second_pass_speedup", "ratio", True, "parallel_prefixes: pass1 wall / pass2 wall", "workload"),
    Metric("device_speedup", "ratio", True, "repeat_prefill: cold TTFT / repeat TTFT", "workload"),
    Metric("host_speedup", "ratio", True, "repeat_prefill: cold TTFT / after-eviction TTFT", "workload"),
    Metric("interference", "ratio", False, "short_ttft: TTFT during a long prefill / alone", "workload"),
    Metric("later_turns_cached_fraction", "fraction", True, "multi_turn: cached share, turns >= 2", "workload"),
]}


def metric_info(name: str) -> Metric:
    """Declaration of a per-request, per-group or derived metric by name (KeyError if unknown)."""
    return METRICS[name] if name in METRICS else DERIVED_METRICS[name]

_NS_PER_MS = 1e6
_NS_PER_S = 1e9


def prompt_token_count(r: RequestRecord) -> int | None:
    n = r.prompt_tokens if r.prompt_tokens is not None else r.prompt_len
    return n if n else None


def ttft_ms(r: RequestRecord) -> float | None:
    if r.first_token_ns is None:
        return None
    return (r.first_token_ns - r.sent_ns) / _NS_PER_MS


def e2e_ms(r: RequestRecord) -> float | None:
    if r.done_ns is None:
        return None
    return (r.done_ns - r.sent_ns) / _NS_PER_MS


def _token_chunks(r: RequestRecord) -> list[tuple[int, int]]:
    return [(t, n) for t, n in zip(r.chunk_ns, r.chunk_new_tokens) if n > 0]


def itl_values_ms(r: RequestRecord) -> list[float]:
    """One value per token-bearing chunk after the first: gap ÷ new tokens of that chunk."""
    ch = _token_chunks(r)
    return [(t1 - t0) / n1 / _NS_PER_MS for (t0, _), (t1, n1) in zip(ch, ch[1:])]


def _after_first(r: RequestRecord) -> tuple[int, float] | None:
    ch = _token_chunks(r)
    if len(ch) < 2:
        return None
    tokens = sum(n for _, n in ch[1:])
    return tokens, float(ch[-1][0] - ch[0][0])


def tpot_ms(r: RequestRecord) -> float | None:
    a = _after_first(r)
    if a is None or a[0] == 0:
        return None
    return a[1] / a[0] / _NS_PER_MS


def decode_tok_s(r: RequestRecord) -> float | None:
    a = _after_first(r)
    if a is None or a[1] <= 0:
        return None
    return a[0] / (a[1] / _NS_PER_S)


def prefill_tok_s(r: RequestRecord) -> float | None:
    t, n = ttft_ms(r), prompt_token_count(r)
    if t is None or t <= 0 or n is None:
        return None
    return (n - (r.cached_tokens or 0)) / (t / 1e3)


def prefill_total_tok_s(r: RequestRecord) -> float | None:
    t, n = ttft_ms(r), prompt_token_count(r)
    if t is None or t <= 0 or n is None:
        return None
    return n / (t / 1e3)


def _fraction(part: int | None, r: RequestRecord) -> float | None:
    n = prompt_token_count(r)
    if part is None or n is None:
        return None
    return part / n


def cached_fraction(r: RequestRecord) -> float | None:
    return _fraction(r.cached_tokens, r)


def device_hit_fraction(r: RequestRecord) -> float | None:
    return _fraction(r.cached_device, r)


def host_hit_fraction(r: RequestRecord) -> float | None:
    return _fraction(r.cached_host, r)


def itl_ms(r: RequestRecord) -> float | None:
    v = itl_values_ms(r)
    return float(np.mean(v)) if v else None


DERIVATIONS = {
    "ttft_ms": ttft_ms, "itl_ms": itl_ms, "tpot_ms": tpot_ms, "e2e_ms": e2e_ms,
    "prefill_tok_s": prefill_tok_s, "prefill_total_tok_s": prefill_total_tok_s,
    "decode_tok_s": decode_tok_s, "host_hit_fraction": host_hit_fraction,
    "device_hit_fraction": device_hit_fraction, "cached_fraction": cached_fraction,
}

_RAW_COLUMNS = ["variant", "workload", "phase", "repeat", "index", "rid", "warmup",
                "concurrency_group", "prompt_len", "prompt_tokens", "completion_tokens",
                "cached_tokens", "cached_device", "cached_host", "cached_storage",
                "finish_reason", "error", "sent_ns", "first_token_ns", "done_ns"]


def records_frame(records: Iterable[RequestRecord]) -> pd.DataFrame:
    """One row per request: the raw label/count columns plus one column per request metric
    (NaN where it cannot be derived), `output_len` and `n_chunks`."""
    rows = []
    for r in records:
        row = {c: getattr(r, c) for c in _RAW_COLUMNS}
        for name, fn in DERIVATIONS.items():
            v = fn(r)
            row[name] = np.nan if v is None else float(v)
        row["output_len"] = len(r.output_ids)
        row["n_chunks"] = len(r.chunk_ns)
        rows.append(row)
    cols = _RAW_COLUMNS + list(DERIVATIONS) + ["output_len", "n_chunks"]
    return pd.DataFrame(rows, columns=cols)


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


def group_walls(records: Sequence[RequestRecord]) -> list[GroupWall]:
    """Per non-warm-up concurrency group: last done − first sent. None if no request finished."""
    groups: dict[str, list[RequestRecord]] = {}
    for r in records:
        if r.concurrency_group is not None and not r.warmup:
            groups.setdefault(r.concurrency_group, []).append(r)
    out = []
    for g, rs in groups.items():
        done = [r.done_ns for r in rs if r.done_ns is not None]
        wall = (max(done) - min(r.sent_ns for r in rs)) / _NS_PER_S if done else None
        out.append(GroupWall(rs[0].workload, rs[0].phase, rs[0].repeat, g, len(rs),
                             sum(1 for r in rs if r.error is not None), wall))
    return out

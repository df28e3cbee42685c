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

from typing import Any, Mapping, Sequence

from harness.run.estimate_pool import shape_of, variant_pool
from harness.run.estimate_quality import quality_estimate
from harness.run.estimate_result import PoolEstimate, RunEstimate, VariantEstimate
from harness.run.gpu_pool import kv_dtype_bytes_for, pool_args_from_server_args
from harness.run.hostpool import check_budget, host_size_split, predict_host_pool
from harness.scenario.models import Scenario, Variant
from harness.server import logscan
from harness.workloads import kinds
from harness.workloads.estimating import EstimateContext, WorkEstimate
from harness.workloads.estimating import est as _est


def _ctx(
    pool: PoolEstimate,
    hicache: bool,
    hybrid: bool,
    repeats: int,
    decode_tok_s: float | None,
    scenario: Scenario,
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
        scenario.base_dir,
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


def estimate_run(
    scenario: Scenario,
    variants: Sequence[Variant] | None = None,
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
    block = scenario.estimate
    if block is not None:  # what the arguments leave unsaid
        prefill_tok_s = block.prefill_tok_s if prefill_tok_s is None else prefill_tok_s
        decode_tok_s = block.decode_tok_s if decode_tok_s is None else decode_tok_s
        startup_s = block.startup_s if startup_s is None else startup_s
        gpu_pool_tokens = block.gpu_pool_tokens if gpu_pool_tokens is None else gpu_pool_tokens
        gpu_mem_gib = block.gpu_mem_gib if gpu_mem_gib is None else gpu_mem_gib
        mem_available_gib = block.mem_available_gib if mem_available_gib is None else mem_available_gib
        limit_minutes = block.limit_minutes if limit_minutes is None else limit_minutes
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
    if mem_available_gib is None and server.backend == "sim" and server.sim is not None:
        mem_available_gib = server.sim.mem_available_gib
    pre = scenario.preflight
    reserve = float(pre.reserve_gib)
    ranks = int(pre.ranks_on_host or server.tp_size or 1)
    idle = float(scenario.sampling.idle_window_s) if scenario.sampling.enabled else 0.0
    liveness = float(server.liveness_idle_s)

    out: list[VariantEstimate] = []
    for v in variants:
        shape, shape_note = shape_of(v)
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
                quality_estimate(
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


def design_warnings(scenario: Scenario, variants: Sequence[Variant] | None = None) -> dict[str, tuple[str, ...]]:
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
    scenario: Scenario, variants: Sequence[Variant] | None = None, *, gpu_pool_tokens: int | None = None
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
            shape, note = shape_of(v)
            pool = variant_pool(scenario, v, gpu_pool_tokens=gpu_pool_tokens, shape=shape, shape_note=note)
            c = _ctx(pool, v.hicache is not None, bool(shape is not None and shape.is_hybrid), repeats, None, scenario)
            n = sum(_workload(w, c).recorded_requests for w in scenario.workloads)
        if q.enabled:
            shape, note = shape_of(v)
            pool = variant_pool(scenario, v, gpu_pool_tokens=gpu_pool_tokens, shape=shape, shape_note=note)
            c = _ctx(pool, v.hicache is not None, bool(shape is not None and shape.is_hybrid), repeats, None, scenario)
            n += quality_estimate(
                q,
                c,
                baseline=v.name == q.baseline_variant,
                write_policy=v.hicache.write_policy if v.hicache is not None else None,
            ).recorded_requests
        out[v.name] = n
    return out


__all__ = [
    "design_warning_lines",
    "design_warnings",
    "estimate_run",
    "request_counts",
]

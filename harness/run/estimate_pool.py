"""The pools an estimate resolves "x pool" sizes against, before launch: a variant's GPU pool
(``--max-total-tokens``, the simulator's default, a stated pool, or a prediction from config.json
and the GPU's memory) and its host pool (`variant_pool`). Pure.
"""

from __future__ import annotations

from typing import Any, Mapping

from harness.core.model_config import ModelConfigError, ModelShape, load_model_shape
from harness.run.estimate_result import (
    POOL_ARG,
    POOL_PREDICTED,
    POOL_SIM_DEFAULT,
    POOL_STATED,
    POOL_UNKNOWN,
    PoolEstimate,
)
from harness.run.gpu_pool import kv_dtype_bytes_for, pool_args_from_server_args, predict_gpu_pool_tokens
from harness.run.hostpool import host_size_split, predict_host_pool
from harness.scenario.models import Scenario, Variant

SIM_DEFAULT_POOL_TOKENS = 20480  # harness.sim.server.DEFAULT_MAX_TOTAL_TOKENS (not imported: it pulls in uvicorn)


def _arg(args: Mapping[str, Any], flag: str) -> Any:
    v = args.get(flag)
    return None if v is False else v


def shape_of(variant: Variant) -> tuple[ModelShape | None, str]:
    try:
        return load_model_shape(variant.model_path), ""
    except (ModelConfigError, OSError, TypeError, ValueError) as e:
        return None, f"model config unreadable ({e})"


def variant_pool(
    scenario: Scenario,
    variant: Variant,
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

"""A variant's pool-sizing flags (`PoolArgs`: ``--max-total-tokens``, ``--page-size``,
``--max-mamba-cache-size``, ``--kv-cache-dtype``, ``--hicache-mamba-size-gb``) and the GPU pool
sglang will size itself when ``--max-total-tokens`` is not given: predicted from config.json and
one GPU's memory x ``--mem-fraction-static`` (given, or sglang's default rule). The host pool and
its budget: `harness.run.hostpool`.
"""

from dataclasses import dataclass
from typing import Any, Mapping

from harness.core.model_config import KV_CACHE_DTYPE_BYTES, ModelShape
from harness.host import nvml

GIB = 1024**3


@dataclass(frozen=True)
class PoolArgs:
    """Pool-sizing flags read from a variant's sglang args (None = not given)."""

    max_total_tokens: int | None
    page_size: int
    max_mamba_cache_size: int | None
    kv_cache_dtype: str | None
    mamba_size_gb: float | None = None  # --hicache-mamba-size-gb as a number (sglang PR #39436)


def _arg(args: Mapping[str, Any], flag: str) -> Any:
    for key in (flag, flag.lstrip("-"), flag.lstrip("-").replace("-", "_")):
        if key in args:
            v = args[key]
            return None if v is False else v
    return None


def pool_args_from_server_args(args: Mapping[str, Any]) -> PoolArgs:
    """`--max-total-tokens`, `--page-size`, `--max-mamba-cache-size`, `--kv-cache-dtype` from a
    scenario's merged `args` mapping (keys with or without the leading dashes)."""
    mtt = _arg(args, "--max-total-tokens")
    ps = _arg(args, "--page-size")
    mamba = _arg(args, "--max-mamba-cache-size")
    kvd = _arg(args, "--kv-cache-dtype")
    msg = _arg(args, "--hicache-mamba-size-gb")
    try:
        mamba_gb = float(msg) if msg not in (None, True) else None
    except (TypeError, ValueError):  # "auto": solved by the server from its chunk size; not predicted
        mamba_gb = None
    return PoolArgs(
        max_total_tokens=int(mtt) if mtt not in (None, True) else None,
        page_size=int(ps) if ps not in (None, True) else 1,
        max_mamba_cache_size=int(mamba) if mamba not in (None, True) else None,
        kv_cache_dtype=str(kvd) if kvd not in (None, True) else None,
        mamba_size_gb=mamba_gb,
    )


def kv_dtype_bytes_for(kv_cache_dtype: str | None) -> float | None:
    """Bytes per KV element for `--kv-cache-dtype` (None = the model's dtype)."""
    if kv_cache_dtype is None:
        return None
    return KV_CACHE_DTYPE_BYTES.get(str(kv_cache_dtype).lower())


def _weight_bytes_per_rank(shape: ModelShape, tp: int) -> float:
    """Parameters (rough, from config.json) x bytes per weight (``quantization_config.bits`` when
    the config has one, else the model dtype), split over the TP ranks."""
    quant = shape.raw.get("quantization_config") if isinstance(shape.raw, dict) else None
    bits = None
    if isinstance(quant, Mapping):
        for key in ("bits", "weight_bits", "w_bit"):
            if isinstance(quant.get(key), (int, float)):
                bits = float(quant[key])
                break
    per_weight = bits / 8 if bits else shape.dtype_bytes
    return shape.approx_params() * per_weight / max(1, tp)


def predict_gpu_pool_tokens(
    shape: ModelShape,
    tp_size: int,
    gpu_mem_gib: float,
    mem_fraction_static: float,
    kv_dtype_bytes: float | None = None,
    mamba_slots: int | None = None,
) -> tuple[int | None, str]:
    """sglang's ``max_total_num_tokens`` from the model's config.json and a stated GPU memory:
    (GPU memory x ``--mem-fraction-static`` - weights per rank - the mamba pool) / KV bytes per
    token. An upper bound (activations, CUDA graphs and the CUDA context are not counted), and
    the weights are a parameter count from the config. Returns (tokens or None, why)."""
    weights = _weight_bytes_per_rank(shape, tp_size)
    mamba = 0.0
    if shape.is_hybrid:
        if mamba_slots is None:
            return None, "hybrid model: the mamba pool needs --max-mamba-cache-size to predict the KV pool"
        mamba = (mamba_slots + 1) * shape.mamba_bytes_per_slot(tp_size)
    budget = gpu_mem_gib * GIB * mem_fraction_static - weights - mamba
    kv = shape.kv_bytes_per_token(tp_size, kv_dtype_bytes)
    if budget <= 0 or kv <= 0:
        return None, (
            f"weights (~{weights / GIB:.1f} GiB/rank from config.json) and the mamba pool exceed "
            f"{gpu_mem_gib:g} GiB x {mem_fraction_static:g}: a quantized checkpoint the config does "
            f"not describe, or a prediction that cannot be made"
        )
    return int(budget // kv), (
        f"predicted from config.json and {gpu_mem_gib:g} GiB x {mem_fraction_static:g} "
        f"(weights ~{weights / GIB:.1f} GiB/rank; activations and CUDA graphs not counted)"
    )


def default_mem_fraction_static(gpu_mem_gib: float, tp_size: int = 1, chunked_prefill_size: int = 8192) -> float:
    """sglang 0.5.17's ``--mem-fraction-static`` when none is given (``_handle_gpu_memory_settings``),
    without its CUDA-graph reserve: (GPU memory - reserve) / GPU memory, reserve = 512 MB + 1.5 MB per
    activation token + tp/8 GB, at least 10 GB on GPUs over 60 GB."""
    gpu_mb = gpu_mem_gib * 1024
    reserved = 512 + max(chunked_prefill_size, 2048) * 1.5 + tp_size / 8 * 1024
    if gpu_mb > 60 * 1024:
        reserved = max(reserved, 10 * 1024)
    return round((gpu_mb - reserved) / gpu_mb, 3)


def predict_device_pool(
    shape: ModelShape,
    tp_size: int,
    args: Mapping[str, Any],
    gpu_mem_gib: float | None,
    kv_dtype_bytes: float | None,
    mamba_slots: int | None,
) -> dict[str, Any]:
    """The GPU pool sglang will size itself (no ``--max-total-tokens``): tokens, where the GPU
    memory and the memory fraction came from, and why when it cannot be predicted."""
    gpu_source = "preflight.gpu_mem_gib"
    if gpu_mem_gib is None:
        gpus = [g["memory_total_mib"] for g in nvml.gpu_inventory() if g.get("memory_total_mib")]
        if not gpus:
            return {
                "tokens": None,
                "source": None,
                "note": "GPU pool unknown before launch: no GPU memory (no NVML GPU here and no preflight.gpu_mem_gib)",
            }
        gpu_mem_gib, gpu_source = min(gpus) / 1024, f"NVML (smallest of {len(gpus)} GPUs)"
    mfs = _arg(args, "--mem-fraction-static")
    if mfs in (None, True):
        cps = _arg(args, "--chunked-prefill-size")
        mfs = default_mem_fraction_static(gpu_mem_gib, tp_size, int(cps) if cps not in (None, True) else 8192)
        mfs_source = "sglang's default rule (CUDA-graph reserve not counted)"
    else:
        mfs, mfs_source = float(mfs), "--mem-fraction-static"
    tokens, why = predict_gpu_pool_tokens(shape, tp_size, gpu_mem_gib, mfs, kv_dtype_bytes, mamba_slots)
    return {
        "tokens": tokens,
        "source": "predicted" if tokens is not None else None,
        "gpu_mem_gib": round(gpu_mem_gib, 2),
        "gpu_mem_source": gpu_source,
        "mem_fraction_static": mfs,
        "mem_fraction_static_source": mfs_source,
        "note": why,
    }

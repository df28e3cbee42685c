"""Host-pool preflight: predict a variant's HiCache host pool the way sglang sizes it and check it
against sglang's host-memory budget, before launch and again once the server reports its device
pool (reliability P9). The wait after a server stops is `harness.run.cooldown`.

Sizing, as read in sglang's source (`mem_cache/pool_host/base.py` HostKVCache, `pool_host/mamba.py`
MambaPoolHost, `hybrid_cache/hybrid_pool_assembler.py`):
- KV pool tokens: `--hicache-size G > 0` → `int(G * 1e9 // bytes_per_token)`, else
  `int(device_pool_tokens * ratio)`; then aligned as `(size // page_size + 1) * page_size`
  (ratio 2 of a 20480-token pool → 40961 tokens, as sglang 0.5.17 logs).
- Mamba (hybrid GDN) pool slots: the same with the device mamba slots and bytes per slot, page 1
  (seed 000: 32 device slots, ratio 2 → 65 host slots × 39.2 MB = 2.55 GB).
- Hybrid models with `--hicache-size`: sglang 0.5.17 (checked in its source,
  `hybrid_cache/hybrid_pool_assembler.py` `_split_hicache_size`) splits G between the KV and the
  mamba pool in proportion to their device pools' bytes; older builds and the simulator by default
  give each pool the whole G. `size_split` picks the form ("each" or "proportional"; the scenario's
  `preflight.host_size_split`, "auto" = what the server does). sglang PR #39436 (not in 0.5.17)
  adds `--hicache-mamba-size-gb X`: mamba X GB, KV the rest (`mamba_size_gb`; "auto" not predicted).
- MLA models size their KV pool from the latent (`ModelShape.kv_bytes_per_token`).
- Before launch without `--max-total-tokens` (sglang sizes the GPU pool itself, the nightly case):
  the GPU pool is predicted from config.json and one GPU's memory x `--mem-fraction-static` (given,
  or sglang's default rule), `predict_gpu_pool_tokens`.
- Budget: `(MemAvailable - 10 GiB) // ranks_on_this_host` per rank, read while weights load; the
  KV pool is checked first, then the mamba pool against what is left. GB in messages = 1e9 B.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Literal, Mapping, Protocol

from harness.core.model_config import load_model_shape
from harness.core.sglang_defaults import SGLANG_DEFAULT_HICACHE_RATIO
from harness.host import procfs
from harness.run.gpu_pool import GIB, kv_dtype_bytes_for, pool_args_from_server_args, predict_device_pool
from harness.scenario.models import Scenario, Variant
from harness.server import logscan

GB = 1e9
DEFAULT_RESERVE_GIB = 10.0
DEVICE_POOL_UNKNOWN = "device pool unknown until the server reports max_total_num_tokens; predicted after ready"
MAMBA_POOL_UNKNOWN = (
    "mamba device slots unknown until the server reports them (--max-mamba-cache-size or "
    "server info); predicted after ready"
)


class ShapeLike(Protocol):
    """What preflight needs of `harness.core.model_config.ModelShape`."""

    @property
    def is_hybrid(self) -> bool: ...

    def kv_bytes_per_token(self, tp_size: int = 1, kv_dtype_bytes: float | None = None) -> int: ...

    def mamba_bytes_per_slot(self, tp_size: int = 1) -> int: ...


# ----------------------------------------------------------------------------- prediction


@dataclass(frozen=True)
class HostPoolPrediction:
    """The host pool one rank of a variant's server will request. Byte and token fields are None
    while the device pool they derive from is unknown (`known` false; `note` says why)."""

    hicache_enabled: bool
    source: Literal["off", "ratio", "size_gb"]
    ratio: float | None
    size_gb: float | None
    size_split: str
    tp_size: int
    page_size: int
    device_pool_tokens: int | None
    mamba_device_slots: int | None
    kv_bytes_per_token: int
    mamba_bytes_per_slot: int
    kv_host_tokens: int | None
    kv_host_bytes: int | None
    mamba_host_slots: int | None
    mamba_host_bytes: int | None
    total_bytes_per_rank: int | None
    known: bool
    note: str = ""

    @property
    def total_gb_per_rank(self) -> float | None:
        return None if self.total_bytes_per_rank is None else self.total_bytes_per_rank / GB

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["total_gb_per_rank"] = self.total_gb_per_rank
        return d


def _hicache_field(hicache: Any, name: str) -> Any:
    if hicache is None:
        return None
    if isinstance(hicache, Mapping):
        return hicache.get(name)
    return getattr(hicache, name, None)


def _aligned(size: int, page_size: int) -> int:
    """sglang: `page_num = size // page_size + 1; size = page_num * page_size`."""
    return (size // page_size + 1) * page_size


def _tokens_from_gb(size_gb: float, bytes_per_unit: int) -> int:
    return int(size_gb * 1e9 // bytes_per_unit)  # same float arithmetic as sglang


def predict_host_pool(
    shape: ShapeLike,
    variant_hicache: Any,
    device_pool_tokens: int | None,
    tp_size: int = 1,
    *,
    page_size: int = 1,
    mamba_device_slots: int | None = None,
    kv_dtype_bytes: float | None = None,
    size_split: Literal["proportional", "each"] = "each",
    mamba_size_gb: float | None = None,
) -> HostPoolPrediction:
    """Predict the per-rank host pool. `variant_hicache` is the scenario's hicache block (object or
    mapping with `ratio`, `size_gb`) or None for HiCache off. `device_pool_tokens` is
    `max_total_num_tokens` (the `--max-total-tokens` arg before launch, the server's report after);
    `mamba_device_slots` is the mamba pool size of hybrid models; `mamba_size_gb` is
    `--hicache-mamba-size-gb` (the mamba share of `size_gb`, the rest KV; overrides `size_split`)."""
    page_size = max(1, int(page_size or 1))
    kv_bpt = int(shape.kv_bytes_per_token(tp_size, kv_dtype_bytes))
    hybrid = bool(shape.is_hybrid)
    mamba_bps = int(shape.mamba_bytes_per_slot(tp_size)) if hybrid else 0
    common = dict(
        size_split=size_split,
        tp_size=tp_size,
        page_size=page_size,
        device_pool_tokens=device_pool_tokens,
        mamba_device_slots=mamba_device_slots if hybrid else None,
        kv_bytes_per_token=kv_bpt,
        mamba_bytes_per_slot=mamba_bps,
    )
    if variant_hicache is None:
        return HostPoolPrediction(
            hicache_enabled=False,
            source="off",
            ratio=None,
            size_gb=None,
            kv_host_tokens=0,
            kv_host_bytes=0,
            mamba_host_slots=0 if hybrid else None,
            mamba_host_bytes=0 if hybrid else None,
            total_bytes_per_rank=0,
            known=True,
            note="HiCache off: no host pool",
            **common,
        )

    size_gb = float(_hicache_field(variant_hicache, "size_gb") or 0.0)
    ratio_raw = _hicache_field(variant_hicache, "ratio")
    ratio = float(ratio_raw) if ratio_raw is not None else SGLANG_DEFAULT_HICACHE_RATIO
    source: Literal["ratio", "size_gb"] = "size_gb" if size_gb > 0 else "ratio"
    notes: list[str] = []

    kv_tokens: int | None = None
    mamba_slots: int | None = None
    if source == "size_gb":
        kv_gb, mamba_gb = size_gb, size_gb
        if hybrid and mamba_size_gb is not None and 0 < mamba_size_gb < size_gb:
            kv_gb, mamba_gb = size_gb - mamba_size_gb, mamba_size_gb
            common["size_split"] = "explicit"
        elif hybrid and size_split == "proportional":
            if device_pool_tokens is None or mamba_device_slots is None:
                kv_gb = mamba_gb = None  # the split needs both device pools' bytes
                notes.append(DEVICE_POOL_UNKNOWN if device_pool_tokens is None else MAMBA_POOL_UNKNOWN)
            else:
                kv_dev = device_pool_tokens * kv_bpt
                mamba_dev = mamba_device_slots * mamba_bps
                total_dev = kv_dev + mamba_dev
                kv_gb = size_gb * kv_dev / total_dev
                mamba_gb = size_gb * mamba_dev / total_dev
        if kv_gb is not None:
            kv_tokens = _aligned(_tokens_from_gb(kv_gb, kv_bpt), page_size)
        if hybrid and mamba_gb is not None:
            mamba_slots = _aligned(_tokens_from_gb(mamba_gb, mamba_bps), 1) if mamba_bps > 0 else 0
    else:
        if device_pool_tokens is None:
            notes.append(DEVICE_POOL_UNKNOWN)
        else:
            kv_tokens = _aligned(int(device_pool_tokens * ratio), page_size)
        if hybrid:
            if mamba_device_slots is None:
                if device_pool_tokens is not None:
                    notes.append(MAMBA_POOL_UNKNOWN)
            else:
                mamba_slots = _aligned(int(mamba_device_slots * ratio), 1)

    kv_bytes = None if kv_tokens is None else kv_tokens * kv_bpt
    mamba_bytes = None if mamba_slots is None else mamba_slots * mamba_bps
    known = kv_bytes is not None and (not hybrid or mamba_bytes is not None)
    total = (kv_bytes + (mamba_bytes or 0)) if known else None
    return HostPoolPrediction(
        hicache_enabled=True,
        source=source,
        ratio=ratio,
        size_gb=size_gb or None,
        kv_host_tokens=kv_tokens,
        kv_host_bytes=kv_bytes,
        mamba_host_slots=mamba_slots,
        mamba_host_bytes=mamba_bytes,
        total_bytes_per_rank=total,
        known=known,
        note="; ".join(notes),
        **common,
    )


# ----------------------------------------------------------------------------- budget check


@dataclass(frozen=True)
class PreflightResult:
    """Prediction vs sglang's budget. `fits` is None when the prediction is not known yet."""

    fits: bool | None
    requested_gb: float | None
    budget_gb: float
    mem_available_kib: int
    reserve_gib: float
    ranks_on_host: int
    failing_pool: str | None  # "kv" | "mamba" (the pool sglang would refuse) or None
    reason: str
    prediction: HostPoolPrediction

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["prediction"] = self.prediction.to_dict()
        return d


def budget_bytes_per_rank(
    mem_available_kib: int, reserve_gib: float = DEFAULT_RESERVE_GIB, ranks_on_host: int = 1
) -> int:
    """sglang: `(MemAvailable - 10 GiB) // ranks_per_host`."""
    return (int(mem_available_kib) * 1024 - int(reserve_gib * GIB)) // max(1, int(ranks_on_host))


def check_budget(
    prediction: HostPoolPrediction,
    mem_available_kib: int,
    reserve_gib: float = DEFAULT_RESERVE_GIB,
    ranks_on_host: int = 1,
) -> PreflightResult:
    """Would sglang accept this host pool with `mem_available_kib` of MemAvailable at load time?"""
    ranks_on_host = max(1, int(ranks_on_host))
    budget = budget_bytes_per_rank(mem_available_kib, reserve_gib, ranks_on_host)
    how = (
        f"(MemAvailable {mem_available_kib / 1024**2:.2f} GiB - {reserve_gib:g} GiB reserve)"
        f" / {ranks_on_host} rank{'s' if ranks_on_host != 1 else ''}"
    )
    common = dict(
        budget_gb=round(budget / GB, 3),
        mem_available_kib=int(mem_available_kib),
        reserve_gib=reserve_gib,
        ranks_on_host=ranks_on_host,
        prediction=prediction,
    )
    if not prediction.hicache_enabled:
        return PreflightResult(
            fits=True, requested_gb=0.0, failing_pool=None, reason="HiCache off: no host pool requested", **common
        )
    if not prediction.known or prediction.total_bytes_per_rank is None:
        return PreflightResult(
            fits=None, requested_gb=None, failing_pool=None, reason=f"not checked: {prediction.note}", **common
        )
    requested = prediction.total_bytes_per_rank
    kv = prediction.kv_host_bytes or 0
    failing = None
    if kv > budget:
        failing = "kv"
    elif requested > budget:
        failing = "mamba"
    if failing is None:
        reason = f"fits: {requested / GB:.2f} GB host pool per rank within the {budget / GB:.2f} GB budget {how}"
    else:
        want = kv if failing == "kv" else (prediction.mamba_host_bytes or 0)
        have = budget if failing == "kv" else budget - kv
        reason = (
            f"does not fit: the {failing} host pool requests {want / GB:.2f} GB but only "
            f"{have / GB:.2f} GB is free of the {budget / GB:.2f} GB budget {how}"
        )
    return PreflightResult(
        fits=failing is None, requested_gb=round(requested / GB, 3), failing_pool=failing, reason=reason, **common
    )


def preflight_variant(
    scenario: Scenario,
    variant: Variant,
    device_pool_tokens: int | None = None,
    *,
    mem_available_kib: int | None = None,
    mamba_device_slots: int | None = None,
    server_info: Mapping[str, Any] | None = None,
    before: Mapping[str, Any] | None = None,
    gpu_mem_gib: float | None = None,
) -> dict[str, Any] | None:
    """The runner's preflight record for one variant (JSON-ready), or None when
    `preflight.mode` is off.

    Before launch (no `device_pool_tokens`): the device pool comes from `--max-total-tokens` when
    the variant's args give it; else, for a real sglang, it is predicted from config.json and one
    GPU's memory (`gpu_mem_gib`, else `preflight.gpu_mem_gib`, else the smallest GPU NVML lists)
    x `--mem-fraction-static` or sglang's default for that GPU (`device_pool` says how); else the
    prediction is unknown and `fits` is None. After ready, call again with the server's
    `max_total_num_tokens` and the before-launch record as `before`;
    the budget then uses the MemAvailable that record read from the host (or `mem_available_kib`),
    and the record is kept under `before_launch`. Hybrid models also need the mamba device
    slots: `mamba_device_slots`, else `server_info["max_mamba_cache_size"]`, else
    `--max-mamba-cache-size`. For `backend: sim` with `sim.mem_available_gib`, that pretended
    value is the MemAvailable (the simulator applies sglang's rule to it).
    """
    cfg = scenario.preflight
    mode = cfg.mode
    if mode == "off":
        return None
    server = scenario.server
    sim = server.sim if server.backend == "sim" else None
    tp_size = int(server.tp_size or 1)
    reserve_gib = float(cfg.reserve_gib)
    sim_host = sim.host if sim is not None else None
    if sim_host is not None and "reserve_gib" not in cfg.model_fields_set:
        reserve_gib = float(sim_host.reserve_gib)  # the simulated build's own reserve, unless preflight says otherwise
    ranks_on_host = int(cfg.ranks_on_host) if cfg.ranks_on_host else tp_size
    stage = "after_ready" if device_pool_tokens is not None else "before_launch"

    source = "host"
    if mem_available_kib is None and sim is not None and sim.mem_available_gib is not None:
        mem_available_kib = int(sim.mem_available_gib * 1024 * 1024)
        source = "sim.mem_available_gib"
    # After ready, judge against the MemAvailable read before launch: by then the server's own
    # pools have taken host memory, so a fresh reading would judge the pool against itself.
    if (
        mem_available_kib is None
        and stage == "after_ready"
        and before is not None
        and before.get("mem_available_source") == "host"
    ):
        mem_available_kib = int(before["mem_available_kib"])
        source = "host, read before launch"
    if mem_available_kib is None:
        mem_available_kib = procfs.read_mem_available_kib()
    elif source == "host":
        source = "given"
    # sglang reads MemAvailable while weights load, when it is lowest: now minus the loader's dip
    # (preflight.load_dip_gib; the simulated host's own for the simulator; after ready: the dip read
    # before launch, from its idle figure)
    idle_kib = (
        int(before.get("mem_available_idle_kib", mem_available_kib))
        if source.endswith("before launch")
        else mem_available_kib
    )
    dip_gib = cfg.load_dip_gib
    if dip_gib is None:
        dip_gib = sim_host.load_dip_gib if sim_host is not None else 0.0
    dip_kib = int(float(dip_gib) * 1024**2)
    mem_available_kib = max(0, idle_kib - dip_kib)

    model_path = variant.model_path or server.model_path
    args = dict(variant.args or server.args or {})
    pool_args = pool_args_from_server_args(args)
    tokens = device_pool_tokens if device_pool_tokens is not None else pool_args.max_total_tokens
    device_pool: dict[str, Any] = {
        "tokens": tokens,
        "source": "server" if device_pool_tokens is not None else ("--max-total-tokens" if tokens else None),
    }
    if mamba_device_slots is None and server_info:
        slots = server_info.get("max_mamba_cache_size")
        mamba_device_slots = slots if isinstance(slots, int) and slots > 0 else None
    record: dict[str, Any] = {
        "stage": stage,
        "mode": mode,
        "mem_available_source": source,
        "mem_available_idle_kib": idle_kib,
        "load_dip_kib": dip_kib,
        "device_pool": device_pool,
    }
    try:
        shape = load_model_shape(model_path)
    except Exception as e:  # ModelConfigError or unreadable path: say so, never block the run
        record.update(
            fits=None,
            requested_gb=None,
            budget_gb=None,
            failing_pool=None,
            mem_available_kib=mem_available_kib,
            reserve_gib=reserve_gib,
            ranks_on_host=ranks_on_host,
            prediction=None,
            reason=f"not checked: model config unreadable ({e})",
        )
    else:
        kv_dtype_bytes = kv_dtype_bytes_for(pool_args.kv_cache_dtype)
        mamba_slots = mamba_device_slots if mamba_device_slots is not None else pool_args.max_mamba_cache_size
        if tokens is None and server.backend != "sim" and variant.hicache:
            device_pool.update(
                predict_device_pool(
                    shape,
                    tp_size,
                    args,
                    gpu_mem_gib if gpu_mem_gib is not None else cfg.gpu_mem_gib,
                    kv_dtype_bytes,
                    mamba_slots,
                )
            )
            tokens = device_pool["tokens"]
        prediction = predict_host_pool(
            shape,
            variant.hicache,
            tokens,
            tp_size,
            page_size=pool_args.page_size,
            mamba_device_slots=mamba_slots,
            kv_dtype_bytes=kv_dtype_bytes,
            size_split=host_size_split(scenario),
            mamba_size_gb=pool_args.mamba_size_gb,
        )
        record.update(check_budget(prediction, mem_available_kib, reserve_gib, ranks_on_host).to_dict())
    if before is not None:
        record["before_launch"] = dict(before)
    return record


# ----------------------------------------------------------------------------- the GPU pool


def host_size_split(scenario: Scenario) -> Literal["proportional", "each"]:
    """How this scenario's servers share ``--hicache-size`` between a hybrid model's host pools:
    ``preflight.host_size_split``, where "auto" is the server's own rule (sglang 0.5.17:
    proportional; the simulator: ``server.sim.host_split``)."""
    chosen = scenario.preflight.host_size_split
    if chosen in ("each", "proportional"):
        return chosen
    server = scenario.server
    if server.backend == "sim":
        return "proportional" if server.sim is not None and server.sim.host_split == "proportional" else "each"
    return "proportional"


def preflight_line(variant_name: str, record: Mapping[str, Any] | None) -> str | None:
    """The console line for a before-launch preflight record: always when the pool would not fit,
    and when the GPU pool had to be predicted (sglang sizes it itself); None otherwise."""
    if not record:
        return None
    pool = record.get("device_pool") or {}
    predicted = pool.get("source") == "predicted" or (pool.get("tokens") is None and pool.get("note"))
    if record.get("fits") is not False and not predicted:
        return None
    parts = [f"preflight: {variant_name}:"]
    if predicted:
        tokens = pool.get("tokens")
        parts.append(
            f"GPU pool ~{tokens} tokens ({pool.get('note')});" if tokens is not None else f"{pool.get('note')};"
        )
    parts.append(str(record.get("reason")))
    return " ".join(parts)


def pools_from_log(log_text: str, scenario: Scenario, variant: Variant) -> dict[str, Any]:
    """``logscan.parse_pools`` with the variant's model sizes, so a mamba host pool logged in GB
    only gets its slot count (status.json ``pools``)."""
    server = scenario.server
    tp_size = int(server.tp_size or 1)
    try:
        shape = load_model_shape(variant.model_path or server.model_path)
    except Exception:  # noqa: BLE001 - sizes from the log alone
        return logscan.parse_pools(log_text).to_json()
    args = dict(variant.args or server.args or {})
    kv_dtype = kv_dtype_bytes_for(pool_args_from_server_args(args).kv_cache_dtype)
    return logscan.parse_pools(
        log_text,
        mamba_bytes_per_slot=shape.mamba_bytes_per_slot(tp_size) if shape.is_hybrid else None,
        kv_bytes_per_token=shape.kv_bytes_per_token(tp_size, kv_dtype),
    ).to_json()

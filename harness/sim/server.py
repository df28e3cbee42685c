"""Start-up, lifetime and faults of the simulated server process.

One job: play a real ``sglang.launch_server`` process from launch to exit -- the log lines in
sglang's order and wording, the host-pool rule, the layer_first + mamba assertion, binding HTTP
only once the "scheduler" is up, a warm-up request, then ``The server is fired up and ready to
roll!`` -- and the ``--sim-fault`` misbehaviours the harness must survive.

Log lines (stdout, ``[YYYY-mm-dd HH:MM:SS]`` or ``[... TP0]`` prefixed):
``server_args=ServerArgs(...)``, a ``SIMULATED sglang server`` banner, ``Load weight begin/end``,
``KV Cache is allocated. #tokens: N, K size: X GB, V size: X GB`` (hybrid: ``Mamba Cache is
allocated. ...``), ``Allocating kv hierarchical KV host pool: N tokens, X GB host memory.`` (hybrid:
``Allocating X GB host memory for hierarchical Mamba cache (layout=L).``), ``max_total_num_tokens=N,
chunked_prefill_size=..., max_prefill_tokens=..., max_running_requests=..., context_len=...,
available_gpu_mem=... GB``, uvicorn's lines, ``End of prefill warmup with status 200, ...``, ``The
server is fired up and ready to roll!``. Failures print a scheduler traceback (``ValueError: Not
enough host memory available. ...``, ``AssertionError: Unsupported layout: layer_first``, ``CUDA
error: an illegal memory access was encountered``) and exit 1.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
import time
from typing import Any

import uvicorn

from harness.core.model_config import KV_CACHE_DTYPE_BYTES, ModelConfigError, ModelShape, load_model_shape
from harness.sim.app import AppState, build_app, wait_done
from harness.sim.args import SimArgs, sim_version
from harness.sim.cache import TwoTierCache
from harness.sim.collector import BatchCollector
from harness.sim.cost import CostModel
from harness.sim.engine import Engine, EngineConfig
from harness.sim.fault_effects import crash_with_illegal_access
from harness.sim.faults import Fault
from harness.sim.host import CgroupOomKill, SimulatedHost
from harness.sim.hostmem import HostBudget, HostMemoryError, TouchedBuffer, host_pool_tokens, read_mem_available_bytes
from harness.sim.metrics import SimMetrics
from harness.sim.request import SamplingParams, SimRequest
from harness.sim.storage_file import FileStorage
from harness.sim.tokens import SimTokenizer, TokenModel

SITE = "/usr/local/lib/python3.12/dist-packages/sglang/srt"
DEFAULT_MAX_TOTAL_TOKENS = 20480  # the H200 runs used --max-total-tokens 20480
DEFAULT_MAMBA_SLOTS = 32

log = logging.getLogger("sglang.sim")
tplog = logging.getLogger("sglang.sim.scheduler")


class _Formatter(logging.Formatter):
    """sglang's prefix: ``[time TP0]`` for scheduler loggers, ``[time]`` otherwise."""

    def format(self, record: logging.LogRecord) -> str:
        stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(record.created))
        tp = " TP0" if record.name.startswith("sglang.sim.scheduler") else ""
        return f"[{stamp}{tp}] {record.getMessage()}"


def _setup_logging(level: str) -> None:
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(_Formatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(getattr(logging, str(level).upper(), logging.INFO))


def _scheduler_failed() -> int:
    """What real sglang 0.5.17 does when a scheduler dies at startup (seen on an H200): the
    launcher logs the child's SIGQUIT, kills its whole tree including itself, and so exits by
    SIGKILL (-9), not with exit code 1."""
    log.info("Received sigquit from a child process. It usually means the child failed.")
    log.info("kill_process_tree called: parent_pid=%d, include_parent=True, pid=%d", os.getpid(), os.getpid())
    sys.stdout.flush()
    sys.stderr.flush()
    os.kill(os.getpid(), signal.SIGKILL)
    return 1  # not reached


def _traceback(frames: list[tuple[str, int, str, str]], error: str) -> None:
    """Print a scheduler-process failure the way sglang's launcher shows it, then exit 1."""
    lines = ["Scheduler hit an exception: Traceback (most recent call last):"]
    for path, line, func, code in frames:
        lines.append(f'  File "{SITE}/{path}", line {line}, in {func}')
        lines.append(f"    {code}")
    lines.append(error)
    sys.stdout.flush()
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    sys.stderr.write(f"[{stamp} TP0] " + "\n".join(lines) + "\n\n")
    sys.stderr.write(f"[{stamp}] Received sigquit from a child process. It usually means the child failed.\n")
    sys.stderr.flush()


_INIT_FRAMES = [
    ("managers/scheduler.py", 2946, "run_scheduler_process", "scheduler = Scheduler("),
    ("managers/scheduler.py", 341, "__init__", "self.init_cache_with_memory_pool()"),
    ("managers/scheduler.py", 702, "init_cache_with_memory_pool", "self.tree_cache = create_tree_cache(params)"),
]


class _Server(uvicorn.Server):
    """uvicorn without its own signal handling: SIGTERM policy is ours (ignore_sigterm)."""

    @contextlib.contextmanager
    def capture_signals(self):  # type: ignore[override]
        yield


def _sleep_forever() -> None:
    while True:
        time.sleep(3600)


FILE_BACKEND_DIR_ENV = "SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR"  # sglang's HiCacheFile reads it
DEFAULT_FILE_BACKEND_DIR = "/tmp/hicache"  # HiCacheFile's default file_path
DEFAULT_PREFETCH_THRESHOLD = 256  # tokens; sglang's default for extra-config prefetch_threshold


class Plan:
    """Everything resolved from the flags and the model before anything is allocated."""

    def __init__(self, args: SimArgs, shape: ModelShape) -> None:
        a = args.sglang
        self.args, self.shape = args, shape
        self.host: SimulatedHost | None = None  # a simulated host (--sim-host-mem-total-gib), set by run()
        self.tp = a["tp_size"]
        self.page_size = a["page_size"] or 1
        total = a["max_total_tokens"] or DEFAULT_MAX_TOTAL_TOKENS
        self.max_total_tokens = max(self.page_size, total // self.page_size * self.page_size)
        cps = a["chunked_prefill_size"]
        self.chunked_prefill_size = 8192 if cps is None else cps
        self.context_len = a["context_length"] or shape.max_position_embeddings
        self.mamba_slots = (a["max_mamba_cache_size"] or DEFAULT_MAMBA_SLOTS) if shape.is_hybrid else 0
        mrr = a["max_running_requests"] or 4096
        self.max_running_requests = min(mrr, self.mamba_slots) if shape.is_hybrid else mrr
        kvb = KV_CACHE_DTYPE_BYTES.get(a["kv_cache_dtype"])
        self.kv_bytes_per_token = shape.kv_bytes_per_token(self.tp, kvb)
        self.mamba_bytes_per_slot = shape.mamba_bytes_per_slot(self.tp)
        self.hicache = bool(a["enable_hierarchical_cache"]) and not a["disable_radix_cache"]
        self.layout = a["hicache_mem_layout"]
        if self.layout == "page_first" and a["hicache_io_backend"] == "direct":
            self.layout = "page_first_direct"  # sglang switches it the same way, with a warning
        self.host_tokens = 0
        self.mamba_host_slots = 0
        self.served_model_name = a["served_model_name"] or a["model_path"]
        # L3: sglang enables storage when a backend is named (HiCache on); the file backend's
        # directory comes from its environment variable, as in sglang's HiCacheFile
        self.storage_backend = a["hicache_storage_backend"] if self.hicache else None
        extra = a["hicache_storage_backend_extra_config"] or {}
        self.prefetch_threshold = int(extra.get("prefetch_threshold", DEFAULT_PREFETCH_THRESHOLD))
        self.storage_dir = (
            os.environ.get(FILE_BACKEND_DIR_ENV, DEFAULT_FILE_BACKEND_DIR) if self.storage_backend == "file" else None
        )
        self.storage_tokens = (
            int(args.storage_gb * 1e9 / max(1, self.kv_bytes_per_token)) if self.storage_backend else 0
        )


def _log_startup(plan: Plan) -> None:
    a = plan.args.sglang
    shown = ", ".join(f"{k}={v!r}" for k, v in a.items())
    log.info("server_args=ServerArgs(%s)", shown)
    log.info(
        "SIMULATED sglang server (harness.sim, version %s): no GPU, no weights; timings from a cost model "
        "x %s, host pools touched x %s. faults=%s",
        sim_version(os.environ),
        plan.args.time_scale,
        plan.args.host_mem_scale,
        [f.name if arg is None else f"{f.name}={arg:g}" for f, arg in plan.args.faults.items()],
    )
    for flag, value in plan.args.unmodelled.items():
        log.warning("SIMULATED: %s %s accepted but not modelled (harness.sim.cli.UNMODELLED_FLAGS)", flag, value)
    tplog.info("Init torch distributed begin.")
    tplog.info("Init torch distributed ends. mem usage=0.00 GB")
    tplog.info("Load weight begin. avail mem=139.37 GB")


def _host_sizes_gb(plan: Plan) -> tuple[float, float]:
    """``--hicache-size`` for the KV and the mamba host pool: each the whole size, or (hybrid,
    ``--sim-host-split proportional``) split by device pool bytes as sglang 0.5.17's
    ``_split_hicache_size`` does -- the KV pool's counted ``elastic_kv_pool`` times over."""
    size = float(plan.args.sglang["hicache_size"] or 0)
    if size <= 0 or not plan.shape.is_hybrid or plan.args.host_split != "proportional":
        return size, size
    kv_dev = plan.max_total_tokens * plan.kv_bytes_per_token * (plan.args.faults.get(Fault.elastic_kv_pool) or 1)
    mamba_dev = plan.mamba_slots * plan.mamba_bytes_per_slot
    return size * kv_dev / (kv_dev + mamba_dev), size * mamba_dev / (kv_dev + mamba_dev)


class HostRegisterError(RuntimeError):
    """sglang's failed ``cudaHostRegister`` (PR #36798's chunked form), after the rollback."""


def _register(plan: Plan, total: int) -> None:
    """PR #36798's chunked registration of a KV host pool of ``total`` bytes: chunks of
    ``SGLANG_HICACHE_HOST_REGISTER_CHUNK_GB`` GiB aligned down to whole pages (page-first layouts;
    layer_first registers the buffer at once). Nothing is registered for real; with
    ``host_register_fails_at_chunk=N`` the N-th chunk fails as a real one does."""
    fail_at = plan.args.faults.get(Fault.host_register_fails_at_chunk)
    if fail_at is None:
        return
    try:
        limit = max(float(os.environ.get("SGLANG_HICACHE_HOST_REGISTER_CHUNK_GB", "256")), 1) * 1024**3
    except ValueError:
        limit = 256 * 1024**3
    granularity = plan.page_size * plan.kv_bytes_per_token if plan.layout.startswith("page_first") else None
    chunk = total if granularity is None else int(limit // granularity * granularity)
    offset, n = 0, 0
    while offset < total:
        size = min(chunk, total - offset)
        n += 1
        if n == fail_at:
            raise HostRegisterError(
                f"cudaHostRegister failed (rc=1, invalid argument) at offset={offset} size={size} "
                f"(total={total}, chunk_limit={chunk}); host buffer is not pinned and device transfers may "
                "silently return stale data."
            )
        offset += size


def _allocate_host_pools(plan: Plan, buffers: list[TouchedBuffer]) -> None:
    """sglang's KV host pool, then (hybrid) its mamba host pool; raises on refusal."""
    a, args = plan.args.sglang, plan.args
    avail = int(args.mem_available_gib * 1024**3) if args.mem_available_gib is not None else read_mem_available_bytes()
    if plan.host is not None:  # a simulated host: the rule reads its MemAvailable while weights load
        avail = plan.host.mem_available_at_load()
    budget = HostBudget(mem_available_bytes=avail, ranks=plan.tp, reserve_bytes=int(args.host_reserve_gib * 1024**3))
    kv_size_gb, mamba_size_gb = _host_sizes_gb(plan)
    plan.host_tokens = host_pool_tokens(
        plan.max_total_tokens, a["hicache_ratio"], kv_size_gb, plan.kv_bytes_per_token, plan.page_size
    )
    if plan.host_tokens <= plan.max_total_tokens:
        tplog.warning(
            "HiCache kv host pool (%d tokens) is smaller than the device pool (%d tokens);"
            "L2 cache effectiveness is reduced.Consider increasing --hicache-ratio (or --hicache-size) "
            "for higher L2 cache hit rate.",
            plan.host_tokens,
            plan.max_total_tokens,
        )
    kv_bytes = plan.host_tokens * plan.kv_bytes_per_token
    budget.claim(kv_bytes)
    tplog.info(
        "Allocating kv hierarchical KV host pool: %d tokens, %.2f GB host memory.", plan.host_tokens, kv_bytes / 1e9
    )
    # every TP rank on this host allocates its own pool: touch tp x (scaled) bytes
    buffers.append(TouchedBuffer(int(kv_bytes * plan.tp * args.host_mem_scale)))
    if plan.host is not None:
        plan.host.pin(kv_bytes * plan.tp)
    time.sleep(args.register_s_per_gb * kv_bytes * plan.tp / 1e9)  # pinning: cudaHostRegister of every rank's pool
    _register(plan, kv_bytes)
    if not plan.shape.is_hybrid:
        return
    if plan.layout not in ("page_first", "page_first_direct"):
        raise AssertionError(f"Unsupported layout: {plan.layout}")
    plan.mamba_host_slots = host_pool_tokens(
        plan.mamba_slots, a["hicache_ratio"], mamba_size_gb, plan.mamba_bytes_per_slot, 1
    )
    m_bytes = plan.mamba_host_slots * plan.mamba_bytes_per_slot
    budget.claim(m_bytes)
    tplog.info("Allocating %.2f GB host memory for hierarchical Mamba cache (layout=%s).", m_bytes / 1e9, plan.layout)
    buffers.append(TouchedBuffer(int(m_bytes * plan.tp * args.host_mem_scale)))
    if plan.host is not None:
        plan.host.pin(m_bytes * plan.tp)


def _per_scale(gbs: float, time_scale: float) -> float | None:
    """A bandwidth in the server's time: time_scale 0 (instant) has none."""
    return gbs / time_scale if time_scale > 0 else None


def _server_info(plan: Plan) -> dict[str, Any]:
    info: dict[str, Any] = dict(plan.args.sglang)
    info.update(
        {
            "version": sim_version(os.environ),
            "simulated": True,
            "backend": "harness.sim",
            "max_total_num_tokens": plan.max_total_tokens,
            "max_req_input_len": min(plan.context_len, plan.max_total_tokens) - 1,
            "chunked_prefill_size": plan.chunked_prefill_size,
            "max_running_requests": plan.max_running_requests,
            "page_size": plan.page_size,
            "context_len": plan.context_len,
            "hicache_mem_layout": plan.layout,
            "host_pool_tokens": plan.host_tokens,
            "host_pool_gb": round(plan.host_tokens * plan.kv_bytes_per_token / 1e9, 4),
            "kv_bytes_per_token": plan.kv_bytes_per_token,
            "mamba_host_pool_slots": plan.mamba_host_slots,
            "mamba_bytes_per_slot": plan.mamba_bytes_per_slot,
            "hicache_storage_dir": plan.storage_dir,
            "storage_pool_tokens": plan.storage_tokens,
            "sim": {
                "time_scale": plan.args.time_scale,
                "host_mem_scale": plan.args.host_mem_scale,
                "mem_available_gib": plan.args.mem_available_gib,
                "startup_s": plan.args.startup_s,
                "step_ms_per_request": plan.args.step_ms_per_request,
                "storage_gb": plan.args.storage_gb,
                "storage_read_gbs": plan.args.storage_read_gbs,
                "storage_write_gbs": plan.args.storage_write_gbs,
                "h2d_gbs": plan.args.h2d_gbs,
                # the pretend host's links as a probe there would see them, in the server's time
                # (its cost model's seconds x time_scale): what a hit's roofline floor is made of
                "platform_h2d_gbs": _per_scale(plan.args.h2d_gbs, plan.args.time_scale),
                "platform_storage_read_gbs": _per_scale(plan.args.storage_read_gbs, plan.args.time_scale),
                "host_split": plan.args.host_split,
                "unmodelled_flags": dict(plan.args.unmodelled),
                "faults": [{"name": f.name, "arg": arg} for f, arg in plan.args.faults.items()],
            },
        }
    )
    return info


def run(args: SimArgs) -> int:
    """The whole life of one simulated server process; returns its exit code."""
    if Fault.spawn_child in args.faults:
        # the launched process is only a launcher: the real server is its child, same session
        if os.fork() > 0:
            sys.stdout.write(
                f"[{time.strftime('%Y-%m-%d %H:%M:%S')}] launcher pid {os.getpid()} "
                "handed over to a child process and exits (simulated spawn_child)\n"
            )
            sys.stdout.flush()
            os._exit(0)
    if Fault.ignore_sigterm in args.faults:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    _setup_logging(args.sglang["log_level"])
    try:
        shape = load_model_shape(args.sglang["model_path"])
    except ModelConfigError as exc:
        _traceback(
            [("utils/hf_transformers_utils.py", 226, "get_config", "config = AutoConfig.from_pretrained(")],
            f"OSError: {exc}",
        )
        return 1
    plan = Plan(args, shape)
    plan.host = SimulatedHost.from_args(args)
    if plan.host is not None:
        plan.host.set_loading(True)
        log.info("SIMULATED host: its /proc files in %s (harness.sim.host)", plan.host.dir)
    _log_startup(plan)

    exit_before_ready_s = args.faults.get(Fault.exit_before_ready)
    if exit_before_ready_s is not None:
        time.sleep(exit_before_ready_s)
        log.info("exiting before ready with status 0 (simulated fault exit_before_ready)")
        return 0
    time.sleep(args.startup_s)
    tplog.info(
        "Load weight end. type=%s, dtype=torch.bfloat16, avail mem=120.00 GB, mem usage=0.00 GB.",
        (shape.architectures or ("Unknown",))[0],
    )
    if Fault.hang_at_startup in args.faults:
        tplog.info("Capture cuda graph begin. This can take up to several minutes.")
        _sleep_forever()
    if Fault.cuda_fault_at_startup in args.faults:
        tplog.info("Capture cuda graph begin. This can take up to several minutes.")
        crash_with_illegal_access("startup")

    kv_gb = plan.max_total_tokens * plan.kv_bytes_per_token / 2 / 1e9
    tplog.info(
        "KV Cache is allocated. #tokens: %d, K size: %.2f GB, V size: %.2f GB", plan.max_total_tokens, kv_gb, kv_gb
    )
    if shape.is_hybrid:
        tplog.info(
            "Mamba Cache is allocated. max_mamba_cache_size: %d, conv_state size: %.2f GB, ssm_state size: %.2f GB ",
            plan.mamba_slots + 1,
            (plan.mamba_slots + 1) * shape.mamba_conv_bytes_per_slot(plan.tp) / 1e9,
            (plan.mamba_slots + 1) * shape.mamba_temporal_bytes_per_slot(plan.tp) / 1e9,
        )
    tplog.info("Memory pool end. avail mem=%.2f GB", 12.34)
    tplog.info("Capture cuda graph begin. This can take up to several minutes. avail mem=%.2f GB", 12.34)
    t0 = time.perf_counter()
    time.sleep(args.capture_s)
    tplog.info(
        "Capture cuda graph end. Time elapsed: %.2f s. mem usage=0.00 GB. avail mem=%.2f GB.",
        time.perf_counter() - t0,
        12.34,
    )

    buffers: list[TouchedBuffer] = []
    try:
        if plan.hicache:
            try:
                _allocate_host_pools(plan, buffers)
            except HostMemoryError as exc:
                pool = "mamba.py" if plan.host_tokens and len(buffers) == 1 else "base.py"
                _traceback(
                    _INIT_FRAMES
                    + [
                        (
                            "mem_cache/hi_mamba_radix_cache.py" if shape.is_hybrid else "mem_cache/hiradix_cache.py",
                            118,
                            "__init__",
                            "self.token_to_kv_pool_host = self._create_host_pool(",
                        ),
                        (f"mem_cache/pool_host/{pool}", 131, "__init__", "raise ValueError("),
                    ],
                    f"ValueError: {exc}",
                )
                return _scheduler_failed()
            except HostRegisterError as exc:
                _traceback(
                    _INIT_FRAMES
                    + [
                        ("mem_cache/pool_host/mha.py", 212, "init_kv_buffer", "return alloc_func("),
                        ("mem_cache/pool_host/common.py", 171, "_cuda_host_register", "raise RuntimeError("),
                    ],
                    f"RuntimeError: {exc}",
                )
                return _scheduler_failed()
            except CgroupOomKill as exc:
                # the kernel's OOM killer: no traceback, the process is gone (the line stands in for dmesg)
                log.error("%s", exc)
                sys.stdout.flush()
                os.kill(os.getpid(), signal.SIGKILL)
            except AssertionError as exc:
                _traceback(
                    _INIT_FRAMES
                    + [
                        ("mem_cache/hi_mamba_radix_cache.py", 131, "__init__", "self.mamba_pool_host = MambaPoolHost("),
                        ("mem_cache/pool_host/mamba.py", 70, "__init__", "assert layout in ["),
                    ],
                    f"AssertionError: {exc}",
                )
                return _scheduler_failed()
        tplog.info(
            "max_total_num_tokens=%d, chunked_prefill_size=%d, max_prefill_tokens=%d, "
            "max_running_requests=%d, context_len=%d, available_gpu_mem=%.2f GB",
            plan.max_total_tokens,
            plan.chunked_prefill_size,
            args.sglang["max_prefill_tokens"],
            plan.max_running_requests,
            plan.context_len,
            12.34,
        )
        if plan.host is not None:
            plan.host.set_loading(False)
        return asyncio.run(_serve(plan))
    finally:
        for b in buffers:
            b.close()
        if plan.host is not None:
            plan.host.close()


async def _serve(plan: Plan) -> int:
    args, a, shape = plan.args, plan.args.sglang, plan.shape
    cache = TwoTierCache(
        plan.max_total_tokens,
        plan.host_tokens if plan.hicache else 0,
        plan.page_size,
        a["hicache_write_policy"],
        hybrid=shape.is_hybrid,
        enabled=not a["disable_radix_cache"],
        storage_tokens=plan.storage_tokens,
    )
    if args.storage_persist and plan.storage_dir and cache.storage_capacity:
        files = FileStorage(
            plan.storage_dir,
            plan.served_model_name,
            plan.tp,
            plan.page_size * plan.kv_bytes_per_token,
            mla=bool(getattr(shape, "is_mla", False)),
        )
        kept = cache.attach_files(files)
        log.info("HiCacheFile storage at %s: %d pages of this model served from earlier runs", plan.storage_dir, kept)
    cfg = EngineConfig(
        max_total_tokens=plan.max_total_tokens,
        chunked_prefill_size=plan.chunked_prefill_size,
        max_running_requests=plan.max_running_requests,
        context_len=plan.context_len,
        kv_bytes_per_token=plan.kv_bytes_per_token,
        mamba_bytes_per_slot=plan.mamba_bytes_per_slot,
        hybrid=shape.is_hybrid,
        deterministic=bool(a["enable_deterministic_inference"]),
        faults=args.faults,
        random_seed=a["random_seed"] if a["random_seed"] is not None else 0,
        storage_backend=plan.storage_backend,
        prefetch_threshold=plan.prefetch_threshold,
        layout=plan.layout if plan.hicache else None,
        log_time_stats=bool(a["enable_request_time_stats_logging"]),
    )
    metrics = SimMetrics(plan.served_model_name, plan.storage_backend if a["enable_metrics"] else None)
    # outputs are drawn from the vocabulary text can be decoded from: the tokenizer's, when loaded
    tokenizer = SimTokenizer(shape.vocab_size, a["tokenizer_path"] or a["model_path"])
    engine = Engine(
        cfg,
        cache,
        CostModel.for_model(shape, plan.tp, a["hicache_io_backend"], plan.layout, args.time_scale, **args.cost_knobs()),
        TokenModel(tokenizer.vocab_size, shape.eos_token_ids),
        metrics,
    )
    engine.collector = BatchCollector()  # the older GC generations inside batches' modelled time
    engine.collector.install()
    state = AppState(
        engine=engine,
        server_info=_server_info(plan),
        model_info={
            "model_path": a["model_path"],
            "tokenizer_path": a["tokenizer_path"] or a["model_path"],
            "is_generation": True,
            "preferred_sampling_params": None,
            "weight_version": "default",
            "has_image_understanding": False,
            "has_audio_understanding": False,
            "model_type": shape.model_type,
            "architectures": list(shape.architectures),
            "simulated": True,
            "simulated_tokenizer": tokenizer.kind,  # how text is counted (harness.sim.tokens)
        },
        skip_tokenizer=bool(a["skip_tokenizer_init"]),
        enable_metrics=bool(a["enable_metrics"]),
        enable_cache_report=bool(a["enable_cache_report"]),
        served_model_name=plan.served_model_name,
        tokenizer=tokenizer,
        faults=dict(args.faults),
    )
    server = _Server(
        uvicorn.Config(
            build_app(state),
            host=a["host"],
            port=a["port"],
            log_config=None,
            access_log=True,
            timeout_graceful_shutdown=1,
            lifespan="off",
        )
    )
    loop = asyncio.get_running_loop()
    exit_code = 0

    def stop() -> None:
        server.should_exit = True

    if Fault.ignore_sigterm not in args.faults:
        loop.add_signal_handler(signal.SIGTERM, stop)
    loop.add_signal_handler(signal.SIGINT, stop)

    sched = asyncio.create_task(engine.run(), name="scheduler")
    serving = asyncio.create_task(server.serve(), name="uvicorn")
    while not server.started:
        if serving.done():  # bind failed: uvicorn already logged why
            sched.cancel()
            return 1
        await asyncio.sleep(0.01)
    await asyncio.sleep(plan.args.warmup_s)
    warm = SimRequest(
        rid="warmup",
        input_ids=[3, 4, 5, 6, 7, 8, 9, 10],
        sampling=SamplingParams(max_new_tokens=1, temperature=0.0),
        internal=True,
    )
    engine.submit(warm)
    await wait_done(warm)
    log.info(
        "End of prefill warmup with status 200, resp: [{'text': '', 'output_ids': %s, 'meta_info': ...}]",
        warm.output_ids,
    )
    engine.update_gauges()
    state.ready = True
    log.info("The server is fired up and ready to roll!")

    die_after_idle_s = args.faults.get(Fault.die_after_idle)
    while not serving.done():
        await asyncio.sleep(0.05)
        if sched.done():  # the scheduler died: a real server's would take the process down
            exc = sched.exception()
            log.error("Scheduler loop ended: %r", exc)
            exit_code = 1
            break
        if (
            die_after_idle_s is not None
            and engine.last_response_at is not None
            and not engine.busy
            and time.monotonic() - engine.last_response_at > die_after_idle_s
        ):
            tplog.error(
                "Scheduler died %.1f s after its last response (simulated fault die_after_idle).", die_after_idle_s
            )
            sys.stdout.flush()
            os._exit(1)
    server.should_exit = True
    with contextlib.suppress(Exception):
        await asyncio.wait_for(serving, timeout=3)
    sched.cancel()
    log.info("Simulated server shut down.")
    return exit_code

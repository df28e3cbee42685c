"""The scenario's ``server`` block and what a variant sets of it: the server (backend, model,
args, env, startup, the simulator's options and simulated host, the watchdog), a build (its
python, sglang source, env and args), and HiCache with its storage tier (pydantic,
``extra="forbid"``). The rest of the scenario and the resolved ``Variant``: `harness.scenario.models`.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal, Union

from pydantic import (
    AfterValidator,
    BeforeValidator,
    field_validator,
    model_validator,
)

from harness.core.sglang_defaults import SGLANG_DEFAULT_HICACHE_RATIO
from harness.spec.numbers import DAY_S, MAX_GIB, count, gib, ranged, seconds, tokens
from harness.spec.values import (
    ArgsDict,
    EnvDict,
    Fault,
    ScenarioModel,
    field_error,
    flag_problem,
    fmt_num,
    host_problem,
    parse_extra_args,
)

MEM_LAYOUTS = ("layer_first", "page_first", "page_first_direct", "page_first_kv_split", "page_head")
WRITE_POLICIES = ("write_through", "write_back", "write_through_selective")
IO_BACKENDS = ("kernel", "direct")


class SimHost(ScenarioModel):
    """``server.sim.host``: a simulated host under the simulated server (harness/sim/host.py): its
    memory, page cache, swap and container limit, in the /proc files the sampler reads."""

    mem_total_gib: gib(0.01)
    page_cache_gib: gib() = 0.0  # the file cache the host's other work keeps warm
    swap_gib: gib() = 0.0
    load_dip_gib: gib() = 0.0  # MemAvailable's drop while weights load (sglang's rule reads it then)
    cgroup_limit_gib: gib(0.01) | None = None  # the container's memory limit (sglang does not read it)
    # the simulated build's host-memory reserve: sglang's 10 GiB; seed 000's fork lowered it to start ratio 2
    reserve_gib: gib() = 10.0


class SimOptions(ScenarioModel):
    """``server.sim``: knobs of the simulated server (backend sim only)."""

    time_scale: ranged(float, 1e-4, 1e4, "x the cost model's time") = 1.0
    host_mem_scale: ranged(float, 1e-6, 1, "fraction of the host pool") = 0.0625
    mem_available_gib: gib(0.01) | None = None
    startup_s: seconds(0, DAY_S) = 1.0
    # the rest of a start, as sglang's log splits it (harness.server.startup_phases); not in the config hash
    capture_s: seconds(0, DAY_S) = 0.0  # CUDA-graph capture
    register_s_per_gb: ranged(float, 0, 3600, "s per GB") = 0.0  # pinning the host pools (cudaHostRegister), per GB
    warmup_s: seconds(0, DAY_S) = 0.0  # before the warm-up request
    faults: list[Fault] = []
    # the storage tier (L3) of the cost model; None: the simulator's defaults (docs/simulator.md)
    storage_gb: ranged(float, 0.001, 1e9, "GB") | None = None
    storage_read_gbs: ranged(float, 0.001, 1e5, "GB/s") | None = None
    storage_write_gbs: ranged(float, 0.001, 1e5, "GB/s") | None = None
    # the pretend host's pinned host -> device link (a host hit's load-back); None: 55 GB/s, an H200's
    h2d_gbs: ranged(float, 0.001, 1e5, "GB/s") | None = None
    # hybrid models with hicache size_gb: each host pool gets the whole size, or the size is split by
    # device pool bytes as sglang 0.5.17 does (--sim-host-split)
    host_split: Literal["each", "proportional"] = "each"
    host: SimHost | None = None  # None: the real host's /proc (and sim.mem_available_gib for the rule)
    # the file backend's storage tier kept in its directory, as sglang's HiCacheFile (a restart keeps it)
    storage_persist: bool = False

    @model_validator(mode="after")
    def _host_needs_mem_available(self) -> "SimOptions":
        h = self.host
        if h is None:
            return self
        if self.mem_available_gib is None:
            raise field_error("sim.host needs sim.mem_available_gib (the simulated host's MemAvailable before launch)")
        if self.mem_available_gib > h.mem_total_gib:
            raise field_error(
                f"sim.mem_available_gib {self.mem_available_gib:g} > host.mem_total_gib {h.mem_total_gib:g}"
            )
        if h.page_cache_gib > self.mem_available_gib:
            raise field_error(
                f"host.page_cache_gib {h.page_cache_gib:g} > sim.mem_available_gib {self.mem_available_gib:g}"
            )
        return self


class Watchdog(ScenarioModel):
    """``server.watchdog``: when a server that is alive but no longer serving (stopped, a
    deadlocked scheduler) is given up as ``server_hung`` (harness/run/serving_window.py)."""

    # No request has finished for this long: ask /health_generate (never sooner, so a server
    # that answers is not disturbed).
    probe_after_s: seconds(0.01, DAY_S) = 60.0
    probe_timeout_s: seconds(0.01, 3600) = 30.0  # a probe without a 200 by then has failed
    failed_probes: count("probes", 1000) = 2  # consecutive failed probes, no request finishing meanwhile
    consecutive_timeouts: count("requests") = 3  # requests in a row that ran into request_timeout_s
    variant_budget_s: seconds(0.01, 30 * DAY_S) | None = None  # wall clock from ready to the end of the quality arm


def _extra_args_ok(v: str) -> str:
    for flag in parse_extra_args(v):
        problem = flag_problem(flag)
        if problem:
            raise field_error(problem)
    return v


def _none_if_empty(v: Any) -> Any:
    return None if v == "" else v


ExtraArgs = Annotated[str, AfterValidator(_extra_args_ok)]  # each flag checked (`flag_problem`)
# a checkout of sglang; ``${SOME_SOURCE:-}`` (empty) means none
SglangSource = Annotated[str | None, BeforeValidator(_none_if_empty)]


class Server(ScenarioModel):
    """``server``: how to start the server every variant shares (``backend: external``: none is
    started; each variant names a running server's ``url``, harness/run/external.py)."""

    backend: Literal["sglang", "sim", "external"] = "sglang"
    python: str = "python3"
    command_prefix: list[str] = []
    sglang_source: SglangSource = None
    # Required to launch a server; with backend: external optional, a local copy of the served
    # model's folder (its config.json sizes token-id prompts).
    model_path: str | None = None
    tp_size: ranged(int, 1, 1024, "GPUs") = 1
    host: str = "127.0.0.1"
    args: ArgsDict = {}
    # One string of extra sglang flags, split like a shell would (e.g. ``${SGLANG_EXTRA_ARGS:-}``),
    # so one scenario file serves GPU boxes whose sglang build needs different backend flags.
    # Merged after ``args``; a variant's args still win.
    extra_args: ExtraArgs = ""
    env: EnvDict = {}
    startup_timeout_s: seconds(0.01, DAY_S) = 600.0
    startup_retries: count("extra attempts", 100, lo=0) = 1
    request_timeout_s: seconds(0.01, DAY_S) = 300.0
    # After the last response the server must stay alive this long, idle, and then answer
    # /health_generate (P6: a crash a few seconds after the last answer fails the variant).
    liveness_idle_s: seconds(0, 3600) = 3.0
    watchdog: Watchdog = Watchdog()
    sim: SimOptions | None = None
    # backend: external: the NAME of an environment variable holding the servers' API key (their
    # --api-key), sent as ``Authorization: Bearer``; never the key itself (harness/run/external.py).
    api_key_env: str | None = None

    @field_validator("host")
    @classmethod
    def _host_name(cls, v: str) -> str:
        problem = host_problem(v)
        if problem:
            raise field_error(problem)
        return v

    @field_validator("model_path", "python")
    @classmethod
    def _not_empty(cls, v: str | None) -> str | None:
        if v is not None and not v.strip():
            raise field_error("must not be empty")
        return v


STORAGE_PREFETCH_POLICIES = ("best_effort", "wait_complete", "timeout")  # sglang's choices
FILE_BACKEND_DIR_ENV = "SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR"  # where sglang's HiCacheFile writes
FILE_BACKEND_DEFAULT_DIR = "/tmp/hicache"  # HiCacheFile's default file_path
ExtraConfigValue = Union[bool, int, float, str]


class HiCacheStorage(ScenarioModel):
    """``hicache.storage``: options of the storage tier (L3) that ``hicache.storage_backend``
    names. None fields are not passed (sglang's defaults apply: ``best_effort``, prefetch
    threshold 256 tokens, directory ``/tmp/hicache``). sglang has no storage write policy of its
    own: a page goes to storage when its host backup lands, so ``hicache.write_policy`` sets both."""

    dir: str | None = None  # file backend: env SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR
    prefetch_policy: Literal[STORAGE_PREFETCH_POLICIES] | None = None  # type: ignore[valid-type]
    # keys of --hicache-storage-backend-extra-config that sglang's HiRadixCache reads
    prefetch_threshold: tokens() | None = None  # tokens: fewer storage hits are not prefetched
    prefetch_timeout_base: seconds(0.0001, 3600) | None = None  # seconds (policy timeout)
    prefetch_timeout_per_ki_token: ranged(float, 1e-6, 3600, "s per 1024 tokens") | None = (
        None  # seconds per 1024 tokens (policy timeout)
    )
    extra_config: dict[str, ExtraConfigValue] = {}  # any other key, passed as is

    def extra_config_json(self) -> str | None:
        """The ``--hicache-storage-backend-extra-config`` JSON (keys sorted), or None when empty."""
        cfg: dict[str, Any] = dict(self.extra_config)
        for key in ("prefetch_threshold", "prefetch_timeout_base", "prefetch_timeout_per_ki_token"):
            if getattr(self, key) is not None:
                cfg[key] = getattr(self, key)
        return json.dumps(cfg, sort_keys=True, separators=(",", ":")) if cfg else None


class Build(ScenarioModel):
    """One entry of ``builds``: a named sglang install a variant can pick (``build: NAME``).
    Its env and args go between the server's and the variant's; python defaults to
    ``server.python``. Verified before any server starts (harness/run/builds.py)."""

    description: str = ""
    python: str | None = None
    sglang_source: SglangSource = None
    env: EnvDict = {}
    args: ArgsDict = {}
    extra_args: ExtraArgs = ""

    @field_validator("python")
    @classmethod
    def _python_not_empty(cls, v: str | None) -> str | None:
        if v is not None and not v.strip():
            raise field_error("must not be empty (omit it to use server.python)")
        return v


class HiCache(ScenarioModel):
    """A variant's HiCache block (its presence turns HiCache on). None fields are not passed:
    sglang's own default applies (ratio 2.0, write_through, kernel; layout depends on version)."""

    ratio: ranged(float, 0.01, 1000, "x the device KV pool") | None = None
    size_gb: ranged(float, 0.001, MAX_GIB, "GB per rank") | None = None
    mem_layout: Literal[MEM_LAYOUTS] | None = None  # type: ignore[valid-type]
    write_policy: Literal[WRITE_POLICIES] | None = None  # type: ignore[valid-type]
    io_backend: Literal[IO_BACKENDS] | None = None  # type: ignore[valid-type]
    storage_backend: str | None = None
    storage: HiCacheStorage | None = None  # the storage tier's options (needs storage_backend)

    @model_validator(mode="after")
    def _storage_needs_backend(self) -> "HiCache":
        if self.storage is not None and self.storage_backend is None:
            raise ValueError("hicache.storage needs hicache.storage_backend (e.g. file)")
        if self.storage is not None and self.storage.dir is not None and self.storage_backend != "file":
            raise ValueError(
                f"hicache.storage.dir is the file backend's directory; storage_backend is {self.storage_backend}"
            )
        return self

    def env(self) -> dict[str, str]:
        """Environment the block sets: the file backend's directory."""
        if self.storage is not None and self.storage.dir is not None:
            return {FILE_BACKEND_DIR_ENV: self.storage.dir}
        return {}

    @property
    def effective_ratio(self) -> float:
        return self.ratio if self.ratio is not None else SGLANG_DEFAULT_HICACHE_RATIO

    def flags(self) -> list[str]:
        """sglang flags for this block (``--enable-hierarchical-cache`` first)."""
        out = ["--enable-hierarchical-cache"]
        if self.size_gb is not None:
            out += ["--hicache-size", fmt_num(self.size_gb)]
        if self.ratio is not None:
            out += ["--hicache-ratio", fmt_num(self.ratio)]
        for attr, flag in (
            ("mem_layout", "--hicache-mem-layout"),
            ("write_policy", "--hicache-write-policy"),
            ("io_backend", "--hicache-io-backend"),
            ("storage_backend", "--hicache-storage-backend"),
        ):
            if getattr(self, attr) is not None:
                out += [flag, str(getattr(self, attr))]
        if self.storage is not None:
            if self.storage.prefetch_policy is not None:
                out += ["--hicache-storage-prefetch-policy", self.storage.prefetch_policy]
            extra = self.storage.extra_config_json()
            if extra is not None:
                out += ["--hicache-storage-backend-extra-config", extra]
        return out


def hicache_shorthand(v: Any) -> Any:
    if v is True:
        return {}
    if v is False:
        return None
    return v

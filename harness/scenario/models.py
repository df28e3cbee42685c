"""The scenario's typed blocks (pydantic, ``extra="forbid"``) and the resolved ``Variant``.

Workload blocks are not declared here: each workload kind declares its own config model in
``harness/workloads/kinds/<kind>.py``; ``Workload`` is the tagged union of those.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Literal, Union

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainValidator,
    PrivateAttr,
    WithJsonSchema,
    field_validator,
    model_validator,
)

from harness.core.sglang_defaults import SGLANG_DEFAULT_HICACHE_RATIO
from harness.server import logscan
from harness.spec.values import (
    MAX_REPEATS,
    ArgsDict,
    CheckT,
    Count,
    EnvDict,
    Fault,
    GateT,
    GpuMode,
    Name,
    NonNegFloat,
    NonNegInt,
    PosFloat,
    PosInt,
    ScenarioModel,
    ScenarioName,
    ThresholdT,
    TokenSize,
    TokenSizeOrZeroT,
    TokenSizeT,
    field_error,
    flag_problem,
    fmt_num,
    host_problem,
    no_bool,
    parse_extra_args,
    ranged,
    show_value,
    url_problem,
)
from harness.workloads import kinds

MEM_LAYOUTS = ("layer_first", "page_first", "page_first_direct", "page_first_kv_split", "page_head")
WRITE_POLICIES = ("write_through", "write_back", "write_through_selective")
IO_BACKENDS = ("kernel", "direct")
CAUSES = logscan.STARTUP_CAUSES  # what expect_cause may name: harness/server/logscan.py declares them
QUALITY_TASKS = ("needle", "multi_needle", "variable_tracking", "aggregation", "ordered_codes")
# The build a variant runs when it names none: the ``server`` block's own python, sglang_source,
# env and args (harness/run/builds.py).
DEFAULT_BUILD = "default"

# The tagged union of every workload kind's config model (harness/workloads/kinds/<kind>.py).
Workload = Annotated[
    Union[tuple(k.config for k in kinds().values())],  # type: ignore[valid-type]
    Field(discriminator="kind"),
]


class SimHost(ScenarioModel):
    """``server.sim.host``: a simulated host under the simulated server (harness/sim/host.py): its
    memory, page cache, swap and container limit, in the /proc files the sampler reads."""

    mem_total_gib: PosFloat
    page_cache_gib: NonNegFloat = 0.0  # the file cache the host's other work keeps warm
    swap_gib: NonNegFloat = 0.0
    load_dip_gib: NonNegFloat = 0.0  # MemAvailable's drop while weights load (sglang's rule reads it then)
    cgroup_limit_gib: PosFloat | None = None  # the container's memory limit (sglang does not read it)
    # the simulated build's host-memory reserve: sglang's 10 GiB; seed 000's fork lowered it to start ratio 2
    reserve_gib: NonNegFloat = 10.0


class SimOptions(ScenarioModel):
    """``server.sim``: knobs of the simulated server (backend sim only)."""

    time_scale: ranged(float, 1e-4, 1e4, "x the cost model's time") = 1.0
    host_mem_scale: Annotated[float, BeforeValidator(no_bool), Field(gt=0, le=1)] = 0.0625
    mem_available_gib: PosFloat | None = None
    startup_s: NonNegFloat = 1.0
    # the rest of a start, as sglang's log splits it (harness.server.startup_phases); not in the config hash
    capture_s: NonNegFloat = 0.0  # CUDA-graph capture
    register_s_per_gb: NonNegFloat = 0.0  # pinning the host pools (cudaHostRegister), per GB
    warmup_s: NonNegFloat = 0.0  # before the warm-up request
    faults: list[Fault] = []
    # the storage tier (L3) of the cost model; None: the simulator's defaults (docs/simulator.md)
    storage_gb: PosFloat | None = None
    storage_read_gbs: PosFloat | None = None
    storage_write_gbs: PosFloat | None = None
    # hybrid models with hicache size_gb: each host pool gets the whole size, or the size is split by
    # device pool bytes as sglang 0.5.17 does (--sim-host-split)
    host_split: Literal["each", "proportional"] = "each"
    host: SimHost | None = None  # None: the real host's /proc (and sim.mem_available_gib for the rule)

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
    probe_after_s: PosFloat = 60.0
    probe_timeout_s: PosFloat = 30.0  # a probe without a 200 by then has failed
    failed_probes: PosInt = 2  # consecutive failed probes, no request finishing meanwhile
    consecutive_timeouts: PosInt = 3  # requests in a row that ran into request_timeout_s
    variant_budget_s: PosFloat | None = None  # wall clock from ready to the end of the quality arm


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
    startup_timeout_s: PosFloat = 600.0
    startup_retries: NonNegInt = 1
    request_timeout_s: PosFloat = 300.0
    # After the last response the server must stay alive this long, idle, and then answer
    # /health_generate (P6: a crash a few seconds after the last answer fails the variant).
    liveness_idle_s: NonNegFloat = 3.0
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
    prefetch_threshold: PosInt | None = None  # tokens: fewer storage hits are not prefetched
    prefetch_timeout_base: PosFloat | None = None  # seconds (policy timeout)
    prefetch_timeout_per_ki_token: PosFloat | None = None  # seconds per 1024 tokens (policy timeout)
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
    size_gb: PosFloat | None = None
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


def _hicache_shorthand(v: Any) -> Any:
    if v is True:
        return {}
    if v is False:
        return None
    return v


class VariantFields(ScenarioModel):
    description: str = ""
    model_path: str | None = None
    hicache: HiCache | None = None
    args: ArgsDict = {}
    env: EnvDict = {}
    expect: Literal["ok", "startup_failed"] = "ok"
    expect_cause: Literal[CAUSES] | None = None  # type: ignore[valid-type]
    sim_faults: list[Fault] = []
    url: str | None = None  # backend: external: the running server this variant measures
    build: Name | None = None  # an entry of ``builds`` (None: the server block's own build)

    @field_validator("url")
    @classmethod
    def _url(cls, v: str | None) -> str | None:
        problem = url_problem(v) if v is not None else None
        if problem:
            raise field_error(problem)
        return v.rstrip("/") if v is not None else None

    @field_validator("model_path")
    @classmethod
    def _mp_not_empty(cls, v: str | None) -> str | None:
        if v is not None and not v.strip():
            raise field_error("must not be empty (omit it to use server.model_path)")
        return v

    @field_validator("hicache", mode="before")
    @classmethod
    def _hicache_bool(cls, v: Any) -> Any:
        """``hicache: true`` = on with sglang defaults; ``hicache: false`` = off."""
        return _hicache_shorthand(v)


class VariantSpec(VariantFields):
    """One entry of ``variants`` as written."""

    name: Name


def _axis_value(v: Any) -> Any:
    if v is None or isinstance(v, (str, int, float, bool)):
        return v
    raise field_error(f"axis values must be scalars (string, number, true/false, null), got {show_value(v)}")


AxisValue = Annotated[
    Any, PlainValidator(_axis_value), WithJsonSchema({"type": ["string", "number", "boolean", "null"]})
]


class MatrixEntry(VariantFields):
    """One entry of ``matrix``: base variant fields plus ``axes`` (dotted path -> values)."""

    prefix: Name
    axes: dict[str, Annotated[list[AxisValue], Field(min_length=1)]]
    labels: dict[str, str] = {}


class Sampling(ScenarioModel):
    enabled: bool = True
    interval_s: ranged(float, 0.01, 3600, "s") = 0.5
    idle_window_s: NonNegFloat = 5.0
    gpu: GpuMode = "auto"
    server_metrics: bool = True
    cooldown_timeout_s: NonNegFloat = 120.0
    cooldown_mem_tolerance_gib: NonNegFloat = 1.0


class Preflight(ScenarioModel):
    mode: Literal["warn", "strict", "off"] = "warn"
    reserve_gib: NonNegFloat = 10.0
    ranks_on_host: PosInt | None = None
    # how --hicache-size is shared by a hybrid model's KV and mamba host pools: "auto" = as the
    # server does it (sglang >= 0.5.17: proportional to the device pools' bytes; the simulator: its
    # server.sim.host_split); "each" = every pool the whole size (older builds)
    host_size_split: Literal["auto", "each", "proportional"] = "auto"
    # one GPU's memory for the before-launch GPU pool prediction when the args do not fix the pool
    # (no --max-total-tokens): None = read it with NVML (the GPUs the variant's server will use)
    gpu_mem_gib: PosFloat | None = None
    # the safe-ratio boundary (harness/run/ratio_boundary.py): MemAvailable's drop while weights load
    # (None: 0 on a real host, server.sim.host's for the simulator), the page cache the host must
    # keep (None: what it holds before launch), and the grid of the boundary and of --find-ratio
    load_dip_gib: NonNegFloat | None = None
    page_cache_floor_gib: NonNegFloat | None = None
    boundary_step: ranged(float, 0.01, 64, "ratio or GB") = 0.25


class Quality(ScenarioModel):
    enabled: bool = False
    baseline_variant: str | None = None  # None: the first variant without HiCache (filled at load)
    control: bool = True
    tasks: Annotated[list[Literal[QUALITY_TASKS]], Field(min_length=1)] = list(QUALITY_TASKS)  # type: ignore[valid-type]
    lengths: Annotated[list[TokenSizeT], Field(min_length=1)] = [TokenSize(tokens=8000)]
    samples_per_task: Count = 2
    max_new_tokens: PosInt = 32
    churn_tokens: TokenSizeOrZeroT = TokenSize(pool_fraction=1.5)  # 0: no churn (parity NOT_EXERCISED)
    reasks: Count = 2
    top_logprobs: PosInt = 5
    tie_epsilon: NonNegFloat = 0.05
    mode: Literal["auto", "text", "token_ids"] = "auto"
    # the ON arm's churn also fills the host pool, so re-asks come back from the storage tier (L3)
    churn_past_host: bool = False


def _fraction(v: Any) -> Any:
    """``"1%"`` → 0.01; numbers pass through (validated as 0..1 by the field)."""
    if isinstance(v, str) and v.strip().endswith("%"):
        try:
            return float(v.strip()[:-1]) / 100.0
        except ValueError:
            raise field_error(f'expected a percentage like "1%" or a fraction like 0.01, got {v!r}') from None
    return no_bool(v)


AUTO_REPEATS = 3  # ``repeats: auto`` before a plan resolves it: a first night that measures a spread


def _repeats(v: Any) -> Any:
    """``repeats``: a count >= 1, or ``auto`` (0 here; the loader makes it `AUTO_REPEATS` and
    sets `Scenario.repeats_auto`)."""
    if v == "auto":
        return 0
    v = no_bool(v)
    if v == 0:
        raise field_error("must be >= 1 (or auto)")
    return v


class VerdictRules(ScenarioModel):
    """``verdict``: what a variant's verdict tolerates (harness/analysis/verdict.py), and what
    the comparison's experiment may spend (harness/compare/planning.py)."""

    # GPU-minutes a night may spend on repeats: ``repeats: auto`` stops there
    budget_minutes: PosFloat | None = None
    # extra rounds (more repeats of the workloads an inconclusive gating row needs) a comparison may
    # pool with the night: alpha is spent equally over the 1 + rounds looks (harness compare --round)
    rounds: Annotated[int, BeforeValidator(no_bool), Field(ge=0, le=20)] = 0

    # requests (not warm-ups) that may fail before the variant is FAIL ("1%" or 0.01)
    max_error_rate: Annotated[float, BeforeValidator(_fraction), Field(ge=0, le=1)] = 0.01
    # parity NOT_EXERCISED is INCONCLUSIVE unless allowed here: true (every variant) or names
    allow_not_exercised: bool | list[Name] = False


class Estimate(ScenarioModel):
    """``estimate``: what `harness run --dry-run` needs to estimate the run (harness/run/estimate.py)."""

    prefill_tok_s: PosFloat  # uncached prompt tokens per second on this setup (a measured figure)
    decode_tok_s: PosFloat | None = None  # one request's output tokens per second
    startup_s: NonNegFloat = 0.0  # one server start attempt
    gpu_pool_tokens: PosInt | None = None  # the GPU pool when the args do not pin it
    gpu_mem_gib: PosFloat | None = None  # one GPU's memory, to predict the pool
    mem_available_gib: PosFloat | None = None  # MemAvailable while weights load
    limit_minutes: PosFloat | None = None  # flag a longer run


class Expectations(ScenarioModel):
    checks: list[CheckT] = []
    thresholds: dict[str, ThresholdT] = {}


class Variant(BaseModel):
    """A fully resolved variant: what one server start needs. Paths are absolute where the rule
    in ``_resolve_path`` made them so; ``args``/``env`` are server's merged with the variant's
    (variant wins, order of first appearance kept; false/null flags and null env values dropped).
    ``sim_faults`` holds the variant's own faults; ``sim`` is ``server.sim`` (its faults apart)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    origin: str  # "variants[2]" or "matrix[0]"
    description: str = ""
    backend: Literal["sglang", "sim", "external"]
    python: str
    command_prefix: list[str]
    sglang_source: str | None
    model_path: str
    model_path_spec: str  # as written (after ${VAR} expansion), used by the config hash
    tp_size: int
    host: str
    hicache: HiCache | None
    args: dict[str, Any]
    env: dict[str, str]
    expect: Literal["ok", "startup_failed"]
    expect_cause: str | None
    sim_faults: list[str]
    sim: SimOptions | None
    startup_timeout_s: float
    startup_retries: int
    request_timeout_s: float
    matrix_values: dict[str, Any] = {}
    url: str | None = None  # backend external: the server's base URL (no lifecycle)
    build: str = DEFAULT_BUILD  # the ``builds`` entry it runs (python, sglang_source, env, args)

    @property
    def hicache_enabled(self) -> bool:
        return self.hicache is not None

    @property
    def cache_tiers(self) -> frozenset[str]:
        """The cache tiers its server has: the device always, the host with HiCache, the storage
        tier with a storage backend (which phases expect hits: `harness.analysis.summary.unexercised_phases`)."""
        tiers = {"device"}
        if self.hicache is not None:
            tiers.add("host")
            if self.hicache.storage_backend:
                tiers.add("storage")
        return frozenset(tiers)

    def storage_dir(self) -> str | None:
        """The directory of the ``file`` storage backend this variant's server writes (its env,
        else the hicache block's ``storage.dir``, else sglang's default); None without one."""
        if self.hicache is None or self.hicache.storage_backend != "file":
            return None
        return (
            self.env.get(FILE_BACKEND_DIR_ENV)
            or self.hicache.env().get(FILE_BACKEND_DIR_ENV)
            or FILE_BACKEND_DEFAULT_DIR
        )

    def all_sim_faults(self) -> list[str]:
        return (list(self.sim.faults) if self.sim else []) + list(self.sim_faults)

    def flag_argv(self) -> list[str]:
        """HiCache flags then the merged args as argv (no --model-path/--host/--port/--tp-size)."""
        out = self.hicache.flags() if self.hicache else []
        for flag, value in self.args.items():
            if value is True:
                out.append(flag)
            elif isinstance(value, list):
                out += [flag, *(fmt_num(x) for x in value)]
            else:
                out += [flag, fmt_num(value)]
        return out


class Scenario(ScenarioModel):
    """A whole scenario file. ``path``/``text`` are the file and its raw text."""

    name: ScenarioName
    description: str = ""
    seed: ranged(int, 0, 2**63 - 1, "") = 0
    # ``auto``: the count harness.compare.planning plans from the earlier runs' spread (bounded by
    # verdict.budget_minutes), resolved by the command that reads the scenario (run, validate);
    # until then (and for every other reader) AUTO_REPEATS.
    repeats: Annotated[int, BeforeValidator(_repeats), Field(ge=0, le=MAX_REPEATS)] = 1
    server: Server
    # Named sglang installs; a variant (or a matrix axis ``build``) picks one. None: every variant
    # runs the server block's python/sglang_source (the build named ``default``).
    builds: dict[Name, Build] = {}
    variants: list[VariantSpec] = []
    matrix: list[MatrixEntry] = []
    workloads: list[Workload] = []  # type: ignore[valid-type]
    sampling: Sampling = Field(default_factory=Sampling)
    preflight: Preflight = Field(default_factory=Preflight)
    quality: Quality = Field(default_factory=Quality)
    expectations: Expectations = Field(default_factory=Expectations)
    verdict: VerdictRules = Field(default_factory=VerdictRules)
    estimate: Estimate | None = None
    # The metrics that gate a comparison with a baseline ([variant:] workload[.phase].metric or
    # quality.parity); none: every compared metric gates (harness/compare).
    gate: list[GateT] = []

    # Set by harness.scenario.loading when the file is loaded (a Scenario is only made there).
    _path: Path | None = PrivateAttr(default=None)
    _text: str = PrivateAttr(default="")
    _hash: str = PrivateAttr(default="")
    _base_dir: Path | None = PrivateAttr(default=None)
    _variants: list[Variant] = PrivateAttr(default_factory=list)
    # Set by harness.scenario.overrides / urls: the command line's --set overrides (as given), and
    # the checks a --url run left out because they name variants it does not have.
    _overrides: list[str] = PrivateAttr(default_factory=list)
    _unrun_checks: list[dict[str, str]] = PrivateAttr(default_factory=list)
    _repeats_auto: bool = PrivateAttr(default=False)

    @property
    def path(self) -> Path | None:
        return self._path

    @property
    def overrides(self) -> list[str]:
        """The ``--set KEY=VALUE`` overrides the scenario was loaded with (``harness.scenario.overrides``)."""
        return list(self._overrides)

    @property
    def unrun_checks(self) -> list[dict[str, str]]:
        """Checks of the scenario file this run does not evaluate, ``{"check", "reason"}`` each:
        a ``--url`` run's that name variants it does not have (`harness.scenario.urls`), the
        quality checks of a ``--no-quality`` run (`harness.scenario.overrides`)."""
        return list(self._unrun_checks)

    @property
    def text(self) -> str:
        return self._text

    @property
    def base_dir(self) -> Path | None:
        """Directory relative paths resolve against (the scenario file's directory)."""
        return self._base_dir

    @property
    def hash(self) -> str:
        """sha256 of the scenario file's text (``hashing.scenario_hash``)."""
        return self._hash

    @property
    def repeats_auto(self) -> bool:
        """The file says ``repeats: auto`` (`harness.compare.planning.resolve_repeats` sets the count)."""
        return self._repeats_auto

    def expand_variants(self) -> list[Variant]:
        """Explicit variants then matrix expansions, in order (resolved when the file was loaded)."""
        return list(self._variants)

    def variant(self, name: str) -> Variant:
        for v in self.expand_variants():
            if v.name == name:
                return v
        raise KeyError(name)

    def workload(self, name: str):
        for w in self.workloads:
            if w.name == name:
                return w
        raise KeyError(name)

"""The scenario's typed blocks (pydantic, ``extra="forbid"``) and the resolved ``Variant``.

Workload blocks are not declared here: each workload kind declares its own config model in
``harness/workloads/kinds/<kind>.py``; ``Workload`` is the tagged union of those.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal, Union

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PlainValidator,
    PrivateAttr,
    WithJsonSchema,
    field_validator,
)

from harness.quality.config import Quality
from harness.scenario.server_models import (
    FILE_BACKEND_DEFAULT_DIR,
    FILE_BACKEND_DIR_ENV,
    Build,
    HiCache,
    Server,
    SimOptions,
    hicache_shorthand,
)
from harness.server import logscan
from harness.spec.numbers import DAY_S, MAX_REPEATS, count, gib, ranged, seconds, show_value, tokens
from harness.spec.values import (
    ArgsDict,
    CheckT,
    EnvDict,
    Fault,
    GateT,
    GpuMode,
    Name,
    ScenarioModel,
    ScenarioName,
    ThresholdT,
    field_error,
    fmt_num,
    url_problem,
)
from harness.workloads import kinds

CAUSES = logscan.STARTUP_CAUSES  # what expect_cause may name: harness/server/logscan.py declares them
# The build a variant runs when it names none: the ``server`` block's own python, sglang_source,
# env and args (harness/run/builds.py).
DEFAULT_BUILD = "default"

# The tagged union of every workload kind's config model (harness/workloads/kinds/<kind>.py).
Workload = Annotated[
    Union[tuple(k.config for k in kinds().values())],  # type: ignore[valid-type]
    Field(discriminator="kind"),
]


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
        return hicache_shorthand(v)


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
    idle_window_s: seconds(0, 3600) = 5.0
    gpu: GpuMode = "auto"
    server_metrics: bool = True
    cooldown_timeout_s: seconds(0, DAY_S) = 120.0
    cooldown_mem_tolerance_gib: gib(0, 1024) = 1.0


class Preflight(ScenarioModel):
    mode: Literal["warn", "strict", "off"] = "warn"
    reserve_gib: gib() = 10.0
    ranks_on_host: count("ranks", 1024) | None = None
    # how --hicache-size is shared by a hybrid model's KV and mamba host pools: "auto" = as the
    # server does it (sglang >= 0.5.17: proportional to the device pools' bytes; the simulator: its
    # server.sim.host_split); "each" = every pool the whole size (older builds)
    host_size_split: Literal["auto", "each", "proportional"] = "auto"
    # one GPU's memory for the before-launch GPU pool prediction when the args do not fix the pool
    # (no --max-total-tokens): None = read it with NVML (the GPUs the variant's server will use)
    gpu_mem_gib: gib(0.01, 4096) | None = None
    # the safe-ratio boundary (harness/run/ratio_boundary.py): MemAvailable's drop while weights load
    # (None: 0 on a real host, server.sim.host's for the simulator), the page cache the host must
    # keep (None: what it holds before launch), and the grid of the boundary and of --find-ratio
    load_dip_gib: gib() | None = None
    page_cache_floor_gib: gib() | None = None
    boundary_step: ranged(float, 0.01, 64, "ratio or GB") = 0.25


AUTO_REPEATS = 3  # ``repeats: auto`` before a plan resolves it: a first night that measures a spread


class VerdictRules(ScenarioModel):
    """``verdict``: what a variant's verdict tolerates (harness/analysis/verdict.py), and what
    the comparison's experiment may spend (harness/compare/planning.py)."""

    # GPU-minutes a night may spend on repeats: ``repeats: auto`` stops there
    budget_minutes: ranged(float, 0, 525_600, "GPU-minutes") | None = None
    # extra rounds (more repeats of the workloads an inconclusive gating row needs) a comparison may
    # pool with the night: alpha is spent equally over the 1 + rounds looks (harness compare --round)
    rounds: count("rounds", 20, lo=0) = 0

    # requests (not warm-ups) that may fail before the variant is FAIL ("1%" or 0.01)
    max_error_rate: ranged(float, 0, 1, "fraction of the requests", percent=True) = 0.01
    # parity NOT_EXERCISED is INCONCLUSIVE unless allowed here: true (every variant) or names
    allow_not_exercised: bool | list[Name] = False


class CostPrices(ScenarioModel):
    """What an hour of a variant costs (`harness.analysis.cost`): $/Mtok at its SLO goodput and the
    cheapest variant that meets the SLO, in the report's headline and the console's table."""

    gpu_hour_usd: ranged(float, 0.0, 10000.0, "$ per GPU-hour")  # type: ignore[valid-type]
    host_ram_gb_hour_usd: ranged(float, 0.0, 100.0, "$ per GB-hour of the host pool") = 0.0  # type: ignore[valid-type]
    storage_tb_month_usd: ranged(float, 0.0, 1e6, "$ per TB-month of storage") = 0.0  # type: ignore[valid-type]


class Estimate(ScenarioModel):
    """``estimate``: what `harness run --dry-run` needs to estimate the run (harness/run/estimate.py)."""

    prefill_tok_s: ranged(
        float, 0.001, 1e9, "tokens/s"
    )  # uncached prompt tokens per second on this setup (a measured figure)
    decode_tok_s: ranged(float, 0.001, 1e9, "tokens/s") | None = None  # one request's output tokens per second
    startup_s: seconds(0, DAY_S) = 0.0  # one server start attempt
    gpu_pool_tokens: tokens() | None = None  # the GPU pool when the args do not pin it
    gpu_mem_gib: gib(0.01, 4096) | None = None  # one GPU's memory, to predict the pool
    mem_available_gib: gib(0.01) | None = None  # MemAvailable while weights load
    limit_minutes: ranged(float, 0.01, 525_600, "minutes") | None = None  # flag a longer run


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
    seed: ranged(int, 0, 2**63 - 1, "(a seed: no unit)") = 0
    # ``auto``: the count harness.compare.planning plans from the earlier runs' spread (bounded by
    # verdict.budget_minutes), resolved by the command that reads the scenario (run, validate);
    # until then (and for every other reader) AUTO_REPEATS.
    repeats: ranged(int, 1, MAX_REPEATS, "repeats", words={"auto": 0}) = 1
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
    cost: CostPrices | None = None
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

"""Scenario YAML -> typed ``Scenario``; variants resolved; config hashes; the JSON Schema.

One job: turn a scenario file (docs/scenario-format.md) into validated, typed objects, or into a
``ScenarioError`` whose lines each read ``FILE:LINE KEY.PATH: message``. Steps:

1. ``yaml_lines.load_yaml``: safe parse with a line for every key (bombs, duplicates, non-UTF-8
   and non-mapping documents are refused there);
2. ``${VAR}`` / ``${VAR:-default}`` expansion in every string value (``$$`` is a literal ``$``);
3. pydantic models with ``extra="forbid"``; pydantic's errors are rewritten to key paths + lines;
4. cross-field checks (backend-only blocks, expect_cause, names, flags, checks' variants) and the
   matrix expansion into ``Variant`` objects (merged server + variant args/env, resolved paths).

Relative paths (``model_path``, ``sglang_source``, a ``python`` containing ``/``) resolve against
the scenario file's directory; see ``_resolve_path`` for the exact rule.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import os
import re
import shlex
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from difflib import get_close_matches
from pathlib import Path
from typing import Annotated, Any, Literal, Union

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    PlainValidator,
    PrivateAttr,
    ValidationError,
    WithJsonSchema,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from harness.yaml_lines import LoadedYaml, YamlLoadError, format_path, line_for, load_yaml, load_yaml_text

__all__ = [
    "ScenarioError", "ErrorItem", "TokenSize", "Check", "Threshold",
    "SimOptions", "Server", "HiCache", "VariantSpec", "MatrixEntry", "Variant",
    "ColdPrefill", "RepeatPrefill", "ParallelPrefixes", "ShortTTFT", "Decode", "MultiTurn",
    "Workload", "WORKLOAD_KINDS", "Sampling", "Preflight", "Quality", "Expectations", "Scenario",
    "load_scenario", "load_scenario_text", "variant_config_hash", "scenario_hash", "json_schema",
    "expand_env", "MEM_LAYOUTS", "WRITE_POLICIES", "IO_BACKENDS", "CAUSES", "QUALITY_TASKS",
]

MEM_LAYOUTS = ("layer_first", "page_first", "page_first_direct", "page_first_kv_split", "page_head")
WRITE_POLICIES = ("write_through", "write_back", "write_through_selective")
IO_BACKENDS = ("kernel", "direct")
CAUSES = ("host_memory", "cuda_fault", "assertion", "out_of_memory", "exited_before_ready",
          "timeout", "server_died", "preflight", "unknown")
QUALITY_TASKS = ("needle", "multi_needle", "variable_tracking", "aggregation", "ordered_codes")
SGLANG_DEFAULT_HICACHE_RATIO = 2.0
MAX_MATRIX_VARIANTS = 1000


# --------------------------------------------------------------------------------------- errors

@dataclass(frozen=True)
class ErrorItem:
    """One problem: ``file``, 1-based ``line`` (None if unknown), dotted key ``path``, ``message``."""

    file: str
    line: int | None
    path: str
    message: str

    def format(self) -> str:
        where = self.file if self.line is None else f"{self.file}:{self.line}"
        return f"{where} {self.path}: {self.message}" if self.path else f"{where}: {self.message}"


class ScenarioError(Exception):
    """A scenario that cannot be used. ``errors`` is a list of ``FILE:LINE KEY.PATH: message``."""

    def __init__(self, items: list[ErrorItem] | list[str] | str):
        if isinstance(items, str):
            items = [items]
        self.items: list[ErrorItem] = [i for i in items if isinstance(i, ErrorItem)]
        self.errors: list[str] = [i.format() if isinstance(i, ErrorItem) else str(i) for i in items]
        super().__init__("\n".join(self.errors))

    @property
    def lines(self) -> list[str]:
        return self.errors


def _err(msg: str) -> PydanticCustomError:
    return PydanticCustomError("harness", msg)


# --------------------------------------------------------------------------------- value types

def _no_bool(v: Any) -> Any:
    if isinstance(v, bool):
        raise _err(f"expected a number, got {str(v).lower()}")
    return v


Int = Annotated[int, BeforeValidator(_no_bool)]
PosInt = Annotated[int, BeforeValidator(_no_bool), Field(ge=1)]
NonNegInt = Annotated[int, BeforeValidator(_no_bool), Field(ge=0)]
PosFloat = Annotated[float, BeforeValidator(_no_bool), Field(gt=0)]
NonNegFloat = Annotated[float, BeforeValidator(_no_bool), Field(ge=0)]

_NAME_RE = re.compile(r"^\w[\w.+@-]*$")
_SCENARIO_NAME_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")


def _check_name(v: str) -> str:
    if not v:
        raise _err("must not be empty")
    if len(v) > 100:
        raise _err(f"too long ({len(v)} characters; at most 100)")
    if not _NAME_RE.match(v):
        raise _err(f"{v!r} is not a valid name: use letters, digits, '_' and (after the first "
                   "character) '.', '+', '@', '-'; no '/', ':', spaces or control characters")
    return v


def _check_scenario_name(v: str) -> str:
    if not v or not _SCENARIO_NAME_RE.match(v) or len(v) > 100:
        raise _err(f"{v!r} is not a valid scenario name: use [A-Za-z0-9_.-], not starting with '.' "
                   "or '-' (it names the results folder)")
    return v


Name = Annotated[str, AfterValidator(_check_name)]
ScenarioName = Annotated[str, AfterValidator(_check_scenario_name)]

_FAULT_RE = re.compile(r"^[a-z][a-z0-9_]*(=\S+)?$")


def _check_fault(v: str) -> str:
    if not _FAULT_RE.match(v):
        raise _err(f"{v!r} is not a fault: write NAME or NAME=ARG, e.g. crash_at_request=3")
    return v


Fault = Annotated[str, AfterValidator(_check_fault)]


@dataclass(frozen=True)
class TokenSize:
    """A length in tokens: absolute (``tokens``) or a fraction of the GPU pool (``pool_fraction``,
    written ``"0.4x pool"``: 0.4 × ``max_total_num_tokens``). ``"75k"`` means 75000 tokens."""

    tokens: int | None = None
    pool_fraction: float | None = None

    _POOL = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*x\s*pool\s*$", re.I)
    _ABS = re.compile(r"^\s*(\d+)\s*([kK])?\s*$")

    @classmethod
    def parse(cls, v: Any) -> "TokenSize":
        if isinstance(v, TokenSize):
            return v
        if isinstance(v, bool) or v is None:
            raise ValueError(f"expected a token count or \"<fraction>x pool\", got {v!r}")
        if isinstance(v, float) and v.is_integer():
            v = int(v)
        if isinstance(v, int):
            if v < 1:
                raise ValueError(f"must be >= 1 token, got {v}")
            return cls(tokens=v)
        if isinstance(v, str):
            m = cls._ABS.match(v)
            if m:
                n = int(m.group(1)) * (1000 if m.group(2) else 1)
                if n < 1:
                    raise ValueError(f"must be >= 1 token, got {v!r}")
                return cls(tokens=n)
            m = cls._POOL.match(v)
            if m:
                f = float(m.group(1))
                if not f > 0:
                    raise ValueError(f"the pool fraction must be > 0, got {v!r}")
                return cls(pool_fraction=f)
        raise ValueError(f"expected a whole token count (e.g. 8000 or \"8k\") or \"<fraction>x pool\" "
                         f"(e.g. \"0.4x pool\"), got {v!r}")

    @property
    def relative(self) -> bool:
        return self.pool_fraction is not None

    def resolve(self, pool_tokens: int | None) -> int:
        """Tokens for a server whose GPU pool holds ``pool_tokens`` (at least 1)."""
        if self.tokens is not None:
            return self.tokens
        if pool_tokens is None:
            raise ValueError(f"{self} needs the server's pool size (max_total_num_tokens)")
        return max(1, int(round(self.pool_fraction * pool_tokens)))

    def __str__(self) -> str:
        if self.tokens is not None:
            return str(self.tokens)
        return f"{_fmt_num(self.pool_fraction)}x pool"

    def to_json(self) -> int | str:
        return self.tokens if self.tokens is not None else str(self)


def resolve_tokens(value: Any, pool_tokens: int | None) -> int:
    """Tokens of a scenario size (a ``TokenSize``, an int, ``"8k"`` or ``"0.4x pool"``) on a server
    whose GPU pool holds ``pool_tokens``. The one place sizes are resolved; 0 stays 0 (e.g. no churn)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value == 0:
        return 0
    return TokenSize.parse(value).resolve(pool_tokens)


def _parse_token_size(v: Any) -> TokenSize:
    try:
        return TokenSize.parse(v)
    except ValueError as e:
        raise _err(str(e)) from None


TokenSizeT = Annotated[
    TokenSize,
    PlainValidator(_parse_token_size),
    PlainSerializer(lambda t: t.to_json()),
    WithJsonSchema({"anyOf": [{"type": "integer", "minimum": 1},
                              {"type": "string", "pattern": r"^\s*(\d+\s*[kK]?|(\d+(\.\d*)?|\.\d+)\s*x\s*pool)\s*$"}],
                    "description": "tokens (int, or \"8k\") or a fraction of the GPU pool: \"0.4x pool\""}),
]

_OPS = (">=", "<=", "==", "!=", ">", "<")


@dataclass(frozen=True)
class Check:
    """A within-run expectation ``[variant:] metric op value``. ``value`` is a float (``5%`` ->
    0.05, ``2x`` -> 2.0) or a word (``PASS``) for ``==``/``!=`` only."""

    text: str
    variant: str | None
    metric: str
    op: str
    value: float | str

    _RE = re.compile(
        r"^\s*(?:(?P<variant>[^\s:<>=!]+)\s*:\s*)?(?P<metric>[A-Za-z_][\w.\[\]-]*)\s*"
        r"(?P<op>>=|<=|==|!=|>|<)\s*(?P<value>\S.*?)\s*$"
    )

    @classmethod
    def parse(cls, text: Any) -> "Check":
        if isinstance(text, Check):
            return text
        if not isinstance(text, str):
            raise ValueError(f"expected a string like \"on-r1: metric >= 2\", got {text!r}")
        m = cls._RE.match(text)
        if not m:
            raise ValueError(f"cannot parse check {text!r}: expected \"[variant:] metric op value\" "
                             f"with op one of {', '.join(_OPS)}")
        raw = m.group("value").strip()
        if len(raw) >= 2 and raw[0] == raw[-1] and raw[0] in "'\"":
            value: float | str = raw[1:-1]
        else:
            value = _parse_number(raw)
            if value is None:
                if not re.match(r"^[A-Za-z_][\w.-]*$", raw):
                    raise ValueError(f"cannot parse the value {raw!r} of check {text!r}: expected a "
                                     "number (2, 1.5, 5%, 2x) or a word (PASS)")
                value = raw
        if isinstance(value, str) and m.group("op") not in ("==", "!="):
            raise ValueError(f"check {text!r}: {m.group('op')} needs a number, got {raw!r}")
        return cls(text=text.strip(), variant=m.group("variant"), metric=m.group("metric"),
                   op=m.group("op"), value=value)

    def evaluate(self, actual: Any) -> bool:
        """True when ``actual <op> value`` holds (False for None or a mismatched type)."""
        if actual is None:
            return False
        if isinstance(self.value, str):
            ok = str(actual) == self.value
            return ok if self.op == "==" else not ok
        try:
            a = float(actual)
        except (TypeError, ValueError):
            return False
        if math.isnan(a):
            return False
        v = self.value
        return {">=": a >= v, "<=": a <= v, ">": a > v, "<": a < v, "==": a == v, "!=": a != v}[self.op]

    def __str__(self) -> str:
        return self.text


def _parse_number(raw: str) -> float | None:
    m = re.match(r"^([-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?)\s*(%|x)?$", raw)
    if not m:
        return None
    v = float(m.group(1))
    return v / 100.0 if m.group(2) == "%" else v


def _parse_check(v: Any) -> Check:
    try:
        return Check.parse(v)
    except ValueError as e:
        raise _err(str(e)) from None


CheckT = Annotated[
    Check, PlainValidator(_parse_check), PlainSerializer(lambda c: c.text),
    WithJsonSchema({"type": "string", "description": "[variant:] metric op value, op in >= <= > < == !="}),
]


@dataclass(frozen=True)
class Threshold:
    """A relative change that counts as real, written ``"5%"`` (``fraction`` = 0.05)."""

    fraction: float
    text: str

    def __str__(self) -> str:
        return self.text


def _parse_threshold(v: Any) -> Threshold:
    if isinstance(v, Threshold):
        return v
    if isinstance(v, str):
        m = re.match(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*%\s*$", v)
        if m and float(m.group(1)) > 0:
            return Threshold(float(m.group(1)) / 100.0, v.strip())
    raise _err(f"expected a percentage > 0 like \"5%\", got {v!r}")


ThresholdT = Annotated[
    Threshold, PlainValidator(_parse_threshold), PlainSerializer(lambda t: t.text),
    WithJsonSchema({"type": "string", "pattern": r"^\s*(\d+(\.\d*)?|\.\d+)\s*%\s*$"}),
]


def _arg_value(v: Any) -> Any:
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, list) and all(isinstance(x, (int, float, str)) and not isinstance(x, bool) for x in v):
        return list(v)
    raise _err(f"expected a flag value: a string, a number, true (bare flag), false/null (omit) or a "
               f"list of strings/numbers, got {_show(v)}")


ArgValue = Annotated[
    Any, PlainValidator(_arg_value),
    WithJsonSchema({"anyOf": [{"type": "string"}, {"type": "number"}, {"type": "boolean"}, {"type": "null"},
                              {"type": "array", "items": {"type": ["string", "number"]}}]}),
]
ArgsDict = Annotated[dict[str, ArgValue], WithJsonSchema({
    "type": "object", "propertyNames": {"pattern": "^--"},
    "additionalProperties": {"anyOf": [{"type": "string"}, {"type": "number"}, {"type": "boolean"},
                                       {"type": "null"}, {"type": "array", "items": {"type": ["string", "number"]}}]},
    "description": "sglang flags in order: true = bare flag, false/null = omitted"})]


def _env_value(v: Any) -> str | None:
    if v is None or isinstance(v, str):
        return v
    if isinstance(v, bool):
        raise _err(f"environment values are strings: write \"{'1' if v else '0'}\" or "
                   f"\"{str(v).lower()}\" in quotes, got {str(v).lower()}")
    if isinstance(v, (int, float)):
        return _fmt_num(v)
    raise _err(f"expected a string, got {_show(v)}")


EnvValue = Annotated[Any, PlainValidator(_env_value),
                     WithJsonSchema({"anyOf": [{"type": "string"}, {"type": "number"}, {"type": "null"}]})]
EnvDict = dict[str, EnvValue]


def _gpu_value(v: Any) -> Any:
    if v == "auto" or isinstance(v, bool):
        return v
    raise _err(f"expected auto, true or false, got {v!r}")


GpuMode = Annotated[Any, PlainValidator(_gpu_value), WithJsonSchema({"enum": ["auto", True, False]})]


def _fmt_num(v: Any) -> str:
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    return str(v)


def _show(v: Any) -> str:
    if isinstance(v, dict):
        return "a mapping"
    if isinstance(v, list):
        return "a list"
    if v is None:
        return "null"
    if isinstance(v, bool):
        return str(v).lower()
    return repr(v)


# --------------------------------------------------------------------------------------- models

class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", coerce_numbers_to_str=True, allow_inf_nan=False,
                              validate_default=False)


class SimOptions(_Model):
    """``server.sim``: knobs of the simulated server (backend sim only)."""

    time_scale: PosFloat = 1.0
    host_mem_scale: Annotated[float, BeforeValidator(_no_bool), Field(gt=0, le=1)] = 0.0625
    mem_available_gib: PosFloat | None = None
    startup_s: NonNegFloat = 1.0
    faults: list[Fault] = []


class Server(_Model):
    """``server``: how to start the server every variant shares."""

    backend: Literal["sglang", "sim"] = "sglang"
    python: str = "python3"
    command_prefix: list[str] = []
    sglang_source: str | None = None
    model_path: str
    tp_size: PosInt = 1
    host: str = "127.0.0.1"
    args: ArgsDict = {}
    # One string of extra sglang flags, split like a shell would (e.g. ``${SGLANG_EXTRA_ARGS:-}``),
    # so one scenario file serves GPU boxes whose sglang build needs different backend flags.
    # Merged after ``args``; a variant's args still win.
    extra_args: str = ""
    env: EnvDict = {}
    startup_timeout_s: PosFloat = 600.0
    startup_retries: NonNegInt = 1
    request_timeout_s: PosFloat = 300.0
    # After the last response the server must stay alive this long, idle, and then answer
    # /health_generate (P6: a crash a few seconds after the last answer fails the variant).
    liveness_idle_s: NonNegFloat = 3.0
    sim: SimOptions | None = None

    @field_validator("extra_args")
    @classmethod
    def _check_extra_args(cls, v: str) -> str:
        for flag in parse_extra_args(v):
            problem = _flag_problem(flag)
            if problem:
                raise _err(problem)
        return v

    @field_validator("sglang_source", mode="before")
    @classmethod
    def _empty_source(cls, v: Any) -> Any:
        """``sglang_source: ${SGLANG_SOURCE:-}`` (empty) means none."""
        return None if v == "" else v

    @field_validator("model_path", "python")
    @classmethod
    def _not_empty(cls, v: str) -> str:
        if not v.strip():
            raise _err("must not be empty")
        return v


class HiCache(_Model):
    """A variant's HiCache block (its presence turns HiCache on). None fields are not passed:
    sglang's own default applies (ratio 2.0, write_through, kernel; layout depends on version)."""

    ratio: PosFloat | None = None
    size_gb: PosFloat | None = None
    mem_layout: Literal[MEM_LAYOUTS] | None = None  # type: ignore[valid-type]
    write_policy: Literal[WRITE_POLICIES] | None = None  # type: ignore[valid-type]
    io_backend: Literal[IO_BACKENDS] | None = None  # type: ignore[valid-type]
    storage_backend: str | None = None

    @property
    def effective_ratio(self) -> float:
        return self.ratio if self.ratio is not None else SGLANG_DEFAULT_HICACHE_RATIO

    def flags(self) -> list[str]:
        """sglang flags for this block (``--enable-hierarchical-cache`` first)."""
        out = ["--enable-hierarchical-cache"]
        if self.size_gb is not None:
            out += ["--hicache-size", _fmt_num(self.size_gb)]
        if self.ratio is not None:
            out += ["--hicache-ratio", _fmt_num(self.ratio)]
        for attr, flag in (("mem_layout", "--hicache-mem-layout"), ("write_policy", "--hicache-write-policy"),
                           ("io_backend", "--hicache-io-backend"), ("storage_backend", "--hicache-storage-backend")):
            if getattr(self, attr) is not None:
                out += [flag, str(getattr(self, attr))]
        return out


def _hicache_shorthand(v: Any) -> Any:
    if v is True:
        return {}
    if v is False:
        return None
    return v


class _VariantFields(_Model):
    description: str = ""
    model_path: str | None = None
    hicache: HiCache | None = None
    args: ArgsDict = {}
    env: EnvDict = {}
    expect: Literal["ok", "startup_failed"] = "ok"
    expect_cause: Literal[CAUSES] | None = None  # type: ignore[valid-type]
    sim_faults: list[Fault] = []

    @field_validator("model_path")
    @classmethod
    def _mp_not_empty(cls, v: str | None) -> str | None:
        if v is not None and not v.strip():
            raise _err("must not be empty (omit it to use server.model_path)")
        return v

    @field_validator("hicache", mode="before")
    @classmethod
    def _hicache_bool(cls, v: Any) -> Any:
        """``hicache: true`` = on with sglang defaults; ``hicache: false`` = off."""
        return _hicache_shorthand(v)


class VariantSpec(_VariantFields):
    """One entry of ``variants`` as written."""

    name: Name


def _axis_value(v: Any) -> Any:
    if v is None or isinstance(v, (str, int, float, bool)):
        return v
    raise _err(f"axis values must be scalars (string, number, true/false, null), got {_show(v)}")


AxisValue = Annotated[Any, PlainValidator(_axis_value),
                      WithJsonSchema({"type": ["string", "number", "boolean", "null"]})]


class MatrixEntry(_VariantFields):
    """One entry of ``matrix``: base variant fields plus ``axes`` (dotted path -> values)."""

    prefix: Name
    axes: dict[str, Annotated[list[AxisValue], Field(min_length=1)]]
    labels: dict[str, str] = {}


class _WorkloadBase(_Model):
    name: Name | None = None
    flush_before: bool = False
    timeout_s: PosFloat | None = None
    api: Literal["generate", "completions"] = "generate"

    @model_validator(mode="after")
    def _default_name(self):
        if self.name is None:
            self.name = self.kind  # type: ignore[attr-defined]
        return self


class _PrefillBase(_WorkloadBase):
    max_new_tokens: PosInt = 1


class ColdPrefill(_PrefillBase):
    """N never-seen prompts, one at a time."""

    kind: Literal["cold_prefill"]
    n: PosInt = 1
    prompt_tokens: TokenSizeT
    warmup: NonNegInt = 1


class RepeatPrefill(_PrefillBase):
    """The same prompts again: at once (device hits), then after eviction traffic (host hits)."""

    kind: Literal["repeat_prefill"]
    n: PosInt = 1
    prompt_tokens: TokenSizeT
    # Over the GPU pool (pushes the prompts out of it), within a ratio-2 host pool minus the
    # prompts (more would push them out of the host tier too, and the phase would test recompute).
    eviction_tokens: TokenSizeT = TokenSize(pool_fraction=1.2)


class ParallelPrefixes(_PrefillBase):
    """K distinct prefixes sent concurrently, ``passes`` times."""

    kind: Literal["parallel_prefixes"]
    k: PosInt = 8
    prompt_tokens: TokenSizeT
    passes: PosInt = 2


class ShortTTFT(_PrefillBase):
    """Short prompts alone, then while a long prefill runs (null ``long_prompt_tokens``: alone only)."""

    kind: Literal["short_ttft"]
    n: PosInt = 5
    prompt_tokens: TokenSizeT = TokenSize(tokens=32)
    long_prompt_tokens: TokenSizeT | None = TokenSize(pool_fraction=0.8)


class Decode(_WorkloadBase):
    """A batch of ``batch`` requests generating ``output_tokens`` each (ignore_eos)."""

    kind: Literal["decode"]
    batch: PosInt = 1
    prompt_tokens: TokenSizeT = TokenSize(tokens=128)
    output_tokens: PosInt = 256


class MultiTurn(_WorkloadBase):
    """Sessions that grow turn by turn."""

    kind: Literal["multi_turn"]
    sessions: PosInt = 4
    turns: PosInt = 4
    first_turn_tokens: TokenSizeT = TokenSize(tokens=2000)
    turn_tokens: TokenSizeT = TokenSize(tokens=200)
    output_tokens: PosInt = 32


_WORKLOAD_CLASSES = (ColdPrefill, RepeatPrefill, ParallelPrefixes, ShortTTFT, Decode, MultiTurn)
WORKLOAD_KINDS: dict[str, type[_WorkloadBase]] = {
    typing.get_args(c.model_fields["kind"].annotation)[0]: c for c in _WORKLOAD_CLASSES
}
Workload = Annotated[Union[_WORKLOAD_CLASSES], Field(discriminator="kind")]  # type: ignore[valid-type]


class Sampling(_Model):
    enabled: bool = True
    interval_s: PosFloat = 0.5
    idle_window_s: NonNegFloat = 5.0
    gpu: GpuMode = "auto"
    server_metrics: bool = True
    cooldown_timeout_s: NonNegFloat = 120.0
    cooldown_mem_tolerance_gib: NonNegFloat = 1.0


class Preflight(_Model):
    mode: Literal["warn", "strict", "off"] = "warn"
    reserve_gib: NonNegFloat = 10.0
    ranks_on_host: PosInt | None = None


class Quality(_Model):
    enabled: bool = False
    baseline_variant: str | None = None  # None: the first variant without HiCache (filled at load)
    control: bool = True
    tasks: Annotated[list[Literal[QUALITY_TASKS]], Field(min_length=1)] = list(QUALITY_TASKS)  # type: ignore[valid-type]
    lengths: Annotated[list[TokenSizeT], Field(min_length=1)] = [TokenSize(tokens=8000)]
    samples_per_task: PosInt = 2
    max_new_tokens: PosInt = 32
    churn_tokens: TokenSizeT = TokenSize(pool_fraction=1.5)
    reasks: PosInt = 2
    top_logprobs: PosInt = 5
    tie_epsilon: NonNegFloat = 0.05
    mode: Literal["auto", "text", "token_ids"] = "auto"


class Expectations(_Model):
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
    backend: Literal["sglang", "sim"]
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

    @property
    def hicache_enabled(self) -> bool:
        return self.hicache is not None

    def all_sim_faults(self) -> list[str]:
        return (list(self.sim.faults) if self.sim else []) + list(self.sim_faults)

    def flag_argv(self) -> list[str]:
        """HiCache flags then the merged args as argv (no --model-path/--host/--port/--tp-size)."""
        out = self.hicache.flags() if self.hicache else []
        for flag, value in self.args.items():
            if value is True:
                out.append(flag)
            elif isinstance(value, list):
                out += [flag, *(_fmt_num(x) for x in value)]
            else:
                out += [flag, _fmt_num(value)]
        return out


class Scenario(_Model):
    """A whole scenario file. ``path``/``text`` are the file and its raw text."""

    name: ScenarioName
    description: str = ""
    seed: NonNegInt = 0
    repeats: PosInt = 1
    server: Server
    variants: list[VariantSpec] = []
    matrix: list[MatrixEntry] = []
    workloads: list[Workload] = []  # type: ignore[valid-type]
    sampling: Sampling = Field(default_factory=Sampling)
    preflight: Preflight = Field(default_factory=Preflight)
    quality: Quality = Field(default_factory=Quality)
    expectations: Expectations = Field(default_factory=Expectations)

    _path: Path | None = PrivateAttr(default=None)
    _text: str = PrivateAttr(default="")
    _base_dir: Path | None = PrivateAttr(default=None)
    _variants: list[Variant] | None = PrivateAttr(default=None)

    @property
    def path(self) -> Path | None:
        return self._path

    @property
    def text(self) -> str:
        return self._text

    @property
    def base_dir(self) -> Path | None:
        """Directory relative paths resolve against (the scenario file's directory)."""
        return self._base_dir

    @property
    def hash(self) -> str:
        return scenario_hash(self._text)

    def expand_variants(self) -> list[Variant]:
        """Explicit variants then matrix expansions, in order (ScenarioError on duplicates)."""
        if self._variants is None:
            variants, errors = _expand(self, None, str(self._path or "<scenario>"))
            if errors:
                raise ScenarioError(errors)
            self._variants = variants
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


# ---------------------------------------------------------------------------- ${VAR} expansion

_VAR_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def expand_env(s: str, env: Mapping[str, str]) -> str:
    """Expand ``${VAR}``, ``${VAR:-default}`` (default when unset or empty) and ``$$`` in ``s``.

    Raises ValueError naming the variable when one is unset and has no default. A ``$`` not
    followed by ``{`` or ``$`` is kept as is."""
    out: list[str] = []
    i, n = 0, len(s)
    while i < n:
        c = s[i]
        if c != "$" or i + 1 >= n or s[i + 1] not in "{$":
            out.append(c)
            i += 1
            continue
        if s[i + 1] == "$":
            out.append("$")
            i += 2
            continue
        end = s.find("}", i + 2)
        if end < 0:
            raise ValueError(f"unterminated '${{' in {s!r} (write $$ for a literal $)")
        inner = s[i + 2:end]
        name, sep, default = inner.partition(":-")
        if not _VAR_NAME.match(name):
            raise ValueError(f"bad variable reference '${{{inner}}}': expected ${{NAME}} or "
                             "${NAME:-default}")
        value = env.get(name)
        if sep:
            out.append(value if value else default)
        elif value is None:
            raise ValueError(f"environment variable {name} is not set (give a default with "
                             f"${{{name}:-default}})")
        else:
            out.append(value)
        i = end + 1
    return "".join(out)


def _expand_tree(data: Any, path: tuple, env: Mapping[str, str], errors: list[tuple[tuple, str]]) -> Any:
    if isinstance(data, str):
        if "$" not in data:
            return data
        try:
            return expand_env(data, env)
        except ValueError as e:
            errors.append((path, str(e)))
            return data
    if isinstance(data, dict):
        return {k: _expand_tree(v, path + (k,), env, errors) for k, v in data.items()}
    if isinstance(data, list):
        return [_expand_tree(v, path + (i,), env, errors) for i, v in enumerate(data)]
    return data


# --------------------------------------------------------------------- pydantic errors -> lines

def _unwrap(ann: Any) -> Any:
    while True:
        origin = typing.get_origin(ann)
        if origin is Annotated:
            ann = typing.get_args(ann)[0]
            continue
        if origin in (Union, getattr(__import__("types"), "UnionType", None)):
            args = [a for a in typing.get_args(ann) if a is not type(None)]
            if len(args) == 1:
                ann = args[0]
                continue
        return ann


def _allowed_keys(loc: tuple) -> list[str] | None:
    """Field names of the model reached by following ``loc`` from Scenario (None if unknown)."""
    ann: Any = Scenario
    for el in loc:
        ann = _unwrap(ann)
        origin = typing.get_origin(ann)
        if origin is Union:
            members = [m for m in typing.get_args(ann) if isinstance(m, type) and issubclass(m, BaseModel)]
            ann = next((m for m in members if "kind" in m.model_fields
                        and el in typing.get_args(m.model_fields["kind"].annotation)), None)
            if ann is None:
                return None
            continue
        if origin is list and isinstance(el, int):
            ann = typing.get_args(ann)[0]
        elif origin is dict:
            ann = typing.get_args(ann)[1]
        elif isinstance(ann, type) and issubclass(ann, BaseModel) and isinstance(el, str):
            f = ann.model_fields.get(el)
            if f is None:
                return None
            ann = f.annotation
        else:
            return None
    ann = _unwrap(ann)
    if isinstance(ann, type) and issubclass(ann, BaseModel):
        return list(ann.model_fields)
    return None


def _data_path(data: Any, loc: tuple) -> tuple:
    """Map a pydantic ``loc`` onto the data: union/tag labels are dropped; a missing last key kept."""
    out: list = []
    cur = data
    for idx, el in enumerate(loc):
        if isinstance(cur, dict) and isinstance(el, str) and el in cur:
            out.append(el)
            cur = cur[el]
        elif isinstance(cur, list) and isinstance(el, int) and 0 <= el < len(cur):
            out.append(el)
            cur = cur[el]
        elif isinstance(cur, dict) and idx == len(loc) - 1 and isinstance(el, str) and el != "[key]":
            out.append(el)
            cur = None
        # else: a union member label or discriminator tag: skip
    return tuple(out)


def _message(err: dict, loc: tuple) -> str:
    t = err["type"]
    inp = err.get("input")
    ctx = err.get("ctx") or {}
    if t == "literal_error":
        expected = re.findall(r"'([^']*)'", ctx.get("expected", ""))
        return f"expected one of {', '.join(expected)}, got {_show(inp)}"
    if t == "extra_forbidden":
        key = loc[-1] if loc else "?"
        allowed = _allowed_keys(tuple(loc[:-1])) or []
        msg = f"unknown key {key!r}"
        close = get_close_matches(str(key), allowed, n=1)
        if close:
            msg += f" (did you mean {close[0]!r}?)"
        if allowed:
            msg += f"; allowed: {', '.join(allowed)}"
        return msg
    if t == "missing":
        return "required key is missing"
    if t in ("int_type", "int_parsing"):
        return f"expected an integer, got {_show(inp)}"
    if t == "int_from_float":
        return f"expected a whole number, got {_show(inp)}"
    if t in ("float_type", "float_parsing"):
        return f"expected a number, got {_show(inp)}"
    if t == "finite_number":
        return f"expected a finite number, got {_show(inp)}"
    if t in ("bool_type", "bool_parsing"):
        return f"expected true or false, got {_show(inp)}"
    if t in ("string_type",):
        return f"expected a string, got {_show(inp)}"
    if t in ("list_type", "tuple_type"):
        return f"expected a list, got {_show(inp)}"
    if t in ("dict_type", "model_type", "model_attributes_type", "dataclass_type"):
        return f"expected a mapping (key: value), got {_show(inp)}"
    if t == "greater_than":
        return f"must be > {ctx.get('gt')}, got {_show(inp)}"
    if t == "greater_than_equal":
        return f"must be >= {ctx.get('ge')}, got {_show(inp)}"
    if t == "less_than":
        return f"must be < {ctx.get('lt')}, got {_show(inp)}"
    if t == "less_than_equal":
        return f"must be <= {ctx.get('le')}, got {_show(inp)}"
    if t == "too_short":
        return f"must have at least {ctx.get('min_length')} item(s)"
    if t == "union_tag_invalid":
        return f"unknown kind {ctx.get('tag')!r}: expected one of {', '.join(WORKLOAD_KINDS)}"
    if t == "union_tag_not_found":
        return f"missing 'kind': expected one of {', '.join(WORKLOAD_KINDS)}"
    msg = err.get("msg", str(t))
    return msg[len("Value error, "):] if msg.startswith("Value error, ") else msg


def _convert_errors(exc: ValidationError, data: Any, lines: dict, file: str,
                    prefix: tuple = (), remap=None) -> list[ErrorItem]:
    items: list[ErrorItem] = []
    for err in exc.errors(include_url=False):
        loc = tuple(err["loc"])
        rel = _data_path(data, loc)
        if err["type"] in ("union_tag_invalid", "union_tag_not_found"):
            rel = rel + ("kind",)  # point at the discriminator itself
        path = prefix + rel
        if remap is not None:
            path = remap(rel) or path
        items.append(ErrorItem(file, line_for(lines, path), format_path(path), _message(err, loc)))
    return items


# ----------------------------------------------------------------------------- cross-field checks

_RESERVED_ARGS = {
    "--model-path": "set server.model_path (or a variant's model_path)",
    "--model": "set server.model_path (or a variant's model_path)",
    "--host": "set server.host",
    "--port": "the harness picks the port",
    "--tp-size": "set server.tp_size",
    "--tp": "set server.tp_size",
    "--enable-hierarchical-cache": "give the variant a hicache block",
    "--enable-hicache": "give the variant a hicache block",
    "--hicache-ratio": "set hicache.ratio",
    "--hicache-size": "set hicache.size_gb",
    "--hicache-mem-layout": "set hicache.mem_layout",
    "--hicache-write-policy": "set hicache.write_policy",
    "--hicache-io-backend": "set hicache.io_backend",
    "--hicache-storage-backend": "set hicache.storage_backend",
}
_FLAG_RE = re.compile(r"^--[A-Za-z0-9][A-Za-z0-9_.-]*$")
_ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _flag_problem(flag: str) -> str | None:
    if not _FLAG_RE.match(flag):
        return f"{flag!r} is not a flag: flags start with '--' (e.g. --max-total-tokens)"
    if flag in _RESERVED_ARGS:
        return f"{flag} is set by the harness: {_RESERVED_ARGS[flag]}"
    if flag.startswith("--sim-"):
        return f"{flag} is a simulator knob: set it under server.sim"
    return None


def _env_problem(name: str) -> str | None:
    if not _ENV_NAME_RE.match(name):
        return f"{name!r} is not a valid environment variable name ([A-Za-z_][A-Za-z0-9_]*)"
    return None


_AXIS_ROOTS = ("hicache.", "env.", "args.")


def _axis_problem(axis: str) -> str | None:
    if axis == "model_path":
        return None
    root, _, rest = axis.partition(".")
    if root == "hicache":
        if rest not in HiCache.model_fields:
            return f"unknown axis {axis!r}: hicache fields are {', '.join('hicache.' + f for f in HiCache.model_fields)}"
        return None
    if root == "env":
        return _env_problem(rest)
    if root == "args":
        return _flag_problem(rest)
    return (f"unknown axis {axis!r}: axes are hicache.<field>, env.<NAME>, args.--<flag> or "
            "model_path")


def _semantic(scn: Scenario, lines: dict, file: str) -> list[ErrorItem]:
    errs: list[ErrorItem] = []

    def add(path: tuple, msg: str) -> None:
        errs.append(ErrorItem(file, line_for(lines, path), format_path(path), msg))

    sim = scn.server.backend == "sim"
    if scn.server.sim is not None and not sim:
        add(("server", "sim"), "only allowed with backend: sim (this scenario uses backend: sglang)")
    blocks: list[tuple[tuple, _VariantFields]] = [(("variants", i), v) for i, v in enumerate(scn.variants)]
    blocks += [(("matrix", i), m) for i, m in enumerate(scn.matrix)]
    for flag in scn.server.args:
        p = _flag_problem(flag)
        if p:
            add(("server", "args", flag), p)
    for name in scn.server.env:
        p = _env_problem(name)
        if p:
            add(("server", "env", name), p)
    for base, v in blocks:
        for flag in v.args:
            p = _flag_problem(flag)
            if p:
                add(base + ("args", flag), p)
        for name in v.env:
            p = _env_problem(name)
            if p:
                add(base + ("env", name), p)
        if v.sim_faults and not sim:
            add(base + ("sim_faults",), "only allowed with backend: sim")
        if v.expect_cause is not None and v.expect != "startup_failed":
            add(base + ("expect_cause",), "only allowed with expect: startup_failed")
    for i, m in enumerate(scn.matrix):
        for axis in m.axes:
            p = _axis_problem(axis)
            if p:
                add(("matrix", i, "axes", axis), p)
        for axis in m.labels:
            if axis not in m.axes:
                add(("matrix", i, "labels", axis), f"label for {axis!r}, which is not an axis of this entry")
    if not scn.variants and not scn.matrix:
        add(("variants",), "no variants: add at least one under variants or matrix")
    seen_w: dict[str, int] = {}
    for i, w in enumerate(scn.workloads):
        if w.name in seen_w:
            j = seen_w[w.name]
            add(("workloads", i, "name") if ("workloads", i, "name") in lines else ("workloads", i),
                f"duplicate workload name {w.name!r} (first at workloads[{j}], line "
                f"{line_for(lines, ('workloads', j))}); give each a distinct name")
        else:
            seen_w[w.name] = i
    return errs


def _late_checks(scn: Scenario, variants: list[Variant], lines: dict, file: str) -> list[ErrorItem]:
    errs: list[ErrorItem] = []

    def add(path: tuple, msg: str) -> None:
        errs.append(ErrorItem(file, line_for(lines, path), format_path(path), msg))

    names = [v.name for v in variants]
    by_name = {v.name: v for v in variants}
    q = scn.quality
    if q.baseline_variant is not None and q.baseline_variant not in by_name:
        add(("quality", "baseline_variant"), f"no variant named {q.baseline_variant!r} (variants: "
            f"{', '.join(names)})")
    elif q.enabled and q.baseline_variant is None:
        off = next((v for v in variants if v.hicache is None and v.expect == "ok"), None)
        if off is None:
            add(("quality", "enabled"), "quality needs an OFF variant (no hicache block) or "
                "quality.baseline_variant")
        else:
            q.baseline_variant = off.name
    if q.enabled and q.baseline_variant in by_name and by_name[q.baseline_variant].expect != "ok":
        add(("quality", "baseline_variant"), f"baseline {q.baseline_variant!r} is expected to fail "
            "at startup")
    for i, c in enumerate(scn.expectations.checks):
        if c.variant is not None and c.variant not in by_name:
            close = get_close_matches(c.variant, names, n=1)
            add(("expectations", "checks", i), f"unknown variant {c.variant!r} in check {c.text!r}"
                + (f" (did you mean {close[0]!r}?)" if close else f" (variants: {', '.join(names)})"))
    return errs


# --------------------------------------------------------------------------- variant resolution

def _resolve_path(p: str, base_dir: Path | None, *, always: bool) -> str:
    """Absolute and ``~`` paths are kept. A relative path resolves against the scenario file's
    directory when ``always`` (sim model dirs, sglang_source, python), when it starts with ``./``
    or ``../``, or when it exists there; otherwise it is kept as written (a Hugging Face id such
    as ``Qwen/Qwen3-8B``)."""
    q = os.path.expanduser(p)
    if os.path.isabs(q) or base_dir is None:
        return q
    cand = os.path.normpath(os.path.join(str(base_dir), q))
    if always or q.startswith(("./", "../")) or os.path.exists(cand):
        return cand
    return p


def parse_extra_args(text: str) -> dict[str, Any]:
    """``"--a 1 --flag --b x"`` → ``{"--a": "1", "--flag": True, "--b": "x"}`` (shell-like split)."""
    try:
        tokens = shlex.split(text or "")
    except ValueError as exc:
        raise _err(f"cannot split extra_args: {exc}") from None
    out: dict[str, Any] = {}
    i = 0
    while i < len(tokens):
        flag = tokens[i]
        if not flag.startswith("--"):
            raise _err(f"extra_args: expected a --flag, got {flag!r}")
        if i + 1 < len(tokens) and not tokens[i + 1].startswith("--"):
            out[flag] = tokens[i + 1]
            i += 2
        else:
            out[flag] = True
            i += 1
    return out


def _merge_args(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    out.update(over)
    return {k: v for k, v in out.items() if v is not None and v is not False}


def _merge_env(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, str]:
    out = dict(base)
    out.update(over)
    return {k: v for k, v in out.items() if v is not None}


def _make_variant(scn: Scenario, spec: _VariantFields, name: str, origin: str,
                  matrix_values: dict | None = None) -> Variant:
    s = scn.server
    base_dir = scn._base_dir
    sim = s.backend == "sim"
    mp_spec = spec.model_path if spec.model_path is not None else s.model_path
    python = s.python
    if "/" in python:
        python = _resolve_path(python, base_dir, always=True)
    return Variant(
        name=name, origin=origin, description=spec.description, backend=s.backend, python=python,
        command_prefix=list(s.command_prefix),
        sglang_source=(_resolve_path(s.sglang_source, base_dir, always=True) if s.sglang_source else None),
        model_path=_resolve_path(mp_spec, base_dir, always=sim), model_path_spec=mp_spec,
        tp_size=s.tp_size, host=s.host,
        hicache=spec.hicache.model_copy() if spec.hicache is not None else None,
        args=_merge_args(_merge_args(s.args, parse_extra_args(s.extra_args)), spec.args),
        env=_merge_env(s.env, spec.env),
        expect=spec.expect, expect_cause=spec.expect_cause, sim_faults=list(spec.sim_faults),
        sim=(s.sim or SimOptions()) if sim else None,
        startup_timeout_s=s.startup_timeout_s, startup_retries=s.startup_retries,
        request_timeout_s=s.request_timeout_s, matrix_values=dict(matrix_values or {}),
    )


def _axis_part(axis: str, value: Any, labels: Mapping[str, str]) -> str:
    if axis == "model_path" and isinstance(value, str):
        shown = os.path.basename(value.rstrip("/")) or value
    elif isinstance(value, bool):
        shown = "on" if value else "off"
    elif value is None:
        shown = "none"
    else:
        shown = _fmt_num(value)
    if axis in labels:
        label = labels[axis]
        part = label.replace("{}", shown) if "{}" in label else label + shown
    else:
        root, _, rest = axis.partition(".")
        if axis == "hicache.ratio":
            part = f"r{shown}"
        elif axis == "hicache.size_gb":
            part = f"{shown}gb"
        elif root == "env":
            short = re.sub(r"^SGLANG_(HICACHE_)?", "", rest) or rest
            part = f"{short}_{shown}"
        elif root == "args":
            flag = rest.lstrip("-")
            part = flag if value is True else (f"no-{flag}" if value in (False, None) else f"{flag}_{shown}")
        else:
            part = shown
    return re.sub(r"[^\w.+@-]", "_", part)


def _matrix_variants(scn: Scenario, i: int, m: MatrixEntry, lines: dict, file: str,
                     raw: dict | None) -> tuple[list[Variant], list[ErrorItem]]:
    errs: list[ErrorItem] = []
    axes = list(m.axes.items())
    count = math.prod(len(vals) for _, vals in axes)
    if count > MAX_MATRIX_VARIANTS:
        p = ("matrix", i, "axes")
        return [], [ErrorItem(file, line_for(lines, p), format_path(p),
                              f"{count} combinations (limit {MAX_MATRIX_VARIANTS})")]
    base = m.model_dump(include=set(_VariantFields.model_fields), exclude_unset=False)
    # validate each axis value alone, so an error points at that value
    for axis, vals in axes:
        if _axis_problem(axis):
            return [], []  # already reported by _semantic
        for j, val in enumerate(vals):
            trial = {"name": "x", **_apply_axis({}, axis, val)}
            try:
                VariantSpec.model_validate(trial)
            except ValidationError as e:
                p = ("matrix", i, "axes", axis, j)
                for err in e.errors(include_url=False):
                    errs.append(ErrorItem(file, line_for(lines, p), format_path(p), _message(err, tuple(err["loc"]))))
    if errs:
        return [], errs
    out: list[Variant] = []
    for combo in itertools.product(*(vals for _, vals in axes)):
        d = json.loads(json.dumps(base))
        values = {}
        parts = [m.prefix]
        for (axis, _), val in zip(axes, combo):
            d = _apply_axis(d, axis, val)
            values[axis] = val
            parts.append(_axis_part(axis, val, m.labels))
        name = "-".join(parts)
        try:
            spec = VariantSpec.model_validate({**d, "name": name})
        except ValidationError as e:
            p = ("matrix", i)
            for err in e.errors(include_url=False):
                errs.append(ErrorItem(file, line_for(lines, p), format_path(p) + " (" + name + ")",
                                      _message(err, tuple(err["loc"]))))
            continue
        out.append(_make_variant(scn, spec, name, f"matrix[{i}]", values))
    return out, errs


def _apply_axis(d: dict, axis: str, val: Any) -> dict:
    d = dict(d)
    if axis == "model_path":
        d["model_path"] = val
        return d
    root, _, rest = axis.partition(".")
    sub = dict(d.get(root) or {})
    sub[rest] = val
    d[root] = sub
    return d


def _expand(scn: Scenario, lines: dict | None, file: str) -> tuple[list[Variant], list[ErrorItem]]:
    from harness.results import safe_name

    lines = lines or {}
    errs: list[ErrorItem] = []
    variants: list[Variant] = []
    where: dict[str, tuple] = {}
    folders: dict[str, str] = {}  # results folder -> the variant name that has it

    def folder_clash(name: str, p: tuple) -> bool:
        """Two names that differ only in characters the results folder cannot hold (``@``, non-ASCII
        letters) would share one folder and overwrite each other's files."""
        other = folders.setdefault(safe_name(name), name)
        if other == name:
            return False
        errs.append(ErrorItem(file, line_for(lines, p), format_path(p),
                              f"variant name {name!r} and {other!r} would share the results folder "
                              f"{safe_name(name)!r}; rename one of them"))
        return True

    for i, v in enumerate(scn.variants):
        p = ("variants", i, "name")
        if v.name in where:
            first = where[v.name]
            errs.append(ErrorItem(file, line_for(lines, p), format_path(p),
                                  f"duplicate variant name {v.name!r} (first at {format_path(first[:2])}, "
                                  f"line {line_for(lines, first)})"))
            continue
        if folder_clash(v.name, p):
            continue
        where[v.name] = p
        variants.append(_make_variant(scn, v, v.name, f"variants[{i}]"))
    for i, m in enumerate(scn.matrix):
        got, e = _matrix_variants(scn, i, m, lines, file, None)
        errs += e
        for v in got:
            p = ("matrix", i)
            if v.name in where:
                first = where[v.name]
                errs.append(ErrorItem(file, line_for(lines, p), format_path(p),
                                      f"generated variant name {v.name!r} duplicates {format_path(first[:2])} "
                                      f"(line {line_for(lines, first)}); change the prefix or labels"))
                continue
            if folder_clash(v.name, p):
                continue
            where[v.name] = p
            variants.append(v)
    return variants, errs


# ------------------------------------------------------------------------------------- loading

def _sort_items(items: list[ErrorItem]) -> list[ErrorItem]:
    seen = set()
    out = []
    for it in items:
        key = (it.line, it.path, it.message)
        if key not in seen:
            seen.add(key)
            out.append(it)
    return sorted(out, key=lambda it: (it.line or 0))


def _from_loaded(y: LoadedYaml, env: Mapping[str, str] | None, path: Path | None) -> Scenario:
    file = y.file
    env = os.environ if env is None else env
    exp_errors: list[tuple[tuple, str]] = []
    data = _expand_tree(y.data, (), env, exp_errors)
    errors = [ErrorItem(file, line_for(y.lines, p), format_path(p), msg) for p, msg in exp_errors]
    if "name" not in data and path is not None:
        data = {"name": path.stem, **data}
    try:
        scn = Scenario.model_validate(data)
    except ValidationError as e:
        errors += _convert_errors(e, data, y.lines, file)
        raise ScenarioError(_sort_items(errors)) from None
    if errors:
        raise ScenarioError(_sort_items(errors))
    scn._text = y.text
    scn._path = path
    scn._base_dir = path.absolute().parent if path is not None else Path.cwd()
    errors = _semantic(scn, y.lines, file)
    if errors:
        raise ScenarioError(_sort_items(errors))
    variants, errors = _expand(scn, y.lines, file)
    errors += _late_checks(scn, variants, y.lines, file)
    if errors:
        raise ScenarioError(_sort_items(errors))
    if scn.server.backend == "sim" and scn.server.sim is None:
        scn.server.sim = SimOptions()
    scn._variants = variants
    return scn


def load_scenario(path: str | Path, env: Mapping[str, str] | None = None) -> Scenario:
    """Load and validate a scenario file; ``env`` (default ``os.environ``) feeds ``${VAR}``.

    Raises ScenarioError whose ``errors`` are ``FILE:LINE KEY.PATH: message`` lines."""
    try:
        y = load_yaml(path)
    except YamlLoadError as e:
        raise ScenarioError([ErrorItem(e.file, e.line, e.path, e.message)]) from None
    return _from_loaded(y, env, Path(path))


def load_scenario_text(text: str | bytes, file: str = "<string>", env: Mapping[str, str] | None = None,
                       base_dir: str | Path | None = None) -> Scenario:
    """Like ``load_scenario`` for text in memory; relative paths resolve against ``base_dir``
    (default: the directory of ``file``, or the current directory)."""
    try:
        y = load_yaml_text(text, file)
    except YamlLoadError as e:
        raise ScenarioError([ErrorItem(e.file, e.line, e.path, e.message)]) from None
    p = Path(base_dir) / Path(file).name if base_dir is not None else Path(file)
    scn = _from_loaded(y, env, p)
    return scn


# -------------------------------------------------------------------------------------- hashing

def _canonical(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def variant_config_hash(scenario: Scenario, variant: Variant) -> str:
    """sha256 over what shapes the server: backend, python, command prefix, sglang_source,
    model path (as written, after ${VAR} expansion, so checkouts in other folders hash alike),
    TP size, merged args (in order) and env, HiCache block and simulator options (with faults).
    Names, descriptions, expectations, timeouts and workloads are not part of it."""
    s = scenario.server
    sim = variant.backend == "sim"
    payload = {
        "backend": variant.backend,
        "python": None if sim else s.python,
        "command_prefix": list(s.command_prefix),
        "sglang_source": None if sim else s.sglang_source,
        "model_path": variant.model_path_spec,
        "tp_size": variant.tp_size,
        "args": [[k, v] for k, v in variant.args.items()],
        "env": dict(sorted(variant.env.items())),
        "hicache": variant.hicache.model_dump() if variant.hicache is not None else None,
        "sim": ({**(variant.sim or SimOptions()).model_dump(), "faults": variant.all_sim_faults()}
                if sim else None),
    }
    return hashlib.sha256(_canonical(payload).encode("utf-8")).hexdigest()


def scenario_hash(text: str | bytes) -> str:
    """sha256 of the scenario file's text."""
    if isinstance(text, str):
        text = text.encode("utf-8")
    return hashlib.sha256(text).hexdigest()


def json_schema() -> dict:
    """JSON Schema of the scenario format (``harness schema``)."""
    schema = Scenario.model_json_schema(mode="validation")
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "HiCache harness scenario"
    schema["required"] = [r for r in schema.get("required", []) if r != "name"]
    return schema

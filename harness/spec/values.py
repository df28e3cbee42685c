"""Scenario value types: token sizes, checks, thresholds, names, flags and env values.

Imports nothing else of the harness but the scenario's errors, its numbers
(`harness.spec.numbers`) and the simulator's fault names: workload configs and the scenario models both build on it.
"""

from __future__ import annotations

import ipaddress
import math
import re
import shlex
from dataclasses import dataclass
from typing import Annotated, Any, Callable, TypeVar
from urllib.parse import urlsplit

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    PlainSerializer,
    PlainValidator,
    WithJsonSchema,
)

from harness.sim.faults import fault_problem
from harness.spec.errors import field_error
from harness.spec.numbers import MAX_POOL_FRACTION, MAX_TOKENS, show_value

T = TypeVar("T")


def as_validator(parse: Callable[[Any], T]) -> Callable[[Any], T]:
    """A parser that raises ValueError, as a pydantic validator: its message becomes the field's
    error line (every text-valued type below parses through its own ``parse``)."""

    def validate(v: Any) -> T:
        try:
            return parse(v)
        except ValueError as e:
            raise field_error(str(e)) from None

    return validate


_NAME_RE = re.compile(r"^\w[\w.+@-]*$")
_SCENARIO_NAME_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")


def _check_name(v: str) -> str:
    if not v:
        raise field_error("must not be empty")
    if len(v) > 100:
        raise field_error(f"too long ({len(v)} characters; at most 100)")
    if not _NAME_RE.match(v):
        raise field_error(
            f"{v!r} is not a valid name: use letters, digits, '_' and (after the first "
            "character) '.', '+', '@', '-'; no '/', ':', spaces or control characters"
        )
    return v


def _check_scenario_name(v: str) -> str:
    if not v or not _SCENARIO_NAME_RE.match(v) or len(v) > 100:
        raise field_error(
            f"{v!r} is not a valid scenario name: use [A-Za-z0-9_.-], not starting with '.' "
            "or '-' (it names the results folder)"
        )
    return v


Name = Annotated[str, AfterValidator(_check_name)]
ScenarioName = Annotated[str, AfterValidator(_check_scenario_name)]


def _check_fault(v: str) -> str:
    problem = fault_problem(v)
    if problem:
        raise field_error(problem)
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
            raise ValueError(f'expected a token count or "<fraction>x pool", got {v!r}')
        if isinstance(v, float) and v.is_integer():
            v = int(v)
        if isinstance(v, int):
            return cls(tokens=cls._checked_tokens(v, v))
        if isinstance(v, str):
            m = cls._ABS.match(v)
            if m:
                return cls(tokens=cls._checked_tokens(int(m.group(1)) * (1000 if m.group(2) else 1), v))
            m = cls._POOL.match(v)
            if m:
                f = float(m.group(1))
                if not 0 < f <= MAX_POOL_FRACTION:
                    raise ValueError(f"the pool fraction must be > 0 and <= {MAX_POOL_FRACTION:g}, got {v!r}")
                return cls(pool_fraction=f)
        raise ValueError(
            f'expected a whole token count (e.g. 8000 or "8k") or "<fraction>x pool" (e.g. "0.4x pool"), got {v!r}'
        )

    @staticmethod
    def _checked_tokens(n: int, written: Any) -> int:
        if n < 1:
            raise ValueError(f"must be >= 1 token, got {written!r}")
        if n > MAX_TOKENS:
            raise ValueError(f"{written!r} tokens is more than any model's context (limit {MAX_TOKENS:,})")
        return n

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
        return f"{fmt_num(self.pool_fraction)}x pool"

    def to_json(self) -> int | str:
        return self.tokens if self.tokens is not None else str(self)


def resolve_tokens(value: Any, pool_tokens: int | None) -> int:
    """Tokens of a scenario size (a ``TokenSize``, an int, ``"8k"`` or ``"0.4x pool"``) on a server
    whose GPU pool holds ``pool_tokens``. The one place sizes are resolved; 0 stays 0 (e.g. no churn)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value == 0:
        return 0
    return TokenSize.parse(value).resolve(pool_tokens)


TOKEN_SIZE_UNIT = f"tokens, or 0..{MAX_POOL_FRACTION:g}x pool"
TokenSizeT = Annotated[
    TokenSize,
    PlainValidator(as_validator(TokenSize.parse)),
    PlainSerializer(lambda t: t.to_json()),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "integer", "minimum": 1, "maximum": MAX_TOKENS},
                {"type": "string", "pattern": r"^\s*(\d+\s*[kK]?|(\d+(\.\d*)?|\.\d+)\s*x\s*pool)\s*$"},
            ],
            "minimum": 1,
            "maximum": MAX_TOKENS,
            "unit": TOKEN_SIZE_UNIT,
            "description": 'tokens (int, or "8k") or a fraction of the GPU pool: "0.4x pool"',
        }
    ),
]


def _size_or_zero(v: Any) -> TokenSize:
    """A `TokenSize`, or 0 (the key's "none": ``quality.churn_tokens: 0`` turns churn off)."""
    if type(v) is int and v == 0:
        return TokenSize(tokens=0)
    return TokenSize.parse(v)


# A token size that may also be 0 (off): quality.churn_tokens (docs/quality.md: parity then
# NOT_EXERCISED, every re-ask a GPU hit).
TokenSizeOrZeroT = Annotated[
    TokenSize,
    PlainValidator(as_validator(_size_or_zero)),
    PlainSerializer(lambda t: t.to_json()),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "integer", "minimum": 0, "maximum": MAX_TOKENS},
                {"type": "string", "pattern": r"^\s*(\d+\s*[kK]?|(\d+(\.\d*)?|\.\d+)\s*x\s*pool)\s*$"},
            ],
            "minimum": 0,
            "maximum": MAX_TOKENS,
            "unit": TOKEN_SIZE_UNIT,
            "description": 'tokens (int, or "8k"; 0: none) or a fraction of the GPU pool: "0.4x pool"',
        }
    ),
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
            raise ValueError(f'expected a string like "on-r1: metric >= 2", got {text!r}')
        m = cls._RE.match(text)
        if not m:
            raise ValueError(
                f'cannot parse check {text!r}: expected "[variant:] metric op value" with op one of {", ".join(_OPS)}'
            )
        raw = m.group("value").strip()
        if len(raw) >= 2 and raw[0] == raw[-1] and raw[0] in "'\"":
            value: float | str = raw[1:-1]
        else:
            value = _parse_number(raw)
            if value is None:
                if not re.match(r"^[A-Za-z_][\w.-]*$", raw):
                    raise ValueError(
                        f"cannot parse the value {raw!r} of check {text!r}: expected a "
                        "number (2, 1.5, 5%, 2x) or a word (PASS)"
                    )
                value = raw
        if isinstance(value, str) and m.group("op") not in ("==", "!="):
            raise ValueError(f"check {text!r}: {m.group('op')} needs a number, got {raw!r}")
        return cls(
            text=text.strip(), variant=m.group("variant"), metric=m.group("metric"), op=m.group("op"), value=value
        )

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


CheckT = Annotated[
    Check,
    PlainValidator(as_validator(Check.parse)),
    PlainSerializer(lambda c: c.text),
    WithJsonSchema({"type": "string", "description": "[variant:] metric op value, op in >= <= > < == !="}),
]


@dataclass(frozen=True)
class Gate:
    """A metric that gates a comparison: ``[variant:] workload[.phase].metric`` or
    ``[variant:] quality.parity`` (without a variant: in every variant)."""

    text: str
    variant: str | None
    metric: str  # "workload.metric", "workload.phase.metric" or "quality.parity"

    _RE = re.compile(r"^\s*(?:(?P<variant>[^\s:]+)\s*:\s*)?(?P<metric>[A-Za-z_][\w-]*(\.[A-Za-z_][\w-]*){1,2})\s*$")

    @classmethod
    def parse(cls, text: Any) -> "Gate":
        if isinstance(text, Gate):
            return text
        m = cls._RE.match(text) if isinstance(text, str) else None
        if not m:
            raise ValueError(f'expected "[variant:] workload[.phase].metric" or "quality.parity", got {text!r}')
        return cls(text.strip(), m.group("variant"), m.group("metric"))

    def __str__(self) -> str:
        return self.text

    def names(self, variant: str, workload: str, phase: str | None, metric: str) -> bool:
        """Whether this gate names the row ``variant`` / ``workload`` / ``phase`` / ``metric``
        (a two-part gate, ``workload.metric``, names the metric in every phase)."""
        if self.variant is not None and self.variant != variant:
            return False
        parts = self.metric.split(".")
        if len(parts) == 2:
            return workload == parts[0] and metric == parts[1]
        return (workload, phase, metric) == tuple(parts)


GateT = Annotated[
    Gate,
    PlainValidator(as_validator(Gate.parse)),
    PlainSerializer(lambda g: g.text),
    WithJsonSchema({"type": "string", "description": "[variant:] workload[.phase].metric, or quality.parity"}),
]


@dataclass(frozen=True)
class Threshold:
    """A relative change that counts as real, written ``"5%"`` (``fraction`` = 0.05)."""

    fraction: float
    text: str

    @classmethod
    def parse(cls, v: Any) -> "Threshold":
        """``"5%"`` → Threshold(0.05, "5%"); ValueError for anything else."""
        if isinstance(v, Threshold):
            return v
        if isinstance(v, str):
            m = re.match(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*%\s*$", v)
            if m and float(m.group(1)) > 0:
                return cls(float(m.group(1)) / 100.0, v.strip())
        raise ValueError(f'expected a percentage > 0 like "5%", got {v!r}')

    def __str__(self) -> str:
        return self.text


ThresholdT = Annotated[
    Threshold,
    PlainValidator(as_validator(Threshold.parse)),
    PlainSerializer(lambda t: t.text),
    WithJsonSchema({"type": "string", "pattern": r"^\s*(\d+(\.\d*)?|\.\d+)\s*%\s*$"}),
]


def _arg_value(v: Any) -> Any:
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, list) and all(isinstance(x, (int, float, str)) and not isinstance(x, bool) for x in v):
        return list(v)
    raise field_error(
        f"expected a flag value: a string, a number, true (bare flag), false/null (omit) or a "
        f"list of strings/numbers, got {show_value(v)}"
    )


ArgValue = Annotated[
    Any,
    PlainValidator(_arg_value),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "string"},
                {"type": "number"},
                {"type": "boolean"},
                {"type": "null"},
                {"type": "array", "items": {"type": ["string", "number"]}},
            ]
        }
    ),
]
ArgsDict = Annotated[
    dict[str, ArgValue],
    WithJsonSchema(
        {
            "type": "object",
            "propertyNames": {"pattern": "^--"},
            "additionalProperties": {
                "anyOf": [
                    {"type": "string"},
                    {"type": "number"},
                    {"type": "boolean"},
                    {"type": "null"},
                    {"type": "array", "items": {"type": ["string", "number"]}},
                ]
            },
            "description": "sglang flags in order: true = bare flag, false/null = omitted",
        }
    ),
]


def _env_value(v: Any) -> str | None:
    if v is None or isinstance(v, str):
        return v
    if isinstance(v, bool):
        raise field_error(
            f'environment values are strings: write "{"1" if v else "0"}" or '
            f'"{str(v).lower()}" in quotes, got {str(v).lower()}'
        )
    if isinstance(v, (int, float)):
        return fmt_num(v)
    raise field_error(f"expected a string, got {show_value(v)}")


EnvValue = Annotated[
    Any,
    PlainValidator(_env_value),
    WithJsonSchema({"anyOf": [{"type": "string"}, {"type": "number"}, {"type": "null"}]}),
]
EnvDict = dict[str, EnvValue]


def _gpu_value(v: Any) -> Any:
    if v == "auto" or isinstance(v, bool):
        return v
    raise field_error(f"expected auto, true or false, got {v!r}")


GpuMode = Annotated[Any, PlainValidator(_gpu_value), WithJsonSchema({"enum": ["auto", True, False]})]


def fmt_num(v: Any) -> str:
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    return str(v)


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
    "--hicache-storage-prefetch-policy": "set hicache.storage.prefetch_policy",
    "--hicache-storage-backend-extra-config": "set hicache.storage (prefetch_threshold, ..., extra_config)",
}
_FLAG_RE = re.compile(r"^--[A-Za-z0-9][A-Za-z0-9_.-]*$")
_ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def flag_problem(flag: str) -> str | None:
    if not _FLAG_RE.match(flag):
        return f"{flag!r} is not a flag: flags start with '--' (e.g. --max-total-tokens)"
    if flag in _RESERVED_ARGS:
        return f"{flag} is set by the harness: {_RESERVED_ARGS[flag]}"
    if flag.startswith("--sim-"):
        return f"{flag} is a simulator knob: set it under server.sim"
    return None


def env_problem(name: str) -> str | None:
    if not _ENV_NAME_RE.match(name):
        return f"{name!r} is not a valid environment variable name ([A-Za-z_][A-Za-z0-9_]*)"
    return None


_HOST_LABEL = re.compile(r"^(?!-)[A-Za-z0-9-]{1,63}(?<!-)$")


def host_problem(host: str) -> str | None:
    """Why ``host`` cannot be a server address (an IP address or a DNS name), or None."""
    try:
        ipaddress.ip_address(host.strip("[]"))
        return None
    except ValueError:
        pass
    labels = host.rstrip(".").split(".")
    if labels and labels[-1].isdigit():  # 256.256.256.256: no name ends in a number, and no address
        return f"{host!r} is not an IP address (each of its four numbers is 0-255) nor a host name"
    if len(host) <= 253 and labels and all(_HOST_LABEL.match(label) for label in labels):
        return None
    return f"{host!r} is not a host name or IP address (e.g. 127.0.0.1, localhost, gpu-node-3)"


def url_problem(url: str) -> str | None:
    """Why ``url`` cannot be an external server's base URL (``http[s]://host[:port][/prefix]``),
    or None. Credentials in the URL, queries and fragments are refused: they would end up in
    folder names, logs and reports, and sglang's API takes none of them."""
    try:
        u = urlsplit(url)
        port = u.port
    except ValueError as exc:
        return f"{url!r} is not a URL ({exc})"
    if u.scheme not in ("http", "https") or not u.hostname:
        return f"{url!r} is not an http:// or https:// URL with a host (e.g. http://gpu-node-3:30000)"
    if u.username is not None or u.password is not None:
        return "credentials in the URL are not supported (they would be stored with the run)"
    if u.query or u.fragment or url.rstrip().endswith(("?", "#")):
        return f"{url!r}: a base URL takes no query or fragment"
    if port == 0:
        return f"{url!r}: port 0 is not a server port"
    return host_problem(u.hostname)


def parse_extra_args(text: str) -> dict[str, Any]:
    """``"--a 1 --flag --b x"`` → ``{"--a": "1", "--flag": True, "--b": "x"}`` (shell-like split)."""
    try:
        tokens = shlex.split(text or "")
    except ValueError as exc:
        raise field_error(f"cannot split extra_args: {exc}") from None
    out: dict[str, Any] = {}
    i = 0
    while i < len(tokens):
        flag = tokens[i]
        if not flag.startswith("--"):
            raise field_error(f"extra_args: expected a --flag, got {flag!r}")
        if i + 1 < len(tokens) and not tokens[i + 1].startswith("--"):
            out[flag] = tokens[i + 1]
            i += 2
        else:
            out[flag] = True
            i += 1
    return out


class ScenarioModel(BaseModel):
    """Base of every scenario block: unknown keys are errors, numbers never become strings silently."""

    model_config = ConfigDict(extra="forbid", coerce_numbers_to_str=True, allow_inf_nan=False, validate_default=False)

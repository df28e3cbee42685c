"""The server's control-plane answers, checked where they enter the harness.

One typed reader for ``/get_server_info`` (newer sglang: ``/server_info``): :meth:`ServerInfo.parse`
takes the decoded answer and returns the fields the harness uses, each type- and range-checked, or
raises :class:`ServerAnswerError` with a reason. Also here: strict JSON (``loads_strict``: NaN and
Infinity are not JSON and are refused) and body reads bounded in bytes and time, shared with the
streaming client and the ``/health_generate`` and ``/metrics`` readers.

``ServerAnswerError`` deliberately is not a ``ValueError``: the CLI maps ValueError to "bad
input" (exit 2), and a broken server is neither bad input nor a harness bug. The runner turns it
into a variant failure with cause ``bad_server_answer`` (:data:`BAD_SERVER_ANSWER`) and the
reason, and goes on to the next variant.

What sglang returns (0.5.x ``http_server.get_server_info``): ``dataclasses.asdict(server_args)``
(``context_length`` may be null, ``page_size``, ``enable_hierarchical_cache``, ``hicache_*``,
``max_mamba_cache_size``) merged with the scheduler's info (``max_total_num_tokens``,
``max_req_input_len``, ``context_len``), plus ``internal_states`` and ``version``. The simulator adds
``simulated`` and ``host_pool_tokens``. Unknown keys are ignored; a known key that is absent or
null reads as None (unknown).
"""

from __future__ import annotations

import asyncio
import http.client
import json
import math
import socket
import ssl
import time
from dataclasses import dataclass, field
from typing import Any, Mapping
from urllib.parse import urlsplit

import httpx

from harness.core import bounds
from harness.core.errors import Broken
from harness.store.secrets import remember_secret, scrub

BAD_SERVER_ANSWER = "bad_server_answer"
# A variant's cause: an attached server whose identity (version, arguments, HiCache settings,
# pools) changed between the run's attach and the variant, or during it (`ServerInfo.changes`).
SERVER_CHANGED = "server_changed"
# /get_server_info keys that change while a server runs (load, throughput): not its identity
VOLATILE_INFO_KEYS = frozenset({"internal_states"})

INFO_PATHS = ("/get_server_info", "/server_info")
MAX_INFO_BYTES = bounds.SERVER_INFO_BYTES  # a real answer is ~20 KB
MAX_PROBE_BYTES = bounds.PROBE_BODY_BYTES  # bodies read only to keep the connection (health, flush, errors)
MAX_TOKENS = 1 << 32  # no pool or context holds 4 billion tokens: beyond is garbage
MAX_STRING = 256
# Ask for an uncompressed body: a compressed one could expand far past any byte bound in one read.
IDENTITY = {"accept-encoding": "identity"}

# The API key of each running server given one (``server.api_key_env``, harness/run/external.py), by
# base URL: every request to that server — probes, /get_server_info, /generate, /metrics,
# /flush_cache, health — carries ``Authorization: Bearer <key>`` (`request_headers`). Held in this
# process only: no record, status, manifest or log holds it (the run's redactor scrubs it too).
_API_KEYS: dict[str, str] = {}


def use_api_key(base_url: str, key: str) -> None:
    """Send ``key`` with every request to the server at ``base_url`` (and paths below it); it is
    scrubbed from whatever a server sends back (`harness.store.secrets.scrub`)."""
    _API_KEYS[base_url.rstrip("/")] = key
    remember_secret(key)


def auth_headers(url: str) -> dict[str, str]:
    """``{"authorization": "Bearer <key>"}`` when ``url`` is on a server given an API key, else {}."""
    for base, key in _API_KEYS.items():
        if url == base or url.startswith(base + "/"):
            return {"authorization": f"Bearer {key}"}
    return {}


def request_headers(url: str) -> dict[str, str]:
    """The headers of every control request to ``url``: `IDENTITY` and `auth_headers`."""
    return {**IDENTITY, **auth_headers(url)}


class ServerAnswerError(Broken):
    """A server answered, but not with something the harness can use. `reason` says what was
    wrong (one line, clipped)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


# --------------------------------------------------------------------------- strict JSON


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


_STRICT = json.JSONDecoder(parse_constant=_reject_constant)


def loads_strict(data: bytes | bytearray | str) -> Any:
    """JSON (RFC 8259) → Python. NaN, Infinity and -Infinity (which Python's json accepts by
    default) and invalid UTF-8 raise ValueError, like any other malformed JSON. Faster than
    ``json.loads(bytes)`` (no encoding detection)."""
    if not isinstance(data, str):
        data = data.decode("utf-8")
    try:
        return _STRICT.decode(data)
    except RecursionError:  # [[[[... deeper than the interpreter's limit: malformed, not a crash
        raise ValueError("JSON nested too deep to read") from None


MAX_JSON_DEPTH = bounds.JSON_DEPTH  # a server info answer nests ~4 levels; deeper is not sglang's


def json_depth_over(obj: Any, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether a decoded JSON value nests deeper than ``limit`` (iterative: no recursion)."""
    stack = [(obj, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > limit:
            return True
        if isinstance(node, dict):
            stack.extend((v, depth + 1) for v in node.values())
        elif isinstance(node, list):
            stack.extend((v, depth + 1) for v in node)
    return False


def show(value: Any, limit: int = 60) -> str:
    """A value for an error message: repr, known secrets scrubbed, clipped."""
    text = scrub(repr(value))
    return text if len(text) <= limit else text[: limit - 3] + "..."


def json_type(value: Any) -> str:
    """The JSON name of a decoded value's type (for "is a list, not an object")."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "list"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


# --------------------------------------------------------------------------- bounded reads


def check_identity(content_encoding: str | None) -> None:
    """ServerAnswerError unless an answer's ``content-encoding`` is identity (what was asked)."""
    enc = (content_encoding or "identity").strip().lower()
    if enc not in ("", "identity"):
        raise ServerAnswerError(f"compressed answer (content-encoding: {show(enc, 30)}) though identity was asked")


class BodyBounds:
    """One answer's body as it is read: at most ``limit`` bytes, within ``deadline_s`` seconds in
    all from when it is made (a per-read timeout lets a trickling server pass). `add` each chunk;
    over either bound it raises ServerAnswerError. The body so far is ``buf``."""

    def __init__(self, limit: int, deadline_s: float | None = None) -> None:
        self.limit, self.deadline_s = limit, deadline_s
        self._end = None if deadline_s is None else time.monotonic() + deadline_s
        self.buf = bytearray()

    def add(self, chunk: bytes) -> None:
        self.buf += chunk
        if len(self.buf) > self.limit:
            raise ServerAnswerError(f"answer longer than {self.limit} bytes")
        if self._end is not None and time.monotonic() > self._end:
            raise ServerAnswerError(f"answer took longer than {self.deadline_s:g} s")


def read_limited(resp: httpx.Response, limit: int, deadline_s: float | None = None) -> bytes:
    """The body of a streamed (``client.stream(...)``) response, within `BodyBounds`; the caller's
    ``with`` then drops the connection when a bound is passed."""
    check_identity(resp.headers.get("content-encoding"))
    body = BodyBounds(limit, deadline_s)
    for chunk in resp.iter_bytes():  # identity only (checked above)
        body.add(chunk)
    return bytes(body.buf)


async def aread_limited(resp: httpx.Response, limit: int, deadline_s: float | None = None) -> bytes:
    """:func:`read_limited` for an async streamed response."""
    check_identity(resp.headers.get("content-encoding"))
    body = BodyBounds(limit, deadline_s)
    async for chunk in resp.aiter_bytes():  # identity only (checked above)
        body.add(chunk)
    return bytes(body.buf)


class NoAnswer(Broken):
    """A control request that got no (complete) answer: nothing listening, reset, a time bound
    passed, a malformed head. `reason`: one line."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class _Deadline:
    """A socket whose every receive and send ends by ``deadline`` (a monotonic instant), each
    bounded by ``per_op_s`` too: a server that drips its head one byte a second passes any
    per-read timeout, never this one."""

    deadline: float = math.inf
    per_op_s: float = 10.0

    def _arm(self) -> None:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("the answer's time bound passed")
        self.settimeout(min(self.per_op_s, left))

    def recv_into(self, buffer, nbytes=0, flags=0):  # type: ignore[override]
        self._arm()
        return super().recv_into(buffer, nbytes, flags)

    def recv(self, bufsize, flags=0):  # type: ignore[override]
        self._arm()
        return super().recv(bufsize, flags)

    def sendall(self, data, flags=0):  # type: ignore[override]
        self._arm()
        return super().sendall(data, flags)


class _DeadlineSocket(_Deadline, socket.socket):
    pass


class _DeadlineSSLSocket(_Deadline, ssl.SSLSocket):
    pass


class DeadlineConnection(http.client.HTTPConnection):
    """A stdlib HTTP/1.1 connection (no proxy from the environment) whose requests end within a
    total time: `start(deadline_s)` before each request bounds everything it reads — the status
    line, each header line, the body — to that many seconds from now, each socket operation to
    ``timeout``. http.client itself bounds a head to 100 lines of 64 KiB."""

    def __init__(self, host: str, port: int | None, timeout: float) -> None:
        super().__init__(host, port, timeout=timeout)
        self._deadline = math.inf

    def start(self, deadline_s: float) -> None:
        self._deadline = time.monotonic() + deadline_s
        if isinstance(self.sock, _Deadline):
            self.sock.deadline = self._deadline

    def connect(self) -> None:
        left = self._deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("the answer's time bound passed")
        raw = socket.create_connection((self.host, self.port), min(self.timeout, left))
        sock = _DeadlineSocket(fileno=raw.detach())
        sock.deadline, sock.per_op_s = self._deadline, self.timeout
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock = sock


class DeadlineHTTPSConnection(http.client.HTTPSConnection):
    """`DeadlineConnection` over TLS: the TLS socket is made from a `_DeadlineSocket`."""

    def __init__(self, host: str, port: int | None, timeout: float) -> None:
        ctx = ssl.create_default_context()
        ctx.sslsocket_class = _DeadlineSSLSocket
        super().__init__(host, port, timeout=timeout, context=ctx)
        self._deadline = math.inf

    start = DeadlineConnection.start

    def connect(self) -> None:
        DeadlineConnection.connect(self)  # type: ignore[arg-type]
        sock = self._context.wrap_socket(self.sock, server_hostname=self.host)  # type: ignore[attr-defined]
        sock.deadline, sock.per_op_s = self._deadline, self.timeout
        self.sock = sock


def open_connection(url: str, timeout_s: float) -> tuple[http.client.HTTPConnection, str]:
    """A `DeadlineConnection` (https: its TLS form) to ``url``'s host and the request path."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"not an http(s) URL: {url!r}")
    kind = DeadlineHTTPSConnection if parts.scheme == "https" else DeadlineConnection
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return kind(parts.hostname, parts.port, timeout_s), path  # type: ignore[return-value]


@dataclass(frozen=True)
class ControlAnswer:
    status: int
    content_type: str
    body: bytes  # b"" when not asked for (``keep_body=False``) or cut at the bound (``cut``)
    cut: bool = False


def control_request(
    method: str,
    url: str,
    *,
    deadline_s: float,
    limit: int = MAX_PROBE_BYTES,
    keep_body: bool = True,
    cut_ok: bool = False,
    per_op_s: float = 10.0,
) -> ControlAnswer:
    """One control request (server info, health, flush), its whole answer — head and body —
    within ``deadline_s`` seconds and ``limit`` body bytes, identity-encoded, with `request_headers`.
    NoAnswer when nothing (complete) came back in time; ServerAnswerError for a body over the
    bound (unless ``cut_ok``: then the status stands and ``cut`` says so) or a compressed one."""
    conn, path = open_connection(url, min(per_op_s, deadline_s))
    try:
        conn.start(deadline_s)
        try:
            conn.request(method, path, body=b"" if method == "POST" else None, headers=request_headers(url))
            resp = conn.getresponse()
            ctype = (resp.getheader("content-type") or "").split(";")[0].strip()
            if keep_body:
                check_identity(resp.getheader("content-encoding"))
            body = BodyBounds(limit)
            cut = False
            while chunk := resp.read1(1 << 16):
                try:
                    body.add(chunk)
                except ServerAnswerError:
                    if not cut_ok:
                        raise
                    cut = True
                    break
        except (OSError, http.client.HTTPException) as exc:
            raise NoAnswer(_no_answer_reason(exc)) from None
        return ControlAnswer(resp.status, ctype, bytes(body.buf) if keep_body and not cut else b"", cut)
    finally:
        conn.close()


def _no_answer_reason(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError) or isinstance(exc, socket.timeout):
        return "no complete answer in time"
    text = str(exc)
    return f"{type(exc).__name__}: {text[:120]}" if text else type(exc).__name__


def get_status(url: str, *, timeout_s: float = bounds.CONTROL_ANSWER_S) -> int:
    """GET ``url`` for its status code only (``/health_generate``), the whole answer within
    ``timeout_s``: the body is read up to :data:`MAX_PROBE_BYTES` (to keep the connection) and
    never kept; a longer body is not read further. NoAnswer when nothing answered in time."""
    return control_request("GET", url, deadline_s=timeout_s, keep_body=False, cut_ok=True).status


# --------------------------------------------------------------------------- /get_server_info


def _int_field(obj: Mapping[str, Any], key: str, lo: int, hi: int = MAX_TOKENS) -> int | None:
    v = obj.get(key)
    if v is None:
        return None
    if type(v) is not int or not lo <= v <= hi:
        raise ServerAnswerError(f"{key} is {show(v)}; expected an integer in [{lo}, {hi}]")
    return v


def _number_field(obj: Mapping[str, Any], key: str, lo: float, hi: float, *, lo_open: bool = False) -> float | None:
    v = obj.get(key)
    if v is None:
        return None
    ok = type(v) in (int, float) and math.isfinite(v) and (lo < v if lo_open else lo <= v) and v <= hi
    if not ok:
        bound = f"({lo:g}" if lo_open else f"[{lo:g}"
        raise ServerAnswerError(f"{key} is {show(v)}; expected a number in {bound}, {hi:g}]")
    return float(v)


def _bool_field(obj: Mapping[str, Any], key: str) -> bool | None:
    v = obj.get(key)
    if v is None:
        return None
    if type(v) is not bool:
        raise ServerAnswerError(f"{key} is {show(v)}; expected true or false")
    return v


def _str_field(obj: Mapping[str, Any], key: str) -> str | None:
    v = obj.get(key)
    if v is None:
        return None
    if type(v) is not str or len(v) > MAX_STRING:
        raise ServerAnswerError(f"{key} is {show(v)}; expected a string of at most {MAX_STRING} characters")
    return v


@dataclass(frozen=True)
class HiCacheSettings:
    """The server's resolved HiCache arguments (None: not reported)."""

    enabled: bool | None = None
    ratio: float | None = None
    size_gb: float | None = None
    write_policy: str | None = None
    mem_layout: str | None = None
    io_backend: str | None = None
    storage_backend: str | None = None


@dataclass(frozen=True)
class ServerInfo:
    """What the harness uses from ``/get_server_info``, checked; ``raw`` is the answer as returned
    (strict JSON, so safe to store as ``server_info.json``)."""

    raw: Mapping[str, Any] = field(repr=False, compare=False)
    version: str | None = None
    max_total_num_tokens: int | None = None  # the GPU KV pool, tokens
    max_req_input_len: int | None = None
    context_length: int | None = None  # resolved ``context_len``, else the ``context_length`` arg
    page_size: int | None = None
    max_mamba_cache_size: int | None = None
    host_pool_tokens: int | None = None  # the simulator reports it; sglang does not
    simulated: bool = False
    hicache: HiCacheSettings = HiCacheSettings()

    @classmethod
    def parse(cls, obj: Any) -> "ServerInfo":
        """A decoded answer → ServerInfo, or ServerAnswerError(reason) when it is not an object
        or a field the harness uses has the wrong type or an impossible value."""
        if not isinstance(obj, dict):
            raise ServerAnswerError(f"server info is a JSON {json_type(obj)}, not an object")
        if json_depth_over(obj):  # it is stored, scrubbed and walked: recursion must stay bounded
            raise ServerAnswerError(f"server info nests deeper than {MAX_JSON_DEPTH} levels")
        context = _int_field(obj, "context_len", 1)
        if context is None:
            context = _int_field(obj, "context_length", 1)
        max_req = _int_field(obj, "max_req_input_len", 1)
        if max_req is not None and context is not None and max_req > context:
            raise ServerAnswerError(f"max_req_input_len {max_req} exceeds the context length {context}")
        hicache = HiCacheSettings(
            enabled=_bool_field(obj, "enable_hierarchical_cache"),
            ratio=_number_field(obj, "hicache_ratio", 0.0, 1e4, lo_open=True),
            size_gb=_number_field(obj, "hicache_size", 0.0, 1e7),
            write_policy=_str_field(obj, "hicache_write_policy"),
            mem_layout=_str_field(obj, "hicache_mem_layout"),
            io_backend=_str_field(obj, "hicache_io_backend"),
            storage_backend=_str_field(obj, "hicache_storage_backend"),
        )
        return cls(
            raw=obj,
            version=_str_field(obj, "version"),
            max_total_num_tokens=_int_field(obj, "max_total_num_tokens", 1),
            max_req_input_len=max_req,
            context_length=context,
            page_size=_int_field(obj, "page_size", 1, 1 << 20),
            max_mamba_cache_size=_int_field(obj, "max_mamba_cache_size", 0),
            host_pool_tokens=_int_field(obj, "host_pool_tokens", 0),
            simulated=bool(_bool_field(obj, "simulated")),
            hicache=hicache,
        )

    def identity(self) -> dict[str, Any]:
        """What makes this server the one measured: every key of its answer but the volatile ones
        (`VOLATILE_INFO_KEYS`) — version, server arguments (HiCache included), pools."""
        return {k: v for k, v in self.raw.items() if k not in VOLATILE_INFO_KEYS}

    def changes(self, later: "ServerInfo | None") -> list[str]:
        """How ``later`` (the same server, asked again) differs in identity: ``key: before -> after``
        per changed key, sorted (values clipped and scrubbed); [] when it is the same server. A server
        that no longer answers is a change too."""
        if later is None:
            return ["/get_server_info: answered before, not now"]
        a, b = self.identity(), later.identity()
        out = []
        for k in sorted(set(a) | set(b), key=str):
            if json.dumps(a.get(k), sort_keys=True, default=str) != json.dumps(b.get(k), sort_keys=True, default=str):
                out.append(f"{k}: {show(a.get(k), 40)} -> {show(b.get(k), 40)}")
        return out

    @classmethod
    def parse_body(cls, body: bytes) -> "ServerInfo":
        """The HTTP body of a 200 answer → ServerInfo (strict JSON first)."""
        try:
            obj = loads_strict(body)
        except ValueError as exc:
            raise ServerAnswerError(f"server info is not valid JSON ({str(exc)[:120]})") from None
        return cls.parse(obj)


def fetch_server_info(base_url: str, timeout_s: float = bounds.CONTROL_ANSWER_S) -> ServerInfo | None:
    """``GET /get_server_info``, else ``/server_info``. None when neither answers 200 (unknown:
    callers fall back to the server log); the first 200 decides, and a bad one raises
    ServerAnswerError (each answer — head and body — bounded to :data:`MAX_INFO_BYTES` and
    ``timeout_s`` in all: `control_request`)."""
    base = base_url.rstrip("/")
    for path in INFO_PATHS:
        try:
            answer = control_request("GET", base + path, deadline_s=timeout_s, limit=MAX_INFO_BYTES)
        except NoAnswer:
            continue
        if answer.status == 200:
            return ServerInfo.parse_body(answer.body)
    return None


async def afetch_server_info(base_url: str, timeout_s: float = bounds.CONTROL_ANSWER_S) -> ServerInfo | None:
    """:func:`fetch_server_info` for asyncio code (in a worker thread: the loop keeps running)."""
    return await asyncio.to_thread(fetch_server_info, base_url, timeout_s)

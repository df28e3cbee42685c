"""The server's /metrics page: one kept-alive stdlib connection that reads it within its bounds
(`MetricsPage`), the Prometheus text parsed to the `sglang:*` series a sample keeps
(`parse_metrics_text`, `metric_key`), and which series are counters (`is_counter_key`)."""

from __future__ import annotations

import functools
import http.client
import logging
import math
import re
from typing import Mapping
from urllib.parse import urlsplit

from harness.core.errors import Broken
from harness.server.info import (
    BodyBounds,
    DeadlineConnection,
    DeadlineHTTPSConnection,
    ServerAnswerError,
    check_identity,
    request_headers,
)

log = logging.getLogger(__name__)

# Counter-like /metrics series: deltas over a phase are meaningful. Everything else is a gauge.
_COUNTER_SUFFIXES = ("_total", "_sum", "_count")


# ----------------------------------------------------------------------------- /metrics parsing


def metric_key(name: str, labels: Mapping[str, str]) -> str:
    """`name{a="x",b="y"}` with labels sorted; bare `name` without labels."""
    if not labels:
        return name
    inner = ",".join(f'{k}="{labels[k]}"' for k in sorted(labels))
    return f"{name}{{{inner}}}"


# One sample line of the Prometheus text format: name, optional {labels}, value, optional timestamp.
_SAMPLE_LINE = re.compile(
    r'([a-zA-Z_:][a-zA-Z0-9_:]*)[ \t]*(?:\{((?:[^"}]|"(?:[^"\\]|\\.)*")*)\})?[ \t]+(\S+)(?:[ \t]+-?[0-9]+)?[ \t]*'
)
_LABEL = re.compile(r'[ \t]*([a-zA-Z_][a-zA-Z0-9_]*)[ \t]*=[ \t]*"((?:[^"\\]|\\.)*)"[ \t]*(?:,|$)')
_UNESCAPE = re.compile(r"\\(.)")
_SKIPPED_SUFFIXES = ("_bucket", "_created", "_gsum", "_gcount")


def _unescape(value: str) -> str:
    if "\\" not in value:
        return value
    return _UNESCAPE.sub(lambda m: "\n" if m.group(1) == "n" else m.group(1), value)


def parse_metrics_text(text: str, prefix: str = "sglang:") -> dict[str, float]:
    """Prometheus text exposition → {name with labels: value} for series whose name starts with
    `prefix`. Histogram buckets and `_created` timestamps are dropped; `_sum`/`_count` are kept.

    A reader of only the lines it keeps (no parser objects per family): the same keys and values
    as prometheus_client's parser (label values unescaped, labels sorted by `metric_key`), at a
    fraction of its CPU (the sampler's cost per tick is mostly this: docs/client-fidelity.md).
    sglang 0.5.17's /metrics is ~1,600 lines, most of them the buckets of its ~37 histograms, and
    the same series every reading; so a dropped line is recognised by its name alone (and the
    rest of that series' buckets skipped in one regex match, `_bucket_run`), and a kept series
    seen before (`_SERIES_KEYS`: the line up to its value, as the server wrote it) takes its
    key from there, with only its value read. A new series goes through the line's regular
    expression. (Every line through the regex: 8 ms a reading on the 2-core box, 1.3-1.6 % of a
    core at 0.5 s on the H200.) A kept line that is not a sample raises ValueError."""
    out: dict[str, float] = {}
    known = _SERIES_KEYS
    pos, n = 0, len(text)
    while pos < n:
        end = text.find("\n", pos)
        if end < 0:
            end = n
        start, pos = pos, end + 1
        if not text.startswith(prefix, start):
            continue  # comments, other prefixes, blank lines
        line = text[start:end]
        if line.endswith("\r"):
            line = line[:-1]
        brace = line.find("{")
        if brace > 0:
            series_end = line.rfind("}") + 1
            name = line[:brace].rstrip(" \t")
        else:
            series_end = brace = len(line.split(None, 1)[0])
            name = line[:brace]
        if name.endswith(_SKIPPED_SUFFIXES):
            if name.endswith("_bucket"):  # skip the rest of this series' buckets in one match
                pos = _bucket_run(name).match(text, pos).end()
            continue
        if series_end > 0:
            key = known.get(line[:series_end])
            if key is not None:
                tail = _VALUE_PART.fullmatch(line, series_end)
                if tail is not None:
                    try:
                        out[key] = float(tail.group(1))
                        continue
                    except ValueError:
                        pass  # the full reading below raises with the line
        key, value = _read_sample_line(line)
        out[key] = value
        if series_end > 0 and len(known) < _SERIES_KEYS_MAX:
            known[line[:series_end]] = key
    return out


@functools.lru_cache(maxsize=256)
def _bucket_run(name: str) -> re.Pattern[str]:
    """The lines that follow one of ``name``'s bucket lines and are buckets of the same name (the
    same name rule as `parse_metrics_text`: the name ends where a non-name character starts):
    matched by the regex engine, not line by line in Python (zero lines when the next line is
    something else)."""
    return re.compile(rf"(?:{re.escape(name)}(?![a-zA-Z0-9_:])[^\n]*(?:\n|$))*")


_SERIES_KEYS: dict[str, str] = {}  # a kept line up to its value, as written → its key (`metric_key`)
_SERIES_KEYS_MAX = 1 << 16  # series names and label sets of one server: hundreds; a bound anyway
_VALUE_PART = re.compile(r"[ \t]+(\S+)(?:[ \t]+-?[0-9]+)?[ \t]*")  # what `_SAMPLE_LINE` ends with


def _read_sample_line(line: str) -> tuple[str, float]:
    """One kept sample line → (its key, its value); ValueError naming the line when it is none."""
    m = _SAMPLE_LINE.fullmatch(line)
    if m is None:
        raise ValueError(f"not a Prometheus sample line: {line[:120]!r}")
    name, inner, value = m.groups()
    labels: dict[str, str] = {}
    if inner and inner.strip():
        pos = 0
        while pos < len(inner):
            lm = _LABEL.match(inner, pos)
            if lm is None or lm.end() == pos:
                raise ValueError(f"bad labels in /metrics line: {line[:120]!r}")
            labels[lm.group(1)] = _unescape(lm.group(2))
            pos = lm.end()
    try:
        return metric_key(name, labels), float(value)
    except ValueError:
        raise ValueError(f"bad value in /metrics line: {line[:120]!r}") from None


def is_counter_key(key: str) -> bool:
    name = key.split("{", 1)[0]
    return name.endswith(_COUNTER_SUFFIXES)


MAX_METRICS_BYTES = 8 << 20  # sglang's /metrics is ~100s of KB, histogram buckets included


def checked_metric_values(values: dict[str, float]) -> dict[str, float]:
    """A parsed /metrics answer, checked before it becomes a sample: no `sglang:` series at all
    (an error page served as 200, garbage) or a counter that is not a finite number >= 0 (every
    delta over it would be garbage) raises ValueError with the reason; a non-finite gauge (legal
    in Prometheus text, e.g. a quantile of nothing) is dropped."""
    if not values:
        raise ValueError("no sglang: series in the answer")
    out: dict[str, float] = {}
    for key, v in values.items():
        if math.isfinite(v) and (v >= 0 or not is_counter_key(key)):
            out[key] = v
        elif is_counter_key(key):
            raise ValueError(f"counter {key[:120]} is {v}")
    return out


class MetricsUnavailable(Broken):
    """/metrics did not answer with a page: not up yet, refused, metrics off (a status), the
    connection dropped. Expected while a server starts or stops: counted, not logged."""


class MetricsPage:
    """GET ``{base_url}/metrics`` over one kept-alive HTTP/1.1 connection (stdlib `http.client`,
    no proxy from the environment): the body, at most ``limit`` bytes within ``deadline_s`` in
    all (each socket operation bounded by ``timeout_s``), identity-encoded. Over a bound, or
    compressed: `ServerAnswerError`; no answer or not 200: `MetricsUnavailable`. For sglang's
    ~190 KB page this is a third of httpx's CPU (0.35 against 1.1 ms on the 2-core box), and the
    sampler reads it every 0.5 s. A kept connection the server has closed meanwhile is reopened
    once, at once. Used by one thread at a time."""

    def __init__(self, base_url: str, timeout_s: float, limit: int, deadline_s: float) -> None:
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {base_url!r}")
        self.base_url = base_url
        self._https = parts.scheme == "https"
        self._host, self._port = parts.hostname, parts.port
        self._path = (parts.path.rstrip("/") or "") + "/metrics"
        self.timeout_s, self.limit, self.deadline_s = timeout_s, limit, deadline_s
        self._conn: DeadlineConnection | DeadlineHTTPSConnection | None = None

    def _open(self) -> http.client.HTTPConnection:
        kind = DeadlineHTTPSConnection if self._https else DeadlineConnection
        return kind(self._host, self._port, self.timeout_s)

    def fetch(self) -> bytearray:
        reused = self._conn is not None
        try:
            try:
                return self._get()
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
                if not reused:
                    raise
                self.close()  # the server closed the idle connection: once more on a new one
                return self._get()
        except (ServerAnswerError, MetricsUnavailable):
            self.close()
            raise
        except (OSError, http.client.HTTPException) as e:
            self.close()
            raise MetricsUnavailable(f"{type(e).__name__}: {e}") from None
        except BaseException:
            self.close()
            raise

    def _get(self) -> bytearray:
        if self._conn is None:
            self._conn = self._open()
        self._conn.start(self.deadline_s)  # the head too: a dripping head is bounded
        body = BodyBounds(self.limit, self.deadline_s)
        self._conn.request("GET", self._path, headers=request_headers(self.base_url))
        resp = self._conn.getresponse()
        if resp.status != 200:
            resp.read(64 << 10)
            self.close()
            raise MetricsUnavailable(f"/metrics answered {resp.status}")
        check_identity(resp.getheader("content-encoding"))
        while chunk := resp.read1(1 << 16):
            body.add(chunk)
        resp.read()  # b"" by now; it marks the answer finished, so the connection can be reused
        if resp.will_close:
            self.close()
        return body.buf  # not copied: ~190 KB a reading

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

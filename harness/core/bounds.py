"""Bounds by class: the size, depth and time limit of every read the harness makes, declared here
once and listed in docs/security.md — from servers (HTTP heads, bodies, chunks, lines, JSON
depth) and from disk (model configs, datasets, scenario files, baselines).

Each constant is the bound its reader enforces; the readers take it from here (http1's head and
size bounds, the client's line and flush bounds, server info's body, probe and depth bounds, the
trace span, the model config's size and shape). Scenario files have theirs beside their parser
(harness/core/yaml_lines.py: MAX_BYTES, MAX_NODES, MAX_DEPTH).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from harness.core.errors import BadInput

# ----------------------------------------------------------------------------- from servers
HTTP_HEAD_BYTES = 64 << 10  # a response's status line and headers (http1.MAX_HEAD_BYTES)
HTTP_SIZE_DIGITS = 15  # a chunk size or content-length: at most 15 digits, no sign (http1)
STREAM_LINE_BYTES = 1 << 20  # one SSE line (client.MAX_LINE_BYTES)
SERVER_INFO_BYTES = 4 << 20  # /get_server_info's body (info.MAX_INFO_BYTES)
PROBE_BODY_BYTES = 64 << 10  # health, flush and error bodies, read only to keep the connection
CONTROL_ANSWER_S = 10.0  # a control answer, head and body, in all (info.control_request)
FLUSH_ANSWER_S = 30.0  # one /flush_cache answer in all (client.FLUSH_S)
JSON_DEPTH = 64  # a server info answer's nesting (info.MAX_JSON_DEPTH)

# ----------------------------------------------------------------------------- from disk
MODEL_CONFIG_BYTES = 4 << 20  # a model's config.json (real ones are a few KB)
MAX_LAYERS = 4096  # num_hidden_layers of a model config (the largest real models have ~130)
MAX_HIDDEN = 1 << 20  # hidden_size, heads, head_dim: beyond is no model
TRACE_SPAN_DAYS = 7  # a trace's last timestamp after its first (datasets.MAX_TRACE_SPAN_MS)
DATASET_MAX_TOKENS = 1 << 24  # a dataset row's input or output length (the longest contexts are ~10M)
DATASET_MAX_HASH_IDS = 1 << 16  # a trace row's hash ids (mooncake's longest has a few hundred)
# a run's own files, as every reader of a run (show, accept, compare, report, a --baseline) reads
# them (store.results.read_json / read_jsonl): regular files only (a link to /dev/zero was read
# until the kernel killed the reader; a FIFO hung it)
RESULT_JSON_BYTES = 256 << 20  # one JSON file: manifest, status, summary, verdict (real ones: KB to a few MB)
RESULT_LINE_BYTES = 64 << 20  # one line of requests.jsonl / samples.jsonl (a record with its answer: KB)


class TooLarge(BadInput, ValueError):
    """A file over its bound, or not a regular file (a device, a FIFO): the message names it."""


def read_bytes_bounded(path: str | Path, limit: int, what: str = "file") -> bytes:
    """The bytes of a regular file of at most ``limit`` bytes: TooLarge naming ``path`` for a
    longer one and for anything that is not a regular file (``/dev/zero`` would be read forever,
    a FIFO would block); opened without blocking, so neither can hold the reader."""
    path = Path(path)
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise TooLarge(f"{path}: not a regular file (a {what} must be one)")
        chunks, left = [], limit + 1
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        data = b"".join(chunks)
        if len(data) > limit:
            raise TooLarge(f"{path}: larger than {limit:,} bytes (a {what} is at most that)")
        return data
    finally:
        os.close(fd)

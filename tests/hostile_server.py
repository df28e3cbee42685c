"""A hostile (or broken) sglang look-alike: every endpoint the harness reads, each answer wrong in
one chosen way. For tests of "a bad answer is an error with a reason, never a crash or garbage".

    python tests/hostile_server.py [--port 0] [--case NAME]     prints "PORT <n>", serves forever

The case comes from the URL (``/case/<NAME>/generate``, so one server serves every case: give the
client ``http://127.0.0.1:<port>/case/<NAME>`` as its base URL) or else from ``--case``. Endpoints:
``/generate`` and ``/v1/completions`` (SSE), ``/get_server_info`` and ``/server_info``,
``/metrics``, ``/health_generate``, ``/flush_cache``; ``/stats`` (JSON) says, per case, how many
bytes this server wrote and how many answers the client cut off (its connection dropped).

``drip_head`` writes its status line and then a header one byte every ``DRIP_S``, forever (until
the client drops the connection), on every endpoint: a per-read timeout never fires.

``long_line`` streams ``ENDLESS_BYTES`` (2 GiB) without a newline, lazily, on every endpoint; the
write fails, and streaming stops, as soon as the client drops the connection. stdlib only.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Iterator

ENDLESS_BYTES = 2 << 30
BLOCK = 64 << 10
DRIP_S = 0.05
DRIP_CASES = frozenset({"drip_head"})
PROMPT = 64  # prompt_tokens the good answer reports

GOOD_INFO = {
    "version": "0.5.17-hostile",
    "max_total_num_tokens": 4096,
    "max_req_input_len": 4095,
    "context_len": 8192,
    "context_length": None,
    "page_size": 1,
    "enable_hierarchical_cache": True,
    "hicache_ratio": 2.0,
    "hicache_size": 0,
    "hicache_write_policy": "write_through",
    "hicache_mem_layout": "page_first",
    "hicache_io_backend": "kernel",
    "hicache_storage_backend": None,
    "max_mamba_cache_size": None,
    "internal_states": [{}],
}
GOOD_METRICS = (
    "# HELP sglang:prompt_tokens_total Prefill tokens.\n# TYPE sglang:prompt_tokens_total counter\n"
    'sglang:prompt_tokens_total{model_name="m"} 64.0\n'
    "# HELP sglang:token_usage Token usage.\n# TYPE sglang:token_usage gauge\n"
    'sglang:token_usage{model_name="m"} 0.25\n'
)


def _meta(n: int, last: bool, **override: Any) -> dict:
    m = {
        "id": "r",
        "prompt_tokens": PROMPT,
        "completion_tokens": n,
        "cached_tokens": 32,
        "cached_tokens_details": {"device": 16, "host": 16},
        "finish_reason": {"type": "length", "length": n} if last else None,
    }
    m.update(override)
    return m


def _chunks(meta_override: dict | None = None, ids: Callable[[int], list] | None = None, n: int = 3) -> list[bytes]:
    """An sglang-shaped stream: cumulative ids, the override applied to the last chunk's meta."""
    out = []
    for i in range(1, n + 1):
        last = i == n
        obj = {
            "text": "x" * i,
            "output_ids": ids(i) if ids else list(range(5, 5 + i)),
            "meta_info": _meta(i, last, **(meta_override or {}) if last else {}),
        }
        out.append(b"data: " + json.dumps(obj).encode() + b"\n\n")
    return out + [b"data: [DONE]\n\n"]


def _raw_chunk(text: str) -> list[bytes]:
    """One stream chunk written as literal JSON text (NaN/Infinity are not JSON: json.dumps would
    write them anyway, this makes the intent plain)."""
    return [b"data: " + text.encode() + b"\n\n", b"data: [DONE]\n\n"]


def _endless(head: bytes) -> Iterator[bytes]:
    yield head
    block = b"a" * BLOCK
    for _ in range(ENDLESS_BYTES // BLOCK):
        yield block


def _many_chunks() -> Iterator[bytes]:
    chunk = b'data: {"output_ids": [], "meta_info": {}}\n\n'
    while True:
        yield chunk * 64


# case → endpoint → (status, content type, body parts). Missing endpoint: the good answer.
Body = tuple[int, str, Any]
SSE, JSON_T, TEXT = "text/event-stream", "application/json", "text/plain; version=0.0.4"
CASES: dict[str, dict[str, Callable[[], Body]]] = {
    "ok": {},
    "echo_key": {},  # /generate echoes the authorization header in an abort message (`Handler`)
    "list_server_info": {"info": lambda: (200, JSON_T, [b'[{"max_total_num_tokens": 4096}]'])},
    "string_pool": {
        "info": lambda: (200, JSON_T, [json.dumps({**GOOD_INFO, "max_total_num_tokens": "lots"}).encode()])
    },
    "nan_server_info": {"info": lambda: (200, JSON_T, [b'{"max_total_num_tokens": 4096, "hicache_ratio": NaN}'])},
    "nan_meta": {
        "generate": lambda: (
            200,
            SSE,
            _raw_chunk(
                '{"output_ids": [5], "meta_info": {"prompt_tokens": 64, "completion_tokens": 1, "cached_tokens": NaN,'
                ' "finish_reason": {"type": "length", "length": 1}}}'
            ),
        )
    },
    "infinity_tier": {
        "generate": lambda: (
            200,
            SSE,
            _raw_chunk(
                '{"output_ids": [5], "meta_info": {"prompt_tokens": 64, "completion_tokens": 1, "cached_tokens": 32,'
                ' "cached_tokens_details": {"device": 0, "host": Infinity}, "finish_reason": null}}'
            ),
        )
    },
    "cut_short": {"generate": lambda: (200, SSE, _chunks({"finish_reason": None}, n=2))},  # 2 of 3, no reason
    "negative_cached": {"generate": lambda: (200, SSE, _chunks({"cached_tokens": -5, "cached_tokens_details": None}))},
    "cached_over_prompt": {
        "generate": lambda: (
            200,
            SSE,
            _chunks({"cached_tokens": 1_000_000, "cached_tokens_details": {"device": 0, "host": 1_000_000}}),
        )
    },
    "absurd_cached": {
        "generate": lambda: (
            200,
            SSE,
            _chunks({"cached_tokens": 64_000_000_000, "cached_tokens_details": {"device": 0, "host": 64_000_000_000}}),
        )
    },
    # tiers past the prompt (past cached_tokens alone is sglang 0.5.17's declined load-back: valid)
    "tiers_over_prompt": {
        "generate": lambda: (200, SSE, _chunks({"cached_tokens_details": {"device": 40, "host": 40}}))
    },
    # a 64-token prompt answered without its length and with 10x as many cached tokens (host hit
    # fraction 10, negative throughput once)
    "no_prompt_tokens": {
        "generate": lambda: (
            200,
            SSE,
            _chunks({"prompt_tokens": None, "cached_tokens": 640, "cached_tokens_details": {"device": 0, "host": 640}}),
        )
    },
    "string_prompt_tokens": {"generate": lambda: (200, SSE, _chunks({"prompt_tokens": "64"}))},
    "bad_output_id": {"generate": lambda: (200, SSE, _chunks(ids=lambda i: [5, -1, 7][:i]))},
    "list_meta": {"generate": lambda: (200, SSE, _raw_chunk('{"output_ids": [5], "meta_info": [1, 2]}'))},
    # 100,000 levels of [ (200 KB, under the line bound): deeper than any JSON reader's recursion
    "deep_json": {"generate": lambda: (200, SSE, _raw_chunk("[" * 100_000 + "]" * 100_000))},
    "deep_info": {
        "info": lambda: (
            200,
            JSON_T,
            [b'{"max_total_num_tokens": 4096, "x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"],
        )
    },
    "deep_but_readable_info": {
        "info": lambda: (200, JSON_T, [b'{"max_total_num_tokens": 4096, "x": ' + b"[" * 500 + b"]" * 500 + b"}"])
    },
    "many_chunks": {"generate": lambda: (200, SSE, _many_chunks())},
    "long_line": {
        ep: (lambda: (200, SSE, _endless(b'data: {"text": "')))
        for ep in ("generate", "completions", "info", "metrics", "health", "flush")
    },
    "garbage_metrics": {"metrics": lambda: (200, TEXT, [b"<html>502 Bad Gateway</html>\n"])},
    "nan_counter": {"metrics": lambda: (200, TEXT, [GOOD_METRICS.replace("64.0", "NaN").encode()])},
    "negative_counter": {"metrics": lambda: (200, TEXT, [GOOD_METRICS.replace("64.0", "-3").encode()])},
    "binary_metrics": {"metrics": lambda: (200, TEXT, [b"sglang:x_total 1\n\xff\xfe\n"])},
}

GOOD: dict[str, Callable[[], Body]] = {
    "generate": lambda: (200, SSE, _chunks()),
    "completions": lambda: (
        200,
        SSE,
        [
            b'data: {"choices": [{"text": "ab", "finish_reason": "length"}]}\n\n',
            b'data: {"choices": [], "usage": {"prompt_tokens": 64, "completion_tokens": 2,'
            b' "prompt_tokens_details": {"cached_tokens": 0}}}\n\n',
            b"data: [DONE]\n\n",
        ],
    ),
    "info": lambda: (200, JSON_T, [json.dumps(GOOD_INFO).encode()]),
    "metrics": lambda: (200, TEXT, [GOOD_METRICS.encode()]),
    "health": lambda: (200, TEXT, [b""]),
    "flush": lambda: (200, TEXT, [b"Cache flushed."]),
}
ENDPOINTS = {
    "/generate": "generate",
    "/v1/completions": "completions",
    "/get_server_info": "info",
    "/server_info": "info",
    "/metrics": "metrics",
    "/health_generate": "health",
    "/flush_cache": "flush",
}


class Stats:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.bytes: dict[str, int] = {}
        self.cut_off: dict[str, int] = {}

    def add(self, case: str, n: int) -> None:
        with self.lock:
            self.bytes[case] = self.bytes.get(case, 0) + n

    def cut(self, case: str) -> None:
        with self.lock:
            self.cut_off[case] = self.cut_off.get(case, 0) + 1

    def to_dict(self) -> dict:
        with self.lock:
            return {"bytes": dict(self.bytes), "cut_off": dict(self.cut_off)}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    default_case = "ok"
    stats = Stats()

    def log_message(self, *args: Any) -> None:  # quiet
        pass

    def _route(self) -> tuple[str, str | None]:
        path = self.path.split("?", 1)[0]
        case = self.default_case
        if path.startswith("/case/"):
            case, _, rest = path[len("/case/") :].partition("/")
            path = "/" + rest
        return case, ENDPOINTS.get(path) or ("stats" if path == "/stats" else None)

    def _answer(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        if length:
            self.rfile.read(length)
        case, endpoint = self._route()
        if case == "echo_key" and endpoint == "generate":  # the credential sent, echoed in an abort
            auth = self.headers.get("authorization") or ""
            meta = {"finish_reason": {"type": "abort", "message": f"invalid request from {auth}"}}
            self._send(case, 200, SSE, _chunks(meta))
            return
        if case in DRIP_CASES and endpoint not in (None, "stats"):
            self._drip(case)
            return
        if endpoint == "stats":
            status, ctype, parts = 200, JSON_T, [json.dumps(self.stats.to_dict()).encode()]
        elif endpoint is None or case not in CASES:
            status, ctype, parts = 404, TEXT, [b"not found"]
        else:
            status, ctype, parts = CASES[case].get(endpoint, GOOD[endpoint])()
        self._send(case, status, ctype, parts)

    def _send(self, case: str, status: int, ctype: str, parts: Any) -> None:
        self.send_response(status)
        self.send_header("content-type", ctype)
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        try:
            for part in parts:
                if part:
                    self.wfile.write(b"%x\r\n%b\r\n" % (len(part), part))
                    self.stats.add(case, len(part))
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            self.stats.cut(case)
            self.close_connection = True

    def _drip(self, case: str) -> None:
        self.close_connection = True
        try:
            self.wfile.write(b"HTTP/1.1 200 OK\r\nx-drip: ")
            self.wfile.flush()
            while True:
                time.sleep(DRIP_S)
                self.wfile.write(b"a")
                self.wfile.flush()
                self.stats.add(case, 1)
        except (BrokenPipeError, ConnectionResetError):
            self.stats.cut(case)

    do_GET = do_POST = _answer


def serve(port: int = 0, case: str = "ok") -> ThreadingHTTPServer:
    """A started server (its thread is a daemon); `server.server_address[1]` is the port."""
    handler = type("CaseHandler", (Handler,), {"default_case": case, "stats": Stats()})
    server = ThreadingHTTPServer(("127.0.0.1", port), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--case", default="ok", choices=sorted(CASES))
    args = p.parse_args(argv)
    server = serve(args.port, args.case)
    print(f"PORT {server.server_address[1]}", flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    server.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())

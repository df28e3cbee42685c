"""One short request's client CPU on the open-loop path, in process: where it goes, waits left out.

No sockets and no waiting: a fake transport answers each request the way the stamping server of
`client_fidelity.py` does (the response head, then one chunk with the answer, `data: [DONE]` and
the body's end), on the next turns of the event loop (uvloop). Measured with
`time.thread_time_ns` over `--n` requests, the median of `--rounds`:

- build: `StreamingClient._prepare` (rid, body JSON, input hash, accumulator), for an 8-token and
  a 4,096-token prompt;
- exchange: build, write on an idle connection, both reads framed and parsed (`http1`, SSE, JSON);
- record: `check_answer` and the `RequestRecord`;
- lifecycle: `send_schedule` → `generate_at` → `http1` → record with every instant already come
  (batches of 64): what a request costs the client apart from waiting for its instant and for
  its answer (the socket's system calls are not in it: `schedule_keeping.py --spin-ms 0` has them).

    python benchmarks/request_cpu.py [--n 20000] [--rounds 3] [--json OUT]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from harness.server import http1  # noqa: E402
from harness.server.client import StreamingClient  # noqa: E402
from harness.server.request import GenerateRequest, Labels  # noqa: E402
from harness.server.schedule import send_schedule  # noqa: E402

HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"


def _answer() -> bytes:
    obj = {
        "text": ";123456789012:1234567890123",
        "output_ids": [1000],
        "meta_info": {
            "prompt_tokens": 8,
            "completion_tokens": 1,
            "cached_tokens": 0,
            "cached_tokens_details": None,
            "finish_reason": {"type": "length", "length": 1},
        },
    }
    data = b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\ndata: [DONE]\n\n"
    return b"%x\r\n%b\r\n0\r\n\r\n" % (len(data), data)


ANSWER = _answer()


class _Answering:
    """A connection's transport that answers every request written to it: the head on the next
    turn of the loop, the rest on the turn after."""

    def __init__(self, conn: http1.Connection) -> None:
        self.conn = conn

    def write(self, data: bytes) -> None:
        asyncio.get_running_loop().call_soon(self._head)

    def _head(self) -> None:
        self.conn.data_received(HEAD)
        asyncio.get_running_loop().call_soon(self.conn.data_received, ANSWER)

    def abort(self) -> None:
        pass


class _Silent:
    """A transport that takes what is written and answers nothing."""

    def write(self, data: bytes) -> None:
        pass

    def abort(self) -> None:
        pass


def _connections(client: StreamingClient, n: int) -> list[http1.Connection]:
    pool = client._pool
    conns = []
    for _ in range(n):
        conn = http1.Connection(pool)
        conn.transport = _Answering(conn)  # type: ignore[assignment]
        conn.counted = True
        pool._conns.add(conn)
        pool._open += 1
        pool._idle[conn] = None
        conns.append(conn)
    return conns


def _per_request_us(fn, n: int) -> float:
    t0 = time.thread_time_ns()
    for _ in range(n):
        fn()
    return (time.thread_time_ns() - t0) / n / 1e3


async def _round(n: int) -> dict[str, float]:
    client = StreamingClient("http://127.0.0.1:9", timeout_s=30.0)
    short = GenerateRequest(input_ids=[3] * 8, max_new_tokens=1)
    long = GenerateRequest(input_ids=list(range(1000, 1000 + 4096)), max_new_tokens=1)
    labels = Labels(workload="w", phase="p", index=5)
    out = {
        "build_8_tokens_us": _per_request_us(lambda: client._prepare(short, labels, None, None, 1), n),
        "build_4096_tokens_us": _per_request_us(lambda: client._prepare(long, labels, None, None, 1), max(1, n // 20)),
    }
    (conn,) = _connections(client, 1)
    conn.transport = _Silent()  # type: ignore[assignment]  # the reads are handed in below
    done = []

    def exchange() -> None:
        p = client._prepare(short, labels, None, None, 1)
        client._pool._idle[conn] = None
        client._pool.start("POST", p.path, p.payload, p.reader)
        conn.data_received(HEAD)
        conn.process()
        conn.data_received(ANSWER)
        conn.process()
        done.append(p)

    out["exchange_us"] = _per_request_us(exchange, n)
    assert all(p.acc.done and p.acc.error is None for p in done)
    finished = iter(done)
    out["record_us"] = _per_request_us(lambda: next(finished).record(1.0, 2), len(done))
    client._pool._conns.discard(conn)
    client._pool._idle.pop(conn, None)
    client._pool._open -= 1
    _connections(client, 64)
    items = [(0, (short, Labels(index=i)), {}) for i in range(n)]
    t0 = time.thread_time_ns()
    recs = []
    for k in range(0, n, 64):
        recs += await send_schedule(client.generate_at, items[k : k + 64], start_ns=0)
    out["lifecycle_us"] = (time.thread_time_ns() - t0) / n / 1e3
    assert not [r for r in recs if r.error], [r.error for r in recs if r.error][:3]
    await client.aclose()
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=20000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", type=Path)
    a = ap.parse_args(argv)
    rounds = [http1.run(_round(a.n)) for _ in range(a.rounds)]
    result = {k: round(statistics.median(r[k] for r in rounds), 2) for k in rounds[0]}
    result["event_loop"] = http1.event_loop_name()
    print(json.dumps(result))
    for k, v in result.items():
        if k.endswith("_us"):
            print(f"{k[:-3]:18} {v:8.2f} µs a request")
    if a.json:
        a.json.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Client fidelity: how late does `harness.client` see what a server sent?

A loopback SSE server (raw asyncio HTTP/1.1, a separate process) answers `/generate` in sglang's
shape and stamps `time.perf_counter_ns()` into each chunk just before writing it (as the chunk's
text delta, ";<ns>"; output ids stay cumulative as sglang sends them by default). The harness's
own `StreamingClient` drives it; for every chunk the error is client arrival stamp − server send
stamp, on the same clock (CLOCK_MONOTONIC is system-wide on Linux; checked at start against a
child process). Reported:

  1. TTFT error p50/p99 (first chunk) and per-chunk error p50/p99 at 1, 64 and 512 concurrent
     streams (a fixed, modest chunk rate per stream);
  2. a sweep of the total chunk rate at 64 streams, with the streams' chunks staggered evenly
     and synchronized (all due at once, as a batched decode step sends them): the largest rate
     whose per-chunk p99 error stays under 1 ms.

Usage:  python benchmarks/client_fidelity.py [--quick] [--json OUT]
This is a benchmark, not a test: numbers depend on the machine (both processes share its cores).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.client import GenerateRequest, Labels, StreamingClient  # noqa: E402

# The first chunk is due this long after the server read the request: long enough that the
# client has finished issuing a burst of requests (as a real prefill is), so TTFT error measures
# arrival handling, not the client's own request-issuing time.
FIRST_MS = 50.0
HEADERS = (b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
           b"transfer-encoding: chunked\r\n\r\n")


# ----------------------------------------------------------------------------- server

async def _handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    clock = time.perf_counter_ns
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n"):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":", 1)[1])
            body = json.loads(await reader.readexactly(length)) if length else {}
            sp = body.get("sampling_params", {})
            n = int(sp.get("max_new_tokens", 1))
            first_s = float(sp.get("first_ms", 5.0)) / 1e3
            interval_s = float(sp.get("interval_ms", 10.0)) / 1e3
            writer.write(HEADERS)
            loop = asyncio.get_running_loop()
            start = loop.time()
            ids: list[int] = []
            for i in range(n):
                delay = start + first_s + i * interval_s - loop.time()
                if delay > 0:
                    await asyncio.sleep(delay)
                ids.append(1000 + i)
                stamp = clock()
                data = json.dumps({
                    "text": f";{stamp}", "output_ids": ids,
                    "meta_info": {"prompt_tokens": 8, "completion_tokens": len(ids), "cached_tokens": 0,
                                  "cached_tokens_details": None,
                                  "finish_reason": {"type": "length", "length": n} if i == n - 1 else None},
                }, separators=(",", ":"))
                payload = f"data: {data}\n\n".encode()
                writer.write(b"%x\r\n%b\r\n" % (len(payload), payload))
                if writer.transport.get_write_buffer_size() > 1 << 16:
                    await writer.drain()
            done = b"data: [DONE]\n\n"
            writer.write(b"%x\r\n%b\r\n0\r\n\r\n" % (len(done), done))
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        writer.close()


async def _serve(port: int) -> None:
    server = await asyncio.start_server(_handle, "127.0.0.1", port, backlog=4096)
    print("READY", flush=True)
    async with server:
        await server.serve_forever()


# ----------------------------------------------------------------------------- client side

def check_shared_clock() -> dict:
    """A child's perf_counter_ns must fall between two of ours: one clock for both processes."""
    info = time.get_clock_info("perf_counter")
    ok = True
    for _ in range(5):
        before = time.perf_counter_ns()
        child = int(subprocess.check_output([sys.executable, "-c",
                                             "import time; print(time.perf_counter_ns())"]))
        after = time.perf_counter_ns()
        ok &= before <= child <= after
    return {"implementation": info.implementation, "monotonic": info.monotonic,
            "shared_across_processes": ok}


def chunk_errors_ms(rec) -> list[float]:
    stamps = [int(s) for s in (rec.text or "").split(";") if s]
    return [(t - s) / 1e6 for t, s in zip(rec.chunk_ns, stamps)]


async def drive(base_url: str, streams: int, chunks: int, interval_ms: float, rounds: int = 1,
                stagger: bool = False) -> dict:
    """`streams` concurrent requests of `chunks` chunks every `interval_ms`, `rounds` times, on one
    long-lived client whose connections are opened by a warm-up round first (as the harness keeps
    one client per server). stagger=False: every stream's chunks are due at the same instants,
    like one batched decode step of a real server; True: spread evenly over an interval."""
    async with StreamingClient(base_url, timeout_s=120.0) as client:
        warm = GenerateRequest(input_ids=[3] * 8, max_new_tokens=1, extra_sampling_params={"first_ms": 1.0})
        await asyncio.gather(*(client.generate(warm) for _ in range(streams)))

        def req(i: int) -> GenerateRequest:
            first = FIRST_MS + (i * interval_ms / streams if stagger else 0.0)
            return GenerateRequest(input_ids=[3] * 8, max_new_tokens=chunks, extra_sampling_params={
                "interval_ms": interval_ms, "first_ms": first})

        recs = []
        t0 = time.perf_counter()
        cpu0 = time.process_time()
        for _ in range(rounds):
            recs += await asyncio.gather(*(client.generate(req(i), Labels(index=i)) for i in range(streams)))
        wall = time.perf_counter() - t0
        cpu = time.process_time() - cpu0
    errors = [r.error for r in recs if r.error]
    ttft_err = [chunk_errors_ms(r)[0] for r in recs if not r.error and r.chunk_ns]
    all_err = [e for r in recs if not r.error for e in chunk_errors_ms(r)]
    n_chunks = sum(len(r.chunk_ns) for r in recs)
    pct = (lambda a, q: round(float(np.percentile(a, q)), 3) if a else None)
    return {"streams": streams, "stagger": stagger, "chunks_per_stream": chunks,
            "interval_ms": interval_ms, "offered_chunk_rate_s": round(streams * 1000.0 / interval_ms),
            "requests": len(recs), "errors": len(errors),
            "achieved_chunk_rate_s": round(n_chunks / wall), "client_cpu_us_per_chunk": round(cpu / max(1, n_chunks) * 1e6, 1),
            "ttft_err_ms_p50": pct(ttft_err, 50), "ttft_err_ms_p99": pct(ttft_err, 99),
            "chunk_err_ms_p50": pct(all_err, 50), "chunk_err_ms_p99": pct(all_err, 99),
            "chunk_err_ms_max": round(max(all_err), 3) if all_err else None}


def machine() -> dict:
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    import httpx
    return {"cpu": cpu, "cores": os.cpu_count(), "kernel": platform.release(),
            "python": platform.python_version(), "httpx": httpx.__version__}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--quick", action="store_true", help="fewer chunks and rates (a smoke run)")
    ap.add_argument("--json", type=Path, help="also write the results here")
    args = ap.parse_args(argv)
    if args.serve:
        asyncio.run(_serve(args.serve))
        return 0

    import socket
    port = args.port
    if not port:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
    server = subprocess.Popen([sys.executable, __file__, "--serve", str(port)], stdout=subprocess.PIPE,
                              start_new_session=True)
    try:
        assert server.stdout is not None and server.stdout.readline().strip() == b"READY"
        base = f"http://127.0.0.1:{port}"
        out = {"machine": machine(), "clock": check_shared_clock(), "concurrency": [], "rate_sweep": []}
        print(json.dumps(out["machine"]), json.dumps(out["clock"]), sep="\n", flush=True)
        chunks = 16 if args.quick else 64
        for streams, rounds in ((1, 20), (64, 2), (512, 1)):
            res = asyncio.run(drive(base, streams, chunks, 20.0, rounds))
            out["concurrency"].append(res)
            print(json.dumps(res), flush=True)
        intervals = [64.0, 8.0, 2.0] if args.quick else [128.0, 64.0, 32.0, 16.0, 8.0, 4.0, 2.0, 1.0]
        for stagger in (True, False):
            for interval in intervals:
                res = asyncio.run(drive(base, 64, chunks, interval, stagger=stagger))
                out["rate_sweep"].append(res)
                print(json.dumps(res), flush=True)
        for stagger in (True, False):
            kept = [r["achieved_chunk_rate_s"] for r in out["rate_sweep"] if r["stagger"] == stagger
                    and r["chunk_err_ms_p99"] is not None and r["chunk_err_ms_p99"] < 1.0 and not r["errors"]]
            key = f"max_chunk_rate_s_p99_under_1ms_{'staggered' if stagger else 'synchronized'}"
            out[key] = max(kept) if kept else None
            print(json.dumps({key: out[key]}), flush=True)
        if args.json:
            args.json.write_text(json.dumps(out, indent=1))
    finally:
        server.kill()
        server.wait()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

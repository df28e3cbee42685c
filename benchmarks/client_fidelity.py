"""Client fidelity, side by side: how late does each client see what one server sent?

One stamping SSE server (raw asyncio HTTP/1.1 with keep-alive, its own process) answers
`/generate` (sglang's shape: cumulative `output_ids` and text) and `/v1/completions` (OpenAI's
shape). Every stream's chunks are due on one grid (`--interval-ms`; the first at least
`--first-ms` after the request): all streams write in the same instants, as one decode batch of
a real server does ("lockstep", the hard case for a client). Just before writing a chunk the
server stamps it into the chunk's text as `;<CLOCK_MONOTONIC ns>:<CLOCK_REALTIME ns>`.
Ground truth = that stamp; error = the client's arrival time for the chunk − the stamp, on the
same clock (CLOCK_MONOTONIC is system-wide on Linux; checked at start against a child process;
guidellm keeps wall-clock times, compared with the wall stamp).

Clients, each in its own process, pinned with `taskset` to other cores than the server's:
  reference  a minimal raw-socket client (selectors/epoll, one thread, one stamp per recv(),
             parsing after the run): the floor of this machine (loopback, scheduler, load)
  harness    `harness.server.client.StreamingClient` on `/generate` (what the harness measures with),
             on asyncio's event loop (what `harness run` uses today) and on uvloop
             (`harness.server.http1.run`, `harness-uvloop`)
  aiperf     NVIDIA AIPerf (`aiperf profile`, completions, streaming; its raw export's per-
             response perf_ns) — from its own virtualenv (`--aiperf PATH`)
  guidellm   guidellm (`guidellm run`, concurrent profile; its first-token time) — own venv

Printed: TTFT and per-chunk error p50/p99 (ms) at 1/64/256/512 streams, the chunk rate each
achieved and the harness's CPU per chunk; then a rate sweep at 64 lockstep streams: the largest
chunk rate each client keeps with per-chunk p99 within 1 ms of the reference's at that rate.

    python benchmarks/client_fidelity.py [--quick] [--json OUT] [--aiperf /tmp/aiperf-venv/bin/aiperf]
                                         [--guidellm /tmp/guidellm-venv/bin/guidellm]
This is a benchmark, not a test: the numbers are this machine's, under its load (recorded).
"""

from __future__ import annotations

import argparse
import asyncio
import glob
import json
import os
import platform
import re
import selectors
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

STAMP = re.compile(rb";(\d{6,}):(\d{6,})")
STAMP_S = re.compile(r";(\d{6,}):(\d{6,})")


# ============================================================================== the server


class _Stream:
    __slots__ = ("writer", "kind", "left", "n", "due", "text", "ids")

    def __init__(self, writer, kind: str, n: int, due: int) -> None:
        self.writer, self.kind, self.n, self.left, self.due = writer, kind, n, n, due
        self.text = ""
        self.ids: list[int] = []


class StampServer:
    """Streams answered on one tick grid: at each tick every due stream gets one chunk."""

    def __init__(self, first_ms: float, interval_ms: float) -> None:
        self.first_ns = int(first_ms * 1e6)
        self.interval_ns = int(interval_ms * 1e6)
        self.streams: list[_Stream] = []
        self.wake = asyncio.Event()

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                lines = head.split(b"\r\n")
                path = lines[0].split(b" ")[1].decode()
                for line in lines[1:]:
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":", 1)[1])
                body = json.loads(await reader.readexactly(length)) if length else {}
                if not path.endswith(("/generate", "/completions")):
                    payload = (
                        b'{"object":"list","data":[{"id":"stamp","object":"model"}]}' if "models" in path else b"{}"
                    )
                    writer.write(
                        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%b"
                        % (len(payload), payload)
                    )
                    continue
                if path.endswith("/generate"):
                    kind, n = "generate", int(body.get("sampling_params", {}).get("max_new_tokens", 1))
                else:
                    kind = "chat" if "chat" in path else "completions"
                    n = int(body.get("max_completion_tokens") or body.get("max_tokens") or 16)
                writer.write(
                    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
                )
                now = time.perf_counter_ns()
                first = now + self.first_ns
                due = -(-first // self.interval_ns) * self.interval_ns  # the next tick of the grid
                done = asyncio.get_running_loop().create_future()
                s = _Stream((writer, done), kind, max(1, n), due)
                self.streams.append(s)
                self.wake.set()
                await done
        except (asyncio.IncompleteReadError, ConnectionError, IndexError, ValueError):
            pass
        finally:
            writer.close()

    def _chunk(self, s: _Stream) -> bytes:
        stamp = f";{time.perf_counter_ns()}:{time.time_ns()}"
        i = s.n - s.left
        last = s.left == 1
        if s.kind == "generate":
            s.text += stamp
            s.ids.append(1000 + i)
            obj = {
                "text": s.text,
                "output_ids": s.ids,
                "meta_info": {
                    "prompt_tokens": 8,
                    "completion_tokens": i + 1,
                    "cached_tokens": 0,
                    "cached_tokens_details": None,
                    "finish_reason": {"type": "length", "length": s.n} if last else None,
                },
            }
        elif s.kind == "chat":
            obj = {
                "id": "c",
                "object": "chat.completion.chunk",
                "model": "stamp",
                "choices": [{"index": 0, "delta": {"content": stamp}, "finish_reason": "length" if last else None}],
            }
        else:
            obj = {
                "id": "c",
                "object": "text_completion",
                "model": "stamp",
                "choices": [{"index": 0, "text": stamp, "finish_reason": "length" if last else None}],
            }
        data = b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"
        if last:
            data += b"data: [DONE]\n\n"
        return b"%x\r\n%b\r\n" % (len(data), data) + (b"0\r\n\r\n" if last else b"")

    async def ticker(self) -> None:
        clock = time.perf_counter_ns
        while True:
            if not self.streams:
                self.wake.clear()
                await self.wake.wait()
                continue
            nxt = min(s.due for s in self.streams)
            left = nxt - clock()
            if left > 1_500_000:
                await asyncio.sleep((left - 1_000_000) / 1e9)
                continue
            while clock() < nxt:
                pass  # the last ~1 ms: spin, so that the tick is on time
            keep = []
            for s in self.streams:
                if s.due <= nxt:
                    writer, done = s.writer
                    writer.write(self._chunk(s))  # stamped just before this write
                    s.left -= 1
                    s.due += self.interval_ns
                    if not s.left:
                        if not done.done():
                            done.set_result(None)
                        continue
                keep.append(s)
            self.streams = keep
            await asyncio.sleep(0)


async def _serve(port: int, first_ms: float, interval_ms: float) -> None:
    srv = StampServer(first_ms, interval_ms)
    server = await asyncio.start_server(srv.handle, "127.0.0.1", port, backlog=4096)
    asyncio.ensure_future(srv.ticker())
    print("READY", flush=True)
    async with server:
        await server.serve_forever()


# ============================================================================== clients
# Each returns {"ttft_err_ms": [...], "chunk_err_ms": [...], "chunks": n, "wall_s": s, "cpu_s": s}.


def _raw_request(port: int, n: int) -> bytes:
    body = json.dumps({"model": "stamp", "prompt": "x", "max_tokens": n, "stream": True}).encode()
    return (
        b"POST /v1/completions HTTP/1.1\r\nhost: 127.0.0.1:%d\r\ncontent-type: application/json\r\n"
        b"content-length: %d\r\n\r\n%b" % (port, len(body), body)
    )


def client_reference(port: int, streams: int, chunks: int, rounds: int) -> dict:
    """Raw sockets + epoll, one stamp per recv(), everything else after the run."""
    socks = [socket.create_connection(("127.0.0.1", port)) for _ in range(streams)]
    for s in socks:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        s.setblocking(False)
    sel = selectors.DefaultSelector()
    for i, s in enumerate(socks):
        sel.register(s, selectors.EVENT_READ, i)
    clock = time.perf_counter_ns
    reads: list[list[tuple[int, bytes]]] = [[] for _ in socks]
    req = _raw_request(port, chunks)
    t0, c0 = time.perf_counter(), time.process_time()
    for r in range(rounds + 1):  # round 0: warm-up (connections, server path), not counted
        n = 1 if r == 0 else chunks
        req = _raw_request(port, n)
        if r == 1:
            reads = [[] for _ in socks]
            t0, c0 = time.perf_counter(), time.process_time()
        for s in socks:
            s.sendall(req)
        left = streams
        while left:
            for key, _ in sel.select():
                t = clock()
                data = key.fileobj.recv(262144)
                reads[key.data].append((t, data))
                if data.endswith(b"0\r\n\r\n"):
                    left -= 1
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    for s in socks:
        s.close()
    ttft, errs, n_chunks = [], [], 0
    for conn_reads in reads:
        buf = bytearray()
        ends: list[tuple[int, int]] = []  # (end offset of a read in the stream, its stamp)
        for t, data in conn_reads:
            buf += data
            ends.append((len(buf), t))
        k = 0
        conn_errs = []
        for m in STAMP.finditer(buf):
            while ends[k][0] < m.end():
                k += 1
            conn_errs.append((ends[k][1] - int(m.group(1))) / 1e6)
        errs += conn_errs
        n_chunks += len(conn_errs)
        ttft += conn_errs[::chunks]  # each request's first chunk (requests follow each other)
    return {"ttft_err_ms": ttft, "chunk_err_ms": errs, "chunks": n_chunks, "wall_s": wall, "cpu_s": cpu}


def client_harness(port: int, streams: int, chunks: int, rounds: int, loop: str = "asyncio") -> dict:
    from harness.server.client import StreamingClient
    from harness.server.http1 import run
    from harness.server.request import GenerateRequest, Labels

    async def go():
        async with StreamingClient(f"http://127.0.0.1:{port}", timeout_s=300.0) as client:
            warm = GenerateRequest(input_ids=[3] * 8, max_new_tokens=1)
            await asyncio.gather(*(client.generate(warm) for _ in range(streams)))
            req = GenerateRequest(input_ids=[3] * 8, max_new_tokens=chunks)
            recs = []
            t0, c0 = time.perf_counter(), time.process_time()
            for _ in range(rounds):
                recs += await asyncio.gather(*(client.generate(req, Labels(index=i)) for i in range(streams)))
            return recs, time.perf_counter() - t0, time.process_time() - c0

    recs, wall, cpu = run(go()) if loop == "uvloop" else asyncio.run(go())
    ttft, errs, n = [], [], 0
    for r in recs:
        if r.error:
            continue
        stamps = [int(m.group(1)) for m in STAMP_S.finditer(r.text or "")]
        e = [(t - s) / 1e6 for t, s in zip(r.chunk_ns, stamps)]
        if e:
            ttft.append(e[0])
        errs += e
        n += len(r.chunk_ns)
    return {
        "ttft_err_ms": ttft,
        "chunk_err_ms": errs,
        "chunks": n,
        "wall_s": wall,
        "cpu_s": cpu,
        "errors": sum(1 for r in recs if r.error),
    }


TOKENIZER_CODE = """
import sys
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast
alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
tok = Tokenizer(models.BPE(vocab={c: i for i, c in enumerate(alphabet)}, merges=[]))
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tok.decoder = decoders.ByteLevel()
PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="!", pad_token="!").save_pretrained(sys.argv[1])
"""


def local_tokenizer(exe: str, where: Path) -> str:
    """A byte-level tokenizer (one token per byte, no merges) saved where the tool's own Python
    can load it: the tools want a HuggingFace tokenizer, and nothing can be downloaded here."""
    python = str(Path(exe).with_name("python"))
    subprocess.run([python, "-c", TOKENIZER_CODE, str(where)], check=True, capture_output=True, timeout=120)
    return str(where)


def client_aiperf(exe: str, port: int, streams: int, chunks: int, rounds: int) -> dict:
    """`aiperf profile` on /v1/completions; per-response perf_ns from its raw export."""
    out = Path(tempfile.mkdtemp(prefix="aiperf."))
    try:
        tok = local_tokenizer(exe, out / "tokenizer")
        cmd = [
            exe,
            "profile",
            "--model",
            "stamp",
            "--tokenizer",
            tok,
            "--url",
            f"http://127.0.0.1:{port}",
            "--endpoint-type",
            "completions",
            "--streaming",
            "--concurrency",
            str(streams),
            "--request-count",
            str(streams * rounds),
            "--warmup-request-count",
            str(streams),
            "--isl",
            "8",
            "--osl",
            str(chunks),
            "--extra-inputs",
            f"max_tokens:{chunks}",
            "--export-level",
            "raw",
            "--artifact-dir",
            str(out),
            "--ui",
            "none",
            "--no-server-metrics",
        ]
        t0 = time.perf_counter()
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
        wall = time.perf_counter() - t0
        raw = sorted(glob.glob(str(out / "**" / "*raw*.jsonl"), recursive=True))
        if p.returncode != 0 or not raw:
            return {"failed": (p.stderr or p.stdout)[-800:]}
        ttft, errs, n = [], [], 0
        first_ns, last_ns = None, None
        for line in open(raw[0], encoding="utf-8"):
            rec = json.loads(line)
            if (rec.get("metadata") or {}).get("benchmark_phase", "profiling") != "profiling":
                continue  # its warm-up requests
            resps = _find_responses(rec)
            if resps and isinstance(rec.get("start_perf_ns"), int):  # its measured window, not its start-up
                first_ns = min(first_ns or rec["start_perf_ns"], rec["start_perf_ns"])
                last_ns = max(last_ns or 0, max(t for t, _ in resps))
            seen: dict[int, int] = {}  # server stamp → earliest arrival (a chunk may be listed twice)
            for perf_ns, text in resps:
                for m in STAMP_S.finditer(text):
                    stamp = int(m.group(1))
                    seen[stamp] = min(seen.get(stamp, perf_ns), perf_ns)
            e = [(t - s) / 1e6 for s, t in sorted(seen.items())]
            if e:
                ttft.append(e[0])
                errs += e
                n += len(e)
        window = (last_ns - first_ns) / 1e9 if first_ns and last_ns else wall
        return {"ttft_err_ms": ttft, "chunk_err_ms": errs, "chunks": n, "wall_s": window, "cpu_s": None}
    finally:
        shutil.rmtree(out, ignore_errors=True)


def _find_responses(rec) -> list[tuple[int, str]]:
    """(perf_ns, raw text) of each streamed response in an AIPerf raw record, wherever it sits."""
    found: list[tuple[int, str]] = []

    def walk(x):
        if isinstance(x, dict):
            if "perf_ns" in x and isinstance(x.get("packets"), list):  # AIPerf 0.13: SSE packets
                found.append(
                    (int(x["perf_ns"]), "".join(str(p.get("value", "")) for p in x["packets"] if isinstance(p, dict)))
                )
                return
            if "perf_ns" in x and any(k in x for k in ("text", "raw_text", "data")):
                body = x.get("text") or x.get("raw_text") or x.get("data")
                found.append((int(x["perf_ns"]), body if isinstance(body, str) else json.dumps(body)))
                return
            for v in x.values():
                walk(v)
        elif isinstance(x, list):
            for v in x:
                walk(v)

    walk(rec)
    return found


def client_guidellm(exe: str, port: int, streams: int, chunks: int, rounds: int) -> dict:
    """`guidellm run` with a concurrent profile on /v1/completions. guidellm keeps wall-clock
    times of the first and the last token of each request only: those are compared with the
    wall stamps of the first and the last chunk."""
    out = Path(tempfile.mkdtemp(prefix="guidellm."))
    try:
        tok = local_tokenizer(exe, out / "tokenizer")
        scenario = {
            "metadata": {"name": "stamp"},
            "spec": {
                "backend": {
                    "kind": "openai_http",
                    "target": f"http://127.0.0.1:{port}",
                    "model": "stamp",
                    "request_format": "/v1/completions",
                    "max_tokens": chunks,
                    "validate_backend": False,
                },
                "profile": {"kind": "concurrent", "streams": [streams]},
                "data": [{"kind": "synthetic_text", "prompt_tokens": 8, "output_tokens": chunks}],
                "tokenizer": {"kind": "hf_auto", "model": tok},
                "constraints": [{"kind": "max_requests", "count": streams * rounds}],
                "outputs": [{"kind": "json", "path": str(out / "bench.json")}],
            },
        }
        (out / "scenario.json").write_text(json.dumps(scenario))
        t0 = time.perf_counter()
        p = subprocess.run(
            [exe, "run", "-c", str(out / "scenario.json"), "--disable-console-interactive"],
            capture_output=True,
            text=True,
            timeout=900,
        )
        wall = time.perf_counter() - t0
        res = out / "bench.json"
        if p.returncode != 0 or not res.exists():
            return {"failed": (p.stderr or p.stdout)[-800:]}
        bench = json.loads(res.read_text())["benchmarks"][0]
        ttft, errs, n = [], [], 0
        measured = bench["duration"] if bench.get("duration") else wall
        for r in bench["requests"]["successful"]:
            stamps = [int(m.group(2)) for m in STAMP_S.finditer(r.get("output") or "")]
            tm = r["info"]["timings"]
            if not stamps or tm.get("first_token_iteration") is None:
                continue
            first = (tm["first_token_iteration"] * 1e9 - stamps[0]) / 1e6
            last = (tm["last_token_iteration"] * 1e9 - stamps[-1]) / 1e6
            ttft.append(first)
            errs += [first, last]
            n += len(stamps)
        return {
            "ttft_err_ms": ttft,
            "chunk_err_ms": errs,
            "chunks": n,
            "wall_s": measured,
            "cpu_s": None,
            "errors": len(bench["requests"]["errored"]),
            "note": "first and last token of each request only (guidellm keeps no per-chunk times)",
        }
    finally:
        shutil.rmtree(out, ignore_errors=True)


# ============================================================================== driver


def check_shared_clock() -> dict:
    """A child's perf_counter_ns must fall between two of ours: one clock for both processes."""
    info = time.get_clock_info("perf_counter")
    ok = True
    for _ in range(5):
        before = time.perf_counter_ns()
        child = int(subprocess.check_output([sys.executable, "-c", "import time; print(time.perf_counter_ns())"]))
        after = time.perf_counter_ns()
        ok &= before <= child <= after
    return {"implementation": info.implementation, "monotonic": info.monotonic, "shared_across_processes": ok}


def _pct(a: list[float], q: float) -> float | None:
    if not a:
        return None
    a = sorted(a)
    pos = (len(a) - 1) * q / 100
    lo = int(pos)
    hi = min(lo + 1, len(a) - 1)
    return round(a[lo] + (a[hi] - a[lo]) * (pos - lo), 3)


def summarize(res: dict, streams: int, interval_ms: float) -> dict:
    if "failed" in res:
        return {"streams": streams, "interval_ms": interval_ms, "failed": res["failed"]}
    n = res["chunks"]
    return {
        "streams": streams,
        "interval_ms": interval_ms,
        "offered_chunk_rate_s": round(streams * 1000 / interval_ms),
        "achieved_chunk_rate_s": round(n / res["wall_s"]) if res.get("wall_s") else None,
        "chunks": n,
        "errors": res.get("errors", 0),
        "client_cpu_us_per_chunk": round(res["cpu_s"] / max(n, 1) * 1e6, 1) if res.get("cpu_s") else None,
        "ttft_err_ms_p50": _pct(res["ttft_err_ms"], 50),
        "ttft_err_ms_p99": _pct(res["ttft_err_ms"], 99),
        "chunk_err_ms_p50": _pct(res["chunk_err_ms"], 50),
        "chunk_err_ms_p99": _pct(res["chunk_err_ms"], 99),
    }


def _cores() -> tuple[str | None, str | None]:
    """(server cores, client cores) for taskset, or None when it can't pin."""
    n = os.cpu_count() or 1
    if n < 2 or not shutil.which("taskset"):
        return None, None
    if n < 4:
        return "0", ",".join(str(i) for i in range(1, n))
    half = n // 4  # a quarter for the server, the rest for the clients
    return f"0-{half - 1}", f"{half}-{n - 1}"


def _pinned(cores: str | None, argv: list[str]) -> list[str]:
    return (["taskset", "-c", cores] if cores else []) + argv


def run_client(kind: str, port: int, streams: int, chunks: int, rounds: int, cores: str | None, tools: dict) -> dict:
    """One client run in its own (pinned) process; its result as JSON on stdout."""
    argv = _pinned(
        cores,
        [
            sys.executable,
            __file__,
            "--as-client",
            kind,
            "--port",
            str(port),
            "--streams",
            str(streams),
            "--chunks",
            str(chunks),
            "--rounds",
            str(rounds),
        ]
        + [f"--{k}={v}" for k, v in tools.items() if v],
    )
    p = subprocess.run(argv, capture_output=True, text=True, timeout=1800)
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
    if p.returncode != 0 or not lines:
        return {"failed": (p.stderr or p.stdout)[-600:]}
    return json.loads(lines[-1])


def machine() -> dict:
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "loadavg": [round(x, 2) for x in os.getloadavg()],
    }


def _start_server(port: int, first_ms: float, interval_ms: float, cores: str | None) -> subprocess.Popen:
    p = subprocess.Popen(
        _pinned(
            cores,
            [
                sys.executable,
                __file__,
                "--serve",
                str(port),
                "--first-ms",
                str(first_ms),
                "--interval-ms",
                str(interval_ms),
            ],
        ),
        stdout=subprocess.PIPE,
        start_new_session=True,
    )
    assert p.stdout is not None and p.stdout.readline().strip() == b"READY"
    return p


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _row(name: str, r: dict) -> str:
    if "failed" in r:
        return f"| {name} | {r['streams']} | failed: {r['failed'].strip().splitlines()[-1][:100] if r['failed'].strip() else '?'} |"
    f = lambda v: "–" if v is None else f"{v:g}"  # noqa: E731
    return (
        f"| {name} | {r['streams']} | {f(r['ttft_err_ms_p50'])} / {f(r['ttft_err_ms_p99'])} | "
        f"{f(r['chunk_err_ms_p50'])} / {f(r['chunk_err_ms_p99'])} | {f(r['achieved_chunk_rate_s'])} | "
        f"{f(r['client_cpu_us_per_chunk'])} |"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--as-client", help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--streams", type=int, default=1, help=argparse.SUPPRESS)
    ap.add_argument("--chunks", type=int, default=32, help=argparse.SUPPRESS)
    ap.add_argument("--rounds", type=int, default=1, help=argparse.SUPPRESS)
    ap.add_argument("--first-ms", type=float, default=20.0)
    ap.add_argument("--interval-ms", type=float, default=20.0)
    ap.add_argument("--quick", action="store_true", help="fewer chunks, no rate sweep")
    ap.add_argument("--clients", default="reference,harness,harness-uvloop,aiperf,guidellm")
    ap.add_argument("--levels", default="1,64,256,512", help="concurrent streams to measure at")
    ap.add_argument("--aiperf", default=shutil.which("aiperf") or "/tmp/aiperf-venv/bin/aiperf")
    ap.add_argument("--guidellm", default=shutil.which("guidellm") or "/tmp/guidellm-venv/bin/guidellm")
    ap.add_argument("--json", type=Path, help="also write the results here")
    a = ap.parse_args(argv)
    if a.serve:
        asyncio.run(_serve(a.serve, a.first_ms, a.interval_ms))
        return 0
    if a.as_client:
        fn = {
            "reference": lambda: client_reference(a.port, a.streams, a.chunks, a.rounds),
            "harness": lambda: client_harness(a.port, a.streams, a.chunks, a.rounds),
            "harness-uvloop": lambda: client_harness(a.port, a.streams, a.chunks, a.rounds, "uvloop"),
            "aiperf": lambda: client_aiperf(a.aiperf, a.port, a.streams, a.chunks, a.rounds),
            "guidellm": lambda: client_guidellm(a.guidellm, a.port, a.streams, a.chunks, a.rounds),
        }[a.as_client]
        print(json.dumps(fn()))
        return 0

    clients = [c for c in a.clients.split(",") if c]
    tools = {"aiperf": a.aiperf, "guidellm": a.guidellm}
    for tool in ("aiperf", "guidellm"):
        if tool in clients and not (tools[tool] and Path(tools[tool]).exists()):
            print(f"# {tool}: not installed ({tools[tool]}): left out", flush=True)
            clients.remove(tool)
    server_cores, client_cores = _cores()
    out = {
        "machine": machine(),
        "clock": check_shared_clock(),
        "pinning": {"server": server_cores, "clients": client_cores},
        "first_ms": a.first_ms,
        "concurrency": [],
        "rate_sweep": [],
    }
    print(json.dumps(out["machine"]), json.dumps(out["clock"]), json.dumps(out["pinning"]), sep="\n", flush=True)
    chunks = 16 if a.quick else 32
    levels = [(int(n), 20 if int(n) == 1 else 2 if int(n) <= 64 else 1) for n in a.levels.split(",")]

    def one(kind: str, streams: int, rounds: int, interval_ms: float) -> dict:
        port = _free_port()
        server = _start_server(port, a.first_ms, interval_ms, server_cores)
        try:
            res = run_client(kind, port, streams, chunks, rounds, client_cores, tools)
        finally:
            server.kill()
            server.wait()
        row = {"client": kind, **summarize(res, streams, interval_ms), "loadavg_1m": round(os.getloadavg()[0], 2)}
        print(json.dumps(row), flush=True)
        return row

    for streams, rounds in levels:
        for kind in clients:
            out["concurrency"].append(one(kind, streams, rounds, a.interval_ms))
    if not a.quick:
        for interval in (20.0, 10.0, 5.0, 2.5, 1.25):
            for kind in clients:
                out["rate_sweep"].append(one(kind, 64, 1, interval))
        for kind in clients:
            kept = []
            for r in out["rate_sweep"]:
                ref = next(
                    (
                        x
                        for x in out["rate_sweep"]
                        if x["client"] == "reference" and x["interval_ms"] == r["interval_ms"]
                    ),
                    None,
                )
                if (
                    r["client"] == kind
                    and ref
                    and "failed" not in r
                    and "failed" not in ref
                    and r["chunk_err_ms_p99"] is not None
                    and r["chunk_err_ms_p99"] <= ref["chunk_err_ms_p99"] + 1.0
                    and not r.get("errors")
                ):
                    kept.append(r["achieved_chunk_rate_s"] or 0)
            out.setdefault("max_chunk_rate_within_1ms_of_floor", {})[kind] = max(kept) if kept else None
    print("\n| client | streams | TTFT err p50 / p99 ms | chunk err p50 / p99 ms | chunks/s | client CPU µs/chunk |")
    print("|---|---|---|---|---|---|")
    for r in out["concurrency"]:
        print(_row(r["client"], r))
    if out.get("max_chunk_rate_within_1ms_of_floor"):
        print("\nlargest chunk rate at 64 lockstep streams with chunk p99 within 1 ms of the reference's:")
        for k, v in out["max_chunk_rate_within_1ms_of_floor"].items():
            print(f"  {k:10} {v}")
    out["machine"]["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
    print(f"\nload average at start {out['machine']['loadavg']}, at end {out['machine']['loadavg_end']}")
    if a.json:
        a.json.write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Client parsing: cumulative vs incremental streams, null cache details, logprobs, failures.

Served by a real HTTP/1.1 server on loopback (a thread of this process, `http.server`, chunked
bodies written part by part), so the client's own HTTP framing, SSE line handling, connection
reuse and timing run as they do against sglang."""

import asyncio
import enum
import hashlib
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import NamedTuple

import pytest

from harness.server.client import StreamingClient
from harness.server.request import Abort, GenerateRequest, Labels, input_hash
from harness.server.stream import StreamAccumulator


def sse(objs, done=True):
    lines = [f"data: {json.dumps(o)}\n\n" for o in objs]
    if done:
        lines.append("data: [DONE]\n\n")
    return lines


def meta(completion, prompt=10, cached=0, details=None, finish=None, **extra):
    m = {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "cached_tokens": cached,
        "finish_reason": finish,
        **extra,
    }
    if details is not ...:
        m["cached_tokens_details"] = details
    return m


CUMULATIVE = [
    {"output_ids": [5], "meta_info": meta(1)},
    {"output_ids": [5, 5], "meta_info": meta(2)},
    {"output_ids": [5, 5, 9], "meta_info": meta(3, finish={"type": "length", "length": 3})},
]
INCREMENTAL = [
    {"output_ids": [5], "meta_info": meta(1)},
    {"output_ids": [5], "meta_info": meta(2)},  # same token again: only the running total tells
    {"output_ids": [9], "meta_info": meta(3, finish={"type": "length", "length": 3})},
]


class Request(NamedTuple):
    """What the test server received."""

    method: str
    path: str
    headers: dict
    content: bytes


class Answer(NamedTuple):
    status: int
    parts: object  # an iterable of bytes or str, each written as one HTTP chunk
    headers: dict = {}


SERVERS: list[ThreadingHTTPServer] = []


@pytest.fixture(autouse=True)
def _stop_servers():
    yield
    while SERVERS:
        server = SERVERS.pop()
        server.shutdown()
        server.server_close()


def serve(handler, delay_s=0.0):
    """A loopback server answering every request with `handler(Request) -> Answer`, `delay_s`
    before each part. Returns (base URL, list of the Requests seen, list of client ports seen)."""
    seen: list[Request] = []
    ports: list[int] = []

    class H(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a):
            pass

        def do_POST(self):
            body = self.rfile.read(int(self.headers.get("content-length") or 0))
            req = Request(self.command, self.path, {k.lower(): v for k, v in self.headers.items()}, body)
            seen.append(req)
            ports.append(self.client_address[1])
            ans = handler(req)
            self.send_response(ans.status)
            for k, v in {"content-type": "text/event-stream", **ans.headers}.items():
                self.send_header(k, v)
            self.send_header("transfer-encoding", "chunked")
            self.end_headers()
            try:
                for part in ans.parts:
                    if delay_s:
                        time.sleep(delay_s)
                    part = part.encode() if isinstance(part, str) else part
                    if part:
                        self.wfile.write(b"%x\r\n%b\r\n" % (len(part), part))
                        self.wfile.flush()
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()
            except (BrokenPipeError, ConnectionResetError):
                self.close_connection = True

        do_GET = do_POST

    server = ThreadingHTTPServer(("127.0.0.1", 0), H)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
    SERVERS.append(server)
    return f"http://127.0.0.1:{server.server_address[1]}", seen, ports


def make_client(chunks_or_handler, delay_s=0.0, status=200, **kw):
    handler = chunks_or_handler if callable(chunks_or_handler) else (lambda request: Answer(status, chunks_or_handler))
    url, _, _ = serve(handler, delay_s)
    return StreamingClient(url, **kw)


def run(coro):
    return asyncio.run(coro)


async def one(client, req=GenerateRequest(input_ids=list(range(3, 13)), max_new_tokens=3), **kw):
    try:
        return await client.generate(req, Labels(workload="w", phase="p", index=1), **kw)
    finally:
        await client.aclose()


@pytest.mark.parametrize("chunks", [CUMULATIVE, INCREMENTAL], ids=["cumulative", "incremental"])
def test_cumulative_and_incremental_give_the_same_ids(chunks):
    rec = run(one(make_client(sse(chunks), delay_s=0.002)))
    assert rec.error is None
    assert rec.output_ids == [5, 5, 9]
    assert rec.chunk_new_tokens == [1, 1, 1]
    assert rec.first_token_ns == rec.chunk_ns[0] > rec.sent_ns
    assert rec.done_ns >= rec.chunk_ns[-1]
    assert rec.finish_reason == "length"
    assert (rec.prompt_tokens, rec.completion_tokens, rec.prompt_len) == (10, 3, 10)
    assert rec.input_hash == input_hash(list(range(3, 13)), None)


class _Tok(enum.IntEnum):
    A = 7


class _Odd(int):
    def __str__(self) -> str:
        return "odd"


@pytest.mark.parametrize(
    "ids",
    [
        [],
        [3],
        list(range(3, 13)),
        [-1, 0, 2**63 - 1],
        [2**70, 1],
        (4, 5),
        [True, 2],
        [1.0, 2],
        [1e16],
        [_Tok.A],
        [_Odd(3)],
    ],
    ids=["empty", "one", "ten", "int64", "bigint", "tuple", "bool", "float", "exponent", "intenum", "int-subclass"],
)
def test_input_hash_is_sha256_of_the_comma_joined_ids_whatever_they_are(ids):
    """The record's input_hash keeps its definition (`ids:` + `",".join(map(str, ids))`) on
    orjson's fast path and off it: ids orjson would write differently take the join."""
    want = hashlib.sha256(b"ids:" + ",".join(map(str, ids)).encode()).hexdigest()
    assert input_hash(ids, None) == want
    assert input_hash(None, "héllo") == hashlib.sha256("text:héllo".encode()).hexdigest()


def test_accumulator_without_running_total_uses_prefix_rule():
    acc = StreamAccumulator()
    for i, ids in enumerate([[4], [4, 6], [4, 6, 6, 7]]):
        acc.feed({"output_ids": ids, "meta_info": {}}, 100 + i)
    assert acc.output_ids == [4, 6, 6, 7] and acc.chunk_new_tokens == [1, 1, 2]
    inc = StreamAccumulator()
    for i, ids in enumerate([[4], [6], [8, 9]]):
        inc.feed({"output_ids": ids, "meta_info": {}}, 100 + i)
    assert inc.output_ids == [4, 6, 8, 9]


def test_forced_modes():
    acc = StreamAccumulator("incremental")
    for i, ids in enumerate([[4], [4], [4]]):
        acc.feed({"output_ids": ids}, i)
    assert acc.output_ids == [4, 4, 4]
    acc = StreamAccumulator("cumulative")
    for i, ids in enumerate([[4], [4], [4, 1]]):
        acc.feed({"output_ids": ids}, i)
    assert acc.output_ids == [4, 1] and acc.chunk_new_tokens == [1, 0, 1]


def test_ttft_keys_off_ids_not_text():
    acc = StreamAccumulator()
    acc.feed({"text": "", "output_ids": [], "meta_info": meta(0)}, 1)
    acc.feed({"text": "Hel", "output_ids": [], "meta_info": meta(0)}, 2)  # text but no ids yet
    acc.feed({"text": "Hello", "output_ids": [7], "meta_info": meta(1)}, 3)
    assert acc.first_token_ns == 3 and acc.text == "Hello"


def test_text_incremental_mode():
    acc = StreamAccumulator()
    for i, (t, ids) in enumerate([("Hel", [1]), ("lo", [1, 2]), (" w", [1, 2, 3])]):
        acc.feed({"text": t, "output_ids": ids, "meta_info": meta(i + 1)}, i)
    assert acc.text == "Hello w" and acc.output_ids == [1, 2, 3]


@pytest.mark.parametrize(
    "cached, details, want",
    [
        (0, None, (0, 0, 0)),  # the real server's miss: null details
        (0, ..., (0, 0, 0)),  # older build: key absent
        (512, None, (None, None, None)),  # hit but tiers not reported: never guessed
        (512, {"device": 64, "host": 448}, (64, 448, 0)),
        (512, {"device": 0, "host": 0, "storage": 512}, (0, 0, 512)),
    ],
)
def test_cached_tokens_details(cached, details, want):
    last = {
        "output_ids": [5],
        "meta_info": meta(1, prompt=1024, cached=cached, details=details, finish={"type": "length", "length": 1}),
    }
    rec = run(one(make_client(sse([last])), GenerateRequest(input_ids=list(range(3, 1027)), max_new_tokens=3)))
    assert rec.cached_tokens == cached
    assert (rec.cached_device, rec.cached_host, rec.cached_storage) == want


def test_cached_tokens_are_checked_against_the_prompt_sent():
    """No prompt_tokens and 10x the prompt cached (64 sent): a protocol error, no hit fraction."""
    last = {"output_ids": [5], "meta_info": meta(1, prompt=None, cached=640, finish={"type": "length", "length": 1})}
    rec = run(one(make_client(sse([last])), GenerateRequest(input_ids=list(range(3, 67)), max_new_tokens=3)))
    assert rec.error == (
        "protocol: no prompt_tokens reported for a prompt of 64 tokens;"
        " cached_tokens 640 exceeds the 64 prompt tokens sent"
    )
    assert rec.cached_tokens is None and rec.prompt_tokens is None


def test_missing_cached_tokens_is_none():
    last = {"output_ids": [5], "meta_info": {"completion_tokens": 1, "finish_reason": None}}
    rec = run(one(make_client(sse([last]))))
    assert rec.cached_tokens is None and rec.cached_host is None


@pytest.mark.parametrize("incremental", [False, True])
def test_logprobs_shapes(incremental):
    lp = [[-0.1, 5, None], [-0.2, 5, None], [-0.3, 9, None]]
    top = [[[-0.1, 5, None], [-2.0, 6, None]], [[-0.2, 5, None], [-1.5, 7, None]], [[-0.3, 9, None], [-1.1, 8, None]]]
    chunks = []
    for i in range(3):
        sl = slice(i, i + 1) if incremental else slice(0, i + 1)
        ids = [5, 5, 9][sl]
        chunks.append(
            {"output_ids": ids, "meta_info": meta(i + 1, output_token_logprobs=lp[sl], output_top_logprobs=top[sl])}
        )
    req = GenerateRequest(input_ids=[3, 4], max_new_tokens=3, return_logprob=True, top_logprobs_num=2)
    rec = run(one(make_client(sse(chunks)), req))
    assert rec.output_ids == [5, 5, 9]
    assert rec.output_logprobs == pytest.approx([-0.1, -0.2, -0.3])
    assert rec.top_logprobs == [[[5, -0.1], [6, -2.0]], [[5, -0.2], [7, -1.5]], [[9, -0.3], [8, -1.1]]]


def test_request_body_for_generate():
    seen = {}

    def handler(request):
        seen.update(json.loads(request.content))
        return Answer(200, ["".join(sse(CUMULATIVE))])

    req = GenerateRequest(input_ids=[3, 4], max_new_tokens=3, ignore_eos=True, top_logprobs_num=5)
    rec = run(one(make_client(handler), req))
    assert rec.error is None
    assert seen["input_ids"] == [3, 4] and seen["stream"] is True and seen["rid"] == rec.rid
    assert seen["sampling_params"] == {"max_new_tokens": 3, "temperature": 0.0, "ignore_eos": True}
    assert seen["return_logprob"] is True and seen["top_logprobs_num"] == 5


def test_http_error_status():
    rec = run(one(make_client(['{"error": "bad"}'], status=400)))
    assert rec.error == "http_400" and rec.first_token_ns is None


def test_error_object_in_stream():
    rec = run(one(make_client(sse([{"error": {"message": "input too long"}}]))))
    assert rec.error == "server_error: input too long"


def test_abort_finish_reason_is_an_error():
    chunk = {"output_ids": [], "meta_info": meta(0, finish={"type": "abort", "message": "oom"})}
    rec = run(one(make_client(sse([chunk]))))
    assert rec.error == "aborted: oom" and rec.finish_reason == "abort"


def test_bad_json_and_missing_done():
    rec = run(one(make_client(["data: {not json\n\n", "data: [DONE]\n\n"])))
    assert rec.error.startswith("protocol:")
    rec = run(one(make_client(sse(CUMULATIVE[:2], done=False))))
    assert rec.error == "protocol: stream ended without [DONE]" and rec.output_ids == [5, 5]


def test_timeout_keeps_partial_chunks():
    rec = run(one(make_client(sse(CUMULATIVE), delay_s=0.2), timeout_s=0.3))
    assert rec.error == "timeout"
    assert rec.output_ids == [5] and rec.done_ns is None


def test_connection_refused_is_a_record():
    async def go():
        async with StreamingClient("http://127.0.0.1:9", timeout_s=5) as c:
            return await c.generate(GenerateRequest(input_ids=[3]), Labels())

    rec = run(go())
    assert rec.error == "connection"


def test_abort_signal_marks_in_flight_and_unsent():
    async def go():
        client = make_client(sse(CUMULATIVE), delay_s=0.5)
        abort = Abort()
        task = asyncio.create_task(client.generate(GenerateRequest(input_ids=[3]), abort=abort))
        await asyncio.sleep(0.05)
        abort.fire("server_died")
        rec = await task
        late = await client.generate(GenerateRequest(input_ids=[3]), abort=abort)
        await client.aclose()
        return rec, late

    rec, late = run(go())
    assert rec.error == "server_died" and late.error == "server_died"
    assert late.chunk_ns == []


def test_completions_api():
    chunks = [
        {"choices": [{"text": "He", "finish_reason": None}]},
        {"choices": [{"text": "llo", "finish_reason": "length"}]},
        {
            "choices": [],
            "usage": {"prompt_tokens": 2, "completion_tokens": 2, "prompt_tokens_details": {"cached_tokens": 0}},
        },
    ]
    rec = run(one(make_client(sse(chunks), api="completions")))
    assert rec.error is None and rec.text == "Hello" and rec.chunk_new_tokens == [1, 1, 0]
    assert rec.finish_reason == "length" and rec.cached_tokens == 0 and rec.cached_host == 0


# ---------------------------------------------------------------- answers checked where they enter


def test_a_line_split_over_many_reads_is_joined():
    line = f"data: {json.dumps(CUMULATIVE[2])}\n\n"
    pieces = sse(CUMULATIVE[:2], done=False) + [line[i : i + 7] for i in range(0, len(line), 7)] + ["data: [DONE]\n\n"]
    rec = run(one(make_client(pieces)))
    assert rec.error is None and rec.output_ids == [5, 5, 9] and len(rec.chunk_ns) == 3


@pytest.mark.parametrize(
    "pieces",
    [
        ['data: {"text": "' + "a" * 5000],  # no newline, one read
        ['data: {"text": "' + "a" * 5000 + '"}\n\n', "data: [DONE]\n\n"],  # a whole line, too long
        ['data: {"text": "'] + ["a" * 100] * 60,  # no newline, many reads
    ],
)
def test_a_line_over_the_bound_ends_the_request(pieces):
    rec = run(one(make_client(pieces, max_line_bytes=4096)))
    assert rec.error == "protocol: line longer than 4096 bytes"
    assert rec.sent_ns > 0 and rec.done_ns is None


@pytest.mark.parametrize(
    "line, reason",
    [
        ('{"output_ids": [5], "meta_info": {"cached_tokens": NaN}}', "NaN is not valid JSON"),
        ('{"output_ids": [5], "meta_info": {"prompt_tokens": -Infinity}}', "-Infinity is not valid JSON"),
        ("[1, 2]", "chunk is a list, not an object"),
        ('{"output_ids": [5.0]}', "output id 5.0 is not a token id"),
        ('{"output_ids": [2147483648]}', "output id 2147483648 is not a token id"),
        ('{"output_ids": [true]}', "output id True is not a token id"),
        ('{"output_ids": [5], "meta_info": {"prompt_tokens": 4, "cached_tokens": true}}', "cached_tokens is True"),
        (
            '{"output_ids": [5], "meta_info": {"completion_tokens": 9999}}',
            "completion_tokens 9999 is more than the 1027 possible",
        ),
        (
            '{"output_ids": [5], "meta_info": {"cached_tokens": 4, "cached_tokens_details": [4]}}',
            "cached_tokens_details is [4], not an object",
        ),
        (
            '{"output_ids": [5], "meta_info": {"cached_tokens": 4, "cached_tokens_details": {"host": "4"}}}',
            "cached_tokens_details.host is '4'",
        ),
        (
            '{"output_ids": [5], "meta_info": {"output_token_logprobs": [["nan", 5, null]]}}',
            "output_token_logprobs holds 'nan', not a finite logprob",
        ),
        (
            '{"output_ids": [5], "meta_info": {"output_token_logprobs": [[1e999, 5, null]]}}',
            "output_token_logprobs holds inf",
        ),
        (
            '{"output_ids": [5], "meta_info": {"output_top_logprobs": [[[-0.1, -7, null]]]}}',
            "output_top_logprobs holds token id -7",
        ),
        (
            '{"output_ids": [5], "meta_info": {"output_top_logprobs": [[[-0.1]]]}}',
            "output_top_logprobs holds [-0.1], not [logprob, id, ...]",
        ),
    ],
)
def test_a_bad_chunk_is_a_protocol_error_with_its_reason(line, reason):
    rec = run(one(make_client([f"data: {line}\n\n", "data: [DONE]\n\n"])))
    assert rec.error.startswith("protocol: ") and reason in rec.error, rec.error
    assert rec.done_ns is not None and rec.sent_ns > 0  # timestamps stay
    rec.to_json()


def test_cached_tier_sum_bounded_by_prompt_when_cached_is_not_reported():
    chunk = {"output_ids": [5], "meta_info": meta(1, prompt=10, cached=None, details={"host": 11})}
    rec = run(one(make_client(sse([chunk]))))
    assert "cached_tokens_details sum to 11, more than prompt_tokens 10" in rec.error
    assert rec.cached_host is None and rec.prompt_tokens == 10


def test_server_messages_are_clipped():
    rec = run(one(make_client(sse([{"error": {"message": "x" * 100_000}}]))))
    assert rec.error.startswith("server_error: xxx") and len(rec.error) < 400
    chunk = {"output_ids": [], "meta_info": meta(0, finish={"type": "abort", "message": "y" * 100_000})}
    rec = run(one(make_client(sse([chunk]))))
    assert rec.error.startswith("aborted: yyy") and len(rec.error) < 400


def test_a_compressed_stream_is_refused():
    seen = []

    def handler(request):
        seen.append(request.headers["accept-encoding"])
        return Answer(200, ["".join(sse(CUMULATIVE))], {"content-encoding": "br"})

    rec = run(one(make_client(handler)))
    assert rec.error == "protocol: compressed stream (content-encoding: 'br')"
    assert seen == ["identity"]


def test_more_output_ids_than_asked_ends_the_request():
    chunks = [{"output_ids": list(range(3, 3 + n)), "meta_info": {}} for n in (1, 600, 1200)]
    rec = run(one(make_client(sse(chunks)), GenerateRequest(input_ids=[3], max_new_tokens=16)))
    assert rec.error == "protocol: more than 1040 output ids"
    assert rec.output_ids == list(range(3, 603))  # what came before the cap stays


def test_an_error_status_body_is_not_read_past_a_bound():
    def endless():
        for _ in range(1 << 20):  # 64 GiB, lazily: the client must stop reading long before
            yield b"e" * 65536

    rec = run(one(make_client(lambda request: Answer(500, endless()))))
    assert rec.error == "http_500"


def test_cumulative_text_whose_tail_the_detokenizer_revised():
    """With cumulative ids each chunk's text is the whole text so far, even when the detokenizer
    rewrote its last characters (an incomplete UTF-8 sequence resolved): the text is replaced, not
    appended (appending grew it quadratically and tripped the text cap on long outputs)."""
    acc = StreamAccumulator(max_new_tokens=400)
    texts = ["a", "ab\ufffd", "abé"] + ["abé" + "x" * i for i in range(1, 300)]
    for i, text in enumerate(texts):
        acc.feed(
            {"output_ids": list(range(3, 4 + i)), "text": text, "meta_info": {"completion_tokens": i + 1}}, 100 + i
        )
    assert acc.error is None and acc.text == texts[-1] and len(acc.output_ids) == len(texts)


# ---------------------------------------------------------------- connections and stamps


def test_requests_reuse_one_connection():
    """The reader reads each answer to its end (past data: [DONE]), so sequential requests share
    one kept-alive connection, and a second round of concurrent ones reuses the first round's."""
    url, seen, ports = serve(lambda request: Answer(200, sse(CUMULATIVE)))

    async def go():
        async with StreamingClient(url) as client:
            recs = [await client.generate(GenerateRequest(input_ids=[3], max_new_tokens=3)) for _ in range(5)]
            for _ in range(2):
                recs += await asyncio.gather(
                    *(client.generate(GenerateRequest(input_ids=[3], max_new_tokens=3)) for _ in range(4))
                )
            return recs

    recs = run(go())
    assert all(r.error is None for r in recs) and len(seen) == 13
    assert len(set(ports[:5])) == 1
    assert len(set(ports)) <= 4


def test_sent_ns_is_stamped_after_the_connection_is_set_up(monkeypatch):
    """Opening a connection (here made 0.3 s slow) is not server time: sent_ns is stamped when
    the request is written, so TTFT excludes it."""
    from harness.server import http1_pool

    slow_connect = http1_pool.Pool._connect

    async def connect(self):
        await asyncio.sleep(0.3)
        return await slow_connect(self)

    monkeypatch.setattr(http1_pool.Pool, "_connect", connect)
    url, _, _ = serve(lambda request: Answer(200, sse(CUMULATIVE)))

    async def go():
        async with StreamingClient(url) as client:
            t0 = time.perf_counter_ns()
            rec = await client.generate(GenerateRequest(input_ids=[3], max_new_tokens=3))
            return t0, rec

    t0, rec = run(go())
    assert rec.error is None
    assert rec.sent_ns - t0 >= 300_000_000  # stamped after the set-up ...
    assert rec.first_token_ns - rec.sent_ns < rec.sent_ns - t0  # ... which TTFT does not hold


def test_generate_at_sends_at_its_instant_and_records_the_schedule():
    url, _, _ = serve(lambda request: Answer(200, sse(CUMULATIVE)))

    async def go():
        async with StreamingClient(url) as client:
            await client.generate(GenerateRequest(input_ids=[3], max_new_tokens=3))  # a warm connection
            due = time.perf_counter_ns() + 50_000_000
            late = await client.generate_at(due, GenerateRequest(input_ids=[3], max_new_tokens=3))
            past = time.perf_counter_ns() - 10_000_000
            asap = await client.generate_at(past, GenerateRequest(input_ids=[3], max_new_tokens=3))
            plain = await client.generate(GenerateRequest(input_ids=[3], max_new_tokens=3))
            return due, late, past, asap, plain

    due, late, past, asap, plain = run(go())
    assert late.error is None and late.scheduled_ns == due and late.sent_ns >= due
    assert asap.scheduled_ns == past and asap.sent_ns >= past
    assert plain.scheduled_ns is None
    assert json.loads(late.to_json())["scheduled_ns"] == due


def test_a_timed_out_or_cancelled_request_frees_its_connection():
    """With one connection allowed, a request that timed out and one whose caller was cancelled
    each give their connection up (closed: their answers were unfinished); the next request works."""
    url, _, ports = serve(lambda request: Answer(200, sse(CUMULATIVE)), delay_s=0.2)

    async def go():
        async with StreamingClient(url, max_connections=1) as client:
            late = await client.generate(GenerateRequest(input_ids=[3], max_new_tokens=3), timeout_s=0.3)
            task = asyncio.ensure_future(client.generate(GenerateRequest(input_ids=[3], max_new_tokens=3)))
            await asyncio.sleep(0.3)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            ok = await client.generate(GenerateRequest(input_ids=[3], max_new_tokens=3), timeout_s=10)
            return late, ok

    late, ok = run(go())
    assert late.error == "timeout" and ok.error is None and ok.output_ids == [5, 5, 9]
    assert len(set(ports)) == 3  # each unfinished answer's connection was closed, not reused


def test_generated_rids_are_unique_per_client_and_across_clients():
    a, b = StreamingClient("http://127.0.0.1:9"), StreamingClient("http://127.0.0.1:9")
    req, lab = GenerateRequest(input_ids=[3]), Labels(workload="w", phase="p", index=1)
    rids = [c._prepare(req, lab, None, None, None).rid for c in (a, b) for _ in range(1000)]
    assert len(set(rids)) == 2000 and all(r.startswith("w-p-r0-1-") for r in rids)


TIMES = ("wall_start", "sent_ns", "first_token_ns", "done_ns", "chunk_ns", "scheduled_ns", "rid")


@pytest.mark.parametrize("chunks", [CUMULATIVE, INCREMENTAL], ids=["cumulative", "incremental"])
def test_uvloop_and_asyncio_loops_give_the_same_records(chunks, monkeypatch):
    """`harness run` drives the client through `http1.run`: on uvloop when installed, else (or
    with HARNESS_EVENT_LOOP=asyncio) asyncio's loop. The records are the same but for times."""
    from harness.server import http1
    from harness.server.client import client_stack

    pytest.importorskip("uvloop")
    url, _, _ = serve(lambda request: Answer(200, sse(chunks)))

    async def go():
        async with StreamingClient(url) as client:
            reqs = [GenerateRequest(input_ids=list(range(3, 13)), max_new_tokens=3) for _ in range(3)]
            recs = await asyncio.gather(
                *(client.generate(r, Labels(workload="w", phase="p", index=i)) for i, r in enumerate(reqs))
            )
            return type(asyncio.get_running_loop()).__module__, recs

    rows = {}
    for name in ("uvloop", "asyncio"):
        monkeypatch.setenv(http1.LOOP_ENV, name)
        assert http1.event_loop_name() == name and client_stack()["event_loop"] == name
        module, recs = http1.run(go())
        assert module.startswith(name)
        rows[name] = [{k: v for k, v in json.loads(r.to_json()).items() if k not in TIMES} for r in recs]
        assert all(r.error is None and r.completion_tokens == 3 for r in recs)
    assert rows["uvloop"] == rows["asyncio"]


@pytest.mark.parametrize("burst_ns, polled_between", [(0, True), (10**12, False)])
def test_a_burst_of_sends_lets_the_loop_poll_between_them(burst_ns, polled_between, monkeypatch):
    """A concurrency group started at once: past `burst_ns` of sends in one turn of the event
    loop, the rest wait for the next turn (the loop reads and stamps the sockets in between), in
    order; every request still gets its answer."""
    from harness.server import http1_pool

    url, _, _ = serve(lambda request: Answer(200, sse(CUMULATIVE)))
    turns = [0]
    at_send = []
    real_start = http1_pool.Pool.start

    def start(self, *a, **kw):
        at_send.append(turns[0])
        return real_start(self, *a, **kw)

    monkeypatch.setattr(http1_pool.Pool, "start", start)

    async def go():
        loop = asyncio.get_running_loop()

        def tick():
            turns[0] += 1
            loop.call_soon(tick)

        async with StreamingClient(url) as client:
            client.burst_ns = burst_ns
            req = GenerateRequest(input_ids=[3], max_new_tokens=3)
            loop.call_soon(tick)
            return await asyncio.gather(*(client.generate(req, Labels(index=i)) for i in range(12)))

    recs = run(go())
    assert [r.index for r in recs] == list(range(12)) and all(r.error is None for r in recs)
    assert len(at_send) == 12
    if polled_between:
        assert len(set(at_send)) == 12 and at_send == sorted(at_send)  # one send per turn here
    else:
        assert len(set(at_send)) == 1  # all in one turn


def test_cancelled_senders_of_a_burst_do_not_strand_the_others():
    url, _, _ = serve(lambda request: Answer(200, sse(CUMULATIVE)))

    async def go():
        async with StreamingClient(url) as client:
            client.burst_ns = 0  # one send per turn: the rest park
            req = GenerateRequest(input_ids=[3], max_new_tokens=3)
            tasks = [asyncio.ensure_future(client.generate(req, Labels(index=i))) for i in range(10)]
            await asyncio.sleep(0)
            await asyncio.sleep(0)
            for i in (2, 3, 7):
                tasks[i].cancel()
            done = await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 20)
            return done

    done = run(go())
    assert [i for i, r in enumerate(done) if isinstance(r, asyncio.CancelledError)] == [2, 3, 7]
    assert all(r.error is None for i, r in enumerate(done) if i not in (2, 3, 7))

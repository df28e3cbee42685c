"""Record factories: real `RequestRecord`s built from the few numbers a test cares about.

`make_record(ttft_ms=100, output_tokens=5, itl_ms=10)` gives a record whose chunks arrive at
sent + 100 ms, then every 10 ms one token each. Times are integer ns like the client's.
"""

from __future__ import annotations

from harness.records import RequestRecord

MS = 1_000_000


def make_record(*, workload: str = "w", phase: str = "p", variant: str = "v", repeat: int = 0,
                index: int = 0, sent_ns: int = 1_000 * MS, ttft_ms: float | None = 100.0,
                output_tokens: int = 1, itl_ms: float = 10.0, tokens_per_chunk: int = 1,
                prompt_tokens: int = 1000, cached_tokens: int | None = 0,
                cached_device: int | None = None, cached_host: int | None = None,
                cached_storage: int | None = None, warmup: bool = False,
                concurrency_group: str | None = None, error: str | None = None,
                finish_reason: str | None = "length", done_gap_ms: float = 0.0) -> RequestRecord:
    """A finished request. Tiers default to "all cached tokens on device" when `cached_tokens`
    is given and no tier is; pass explicit tiers (or None) to override."""
    chunk_ns: list[int] = []
    chunk_new: list[int] = []
    first = None
    done = None
    if ttft_ms is not None:
        first = sent_ns + int(ttft_ms * MS)
        t, left = first, output_tokens
        while left > 0:
            n = min(tokens_per_chunk, left)
            if chunk_ns:  # later chunks: itl_ms per token they bring
                t += int(itl_ms * MS * n)
            chunk_ns.append(t)
            chunk_new.append(n)
            left -= n
        done = chunk_ns[-1] + int(done_gap_ms * MS)
    if cached_tokens is not None and cached_device is None and cached_host is None:
        cached_device, cached_host = cached_tokens, 0
        cached_storage = 0 if cached_storage is None else cached_storage
    return RequestRecord(
        variant=variant, workload=workload, phase=phase, repeat=repeat, index=index,
        rid=f"{workload}-{phase}-{repeat}-{index}", warmup=warmup,
        concurrency_group=concurrency_group, prompt_len=prompt_tokens, input_hash="0" * 64,
        wall_start=1.7e9, sent_ns=sent_ns, first_token_ns=first, chunk_ns=chunk_ns,
        chunk_new_tokens=chunk_new, done_ns=done, prompt_tokens=prompt_tokens,
        completion_tokens=output_tokens if ttft_ms is not None else None,
        cached_tokens=cached_tokens, cached_device=cached_device, cached_host=cached_host,
        cached_storage=cached_storage, output_ids=list(range(3, 3 + (output_tokens if first else 0))),
        text=None, output_logprobs=None, top_logprobs=None,
        finish_reason=finish_reason if error is None else None, error=error,
    )


def make_failed(error: str = "server_died", **kw) -> RequestRecord:
    """A request that never got a token."""
    return make_record(ttft_ms=None, error=error, cached_tokens=None, **kw)

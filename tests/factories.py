"""Record factories: real `RequestRecord`s built from the few numbers a test cares about, and
real run folders built from them (`write_run`).

`make_record(ttft_ms=100, output_tokens=5, itl_ms=10)` gives a record whose chunks arrive at
sent + 100 ms, then every 10 ms one token each. Times are integer ns like the client's.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from harness.analysis.summary import summarize
from harness.store import results
from harness.store.records import RequestRecord

MS = 1_000_000


def make_record(
    *,
    workload: str = "w",
    phase: str = "p",
    variant: str = "v",
    repeat: int = 0,
    index: int = 0,
    sent_ns: int = 1_000 * MS,
    ttft_ms: float | None = 100.0,
    output_tokens: int = 1,
    itl_ms: float = 10.0,
    tokens_per_chunk: int = 1,
    prompt_tokens: int = 1000,
    cached_tokens: int | None = 0,
    cached_device: int | None = None,
    cached_host: int | None = None,
    cached_storage: int | None = None,
    warmup: bool = False,
    concurrency_group: str | None = None,
    error: str | None = None,
    finish_reason: str | None = "length",
    done_gap_ms: float = 0.0,
) -> RequestRecord:
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
        variant=variant,
        workload=workload,
        phase=phase,
        repeat=repeat,
        index=index,
        rid=f"{workload}-{phase}-{repeat}-{index}",
        warmup=warmup,
        concurrency_group=concurrency_group,
        prompt_len=prompt_tokens,
        input_hash="0" * 64,
        wall_start=1.7e9,
        sent_ns=sent_ns,
        first_token_ns=first,
        chunk_ns=chunk_ns,
        chunk_new_tokens=chunk_new,
        done_ns=done,
        prompt_tokens=prompt_tokens,
        completion_tokens=output_tokens if ttft_ms is not None else None,
        cached_tokens=cached_tokens,
        cached_device=cached_device,
        cached_host=cached_host,
        cached_storage=cached_storage,
        output_ids=list(range(3, 3 + (output_tokens if first else 0))),
        text=None,
        output_logprobs=None,
        top_logprobs=None,
        finish_reason=finish_reason if error is None else None,
        error=error,
    )


def make_failed(error: str = "server_died", **kw) -> RequestRecord:
    """A request that never got a token."""
    return make_record(ttft_ms=None, error=error, cached_tokens=None, **kw)


# ----------------------------------------------------------------------------- run folders

SCENARIO_TEXT = """name: synth
server: {backend: sim, model_path: models/llama-tiny}
variants:
  - name: off
  - name: on
    hicache: {ratio: 2}
workloads:
  - kind: cold_prefill
    prompt_tokens: 8000
expectations:
  checks:
    - "on: cold_prefill.cold.ttft_ms_p50 <= 1000"
  thresholds:
    ttft_p50: 5%
"""


def noisy(center: float, n: int, sd: float = 0.01, seed: int = 0) -> list[float]:
    """``n`` values around ``center`` with relative noise ``sd`` (seeded)."""
    rng = np.random.default_rng(seed)
    return list(center * (1 + rng.normal(0, sd, n)))


def cold_records(
    ttft_ms: list[float], variant: str = "on", workload: str = "cold_prefill", phase: str = "cold"
) -> list[RequestRecord]:
    """One 8000-token request per repeat with the given TTFTs (a cold_prefill phase)."""
    return [
        make_record(
            variant=variant,
            workload=workload,
            phase=phase,
            repeat=i,
            index=0,
            sent_ns=(1000 + i * 10_000) * MS,
            ttft_ms=t,
            prompt_tokens=8000,
        )
        for i, t in enumerate(ttft_ms)
    ]


def write_run(
    results_dir: Path,
    run_id: str,
    variants: dict,
    *,
    scenario: str = "synth",
    text: str = SCENARIO_TEXT,
    complete: bool = True,
    expect: dict[str, str] | None = None,
    summaries: dict[str, dict] | None = None,
    numbered: bool = False,
) -> Path:
    """A real run folder (manifest, status.json, summary.json from `harness.analysis.summary.summarize`,
    requests.jsonl, COMPLETE) under ``results_dir/<scenario>/<run_id>``. ``variants``: name →
    request records (state ok) or a failure cause string (state startup_failed). ``summaries``
    overrides a variant's summary.json. ``numbered``: the folder made as a run makes it
    (`results.create_run_dir`: numbered after the runs already there). Returns the run folder."""
    root = Path(results_dir) / scenario / run_id
    if numbered:
        results.create_run_dir(results_dir, scenario, run_id)
    else:
        root.mkdir(parents=True)
    expect = expect or {}
    manifest = {
        "schema_version": 1,
        "kind": "run",
        "scenario": {"name": scenario, "path": "scenarios/synth.yaml", "text": text, "hash": "h"},
        "harness_version": "0",
        "backend": "sim",
        "simulated": True,
        "created_at": run_id,
        "variants": [
            {
                "name": n,
                "config_hash": "c",
                "argv": [],
                "env": {},
                "hicache": None if n == "off" else {"ratio": 2},
                "expect": expect.get(n, "ok"),
            }
            for n in variants
        ],
    }
    results.write_json_atomic(root / "manifest.json", manifest)
    for name, recs in variants.items():
        vdir = root / results.safe_name(name)
        exp = expect.get(name, "ok")
        if isinstance(recs, str):
            status = {
                "schema_version": 1,
                "variant": name,
                "state": "startup_failed",
                "cause": recs,
                "expect": exp,
                "expect_met": exp == "startup_failed",
            }
            summary = {"schema_version": 1, "workloads": None}
        else:
            status = {
                "schema_version": 1,
                "variant": name,
                "state": "ok",
                "cause": None,
                "expect": exp,
                "expect_met": exp == "ok",
            }
            summary = summarize(recs)
            with results.JsonlWriter(vdir / "requests.jsonl", fsync=False) as w:
                for r in recs:
                    w.append(r.to_dict())
        results.write_json_atomic(vdir / "status.json", status)
        results.write_json_atomic(vdir / "summary.json", (summaries or {}).get(name, summary))
    if complete:
        results.write_json_atomic(root / "COMPLETE", {"at": run_id})
    return root


def as_status(data: dict | None):
    """A status.json object as the store reads it (`harness.store.variant_status.VariantStatus`)."""
    from harness.store.variant_status import VariantStatus

    return None if data is None else VariantStatus.from_json(data)


def as_summary(data: dict | None):
    """A summary.json object as the store reads it (`harness.store.summary.Summary`: upgraded, checked)."""
    from harness.store.summary import Summary

    return None if data is None else Summary.from_json(Path("summary.json"), data)


def as_manifest(data: dict):
    """A manifest.json object as the store reads it (`harness.store.manifest.Manifest`); the scenario
    name and schema version are filled in when the test leaves them out."""
    from harness.store.manifest import Manifest

    data = {"schema_version": 1, **data}
    data["scenario"] = {"name": "s", **(data.get("scenario") or {})}
    return Manifest.from_json(Path("manifest.json"), data)

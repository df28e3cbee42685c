"""Datasets and traces (`harness.workloads.datasets`) and the dataset_replay kind: the shipped samples of
each format, tokenizers from local files (never a silent fall-back to word ids), mooncake blocks
and a trace replayed on its own clock, with its schedule lag measured and a forced lag reported."""

from __future__ import annotations

import asyncio
import importlib.util
import logging
import time
from pathlib import Path

import numpy as np
import pytest
from pydantic import ValidationError

from harness.workloads import datasets as D
from tests.factories import MS
from tests.sim_workloads import DATASETS, run_on, sim, summary_of, workload

# ------------------------------------------------------------------------------------ formats


def test_the_samples_are_what_make_samples_writes():
    spec = importlib.util.spec_from_file_location("make_samples", DATASETS / "make_samples.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.main(["--check"]) == 0


def test_sharegpt_takes_the_first_human_turn_and_its_reply():
    rs = D.load_dataset("sharegpt", DATASETS / "sharegpt_mini.json")
    assert len(rs) == 12  # the one-turn and the gpt-first conversations are skipped
    assert all(len(r.parts) == 1 and r.parts[0] and r.reply for r in rs)
    import json

    raw = json.loads((DATASETS / "sharegpt_mini.json").read_text())
    assert rs[3].parts[0] == raw[3]["conversations"][0]["value"]
    assert rs[3].reply == raw[3]["conversations"][1]["value"]


def test_loogle_questions_share_their_document_as_a_prefix():
    rs = D.load_dataset("doc_qa", DATASETS / "loogle_mini.jsonl")
    assert [r.group for r in rs] == [0, 0, 0, 1, 1, 1, 2, 2, 2]  # qa_pairs as a list and as a literal
    for g in (0, 1, 2):
        docs = {r.parts[0] for r in rs if r.group == g}
        assert len(docs) == 1
    assert all(r.parts[1].startswith("Question: ") and r.parts[1].endswith("Answer:") and r.reply for r in rs)


def test_longbench_rows_with_one_context_are_one_document():
    rs = D.load_dataset("doc_qa", DATASETS / "longbench_mini.jsonl")
    assert [r.group for r in rs] == [0, 0, 0, 1, 1, 1]  # the LongBench v2 row shares the second context
    assert "A. cache" in rs[-1].parts[1] and rs[-1].reply == "A"


def test_qa_pairs_are_read_as_a_literal_never_evaluated(tmp_path):
    bad = tmp_path / "x.jsonl"
    bad.write_text('{"input": "doc", "qa_pairs": "__import__(\'os\').getcwd()"}\n')
    with pytest.raises(D.DatasetError, match="row 1: qa_pairs is neither a list nor a Python literal"):
        D.load_dataset("doc_qa", bad)


def test_a_mooncake_trace_is_sorted_by_its_clock():
    rs = D.load_dataset("mooncake", DATASETS / "mooncake_mini.jsonl")
    assert len(rs) == 200 and [r.timestamp_ms for r in rs] == sorted(r.timestamp_ms for r in rs)
    assert all(r.input_length and r.output_length and r.hash_ids for r in rs)


@pytest.mark.parametrize(
    "line,message",
    [
        ('{"timestamp": -1, "input_length": 5, "output_length": 1, "hash_ids": [1]}', "row 2: timestamp"),
        ('{"timestamp": 5, "output_length": 1, "hash_ids": [1]}', "row 2: input_length"),
        ('{"timestamp": 5, "input_length": 5, "hash_ids": [1, "x"]}', "row 2: hash_ids"),
        ('{"timestamp": 5, "input_length": 2.5}', "row 2: input_length"),
        ("not json", ":2: not a JSON line"),
    ],
)
def test_a_bad_trace_row_names_its_row(tmp_path, line, message):
    p = tmp_path / "t.jsonl"
    p.write_text('{"timestamp": 0, "input_length": 5, "output_length": 1, "hash_ids": [0]}\n' + line + "\n")
    with pytest.raises(D.DatasetError, match=message):
        D.load_dataset("mooncake", p)


def test_nothing_is_downloaded_a_missing_file_is_named(tmp_path):
    with pytest.raises(D.DatasetError, match="no such file .*never downloaded"):
        D.load_dataset("sharegpt", tmp_path / "ShareGPT_V3_unfiltered_cleaned_split.json")
    with pytest.raises(D.DatasetError, match="unknown dataset format"):
        D.load_dataset("csv", tmp_path / "x")


# --------------------------------------------------------------------------------- tokenizers


def test_a_tokenizer_from_a_tokenizer_json_or_a_folder(tmp_path):
    by_file = D.load_text_tokenizer(DATASETS / "tokenizer.json")
    by_dir = D.load_text_tokenizer(DATASETS)
    assert by_file.encode("cache host page") == by_dir.encode("cache host page")
    assert len(by_file.encode("cache host page.")) == 4
    assert D.load_text_tokenizer(tmp_path) is None and D.load_text_tokenizer(None) is None
    (tmp_path / "tokenizer.json").write_text("{}")
    with pytest.raises(D.DatasetError, match="not a tokenizer.json"):
        D.load_text_tokenizer(tmp_path / "tokenizer.json")


def test_word_ids_are_deterministic_and_in_the_vocabulary():
    w = D.WordIds(1000)
    ids = w.encode("The cache, the host.")
    assert ids == D.WordIds(1000).encode("The cache, the host.") and len(ids) == 6
    assert all(3 <= i < 1000 for i in ids) and ids[1] != ids[3]  # "cache" is not "the"


def test_a_shared_document_is_tokenized_once_and_prefixes_every_question():
    calls = []

    class Counting:
        def encode(self, text):
            calls.append(text)
            return D.WordIds(500).encode(text)

    rs = D.load_dataset("doc_qa", DATASETS / "loogle_mini.jsonl")
    parts = D.PartIds(Counting())
    ids = [parts.ids(r) for r in rs[:3]]
    doc = parts.of(rs[0].parts[0])
    assert all(i[: len(doc)] == doc for i in ids) and ids[0] != ids[1]
    assert calls.count(rs[0].parts[0]) == 1 and parts.length(rs[1]) == len(ids[1])


def test_trace_blocks_share_exactly_what_the_hash_ids_share():
    a = D.DatasetRequest(index=0, input_length=1000, hash_ids=(7, 8))
    b = D.DatasetRequest(index=1, input_length=900, hash_ids=(7, 9))
    ia, ib = (D.trace_input_ids(r, 512, 32000, "s") for r in (a, b))
    assert len(ia) == 1000 and len(ib) == 900
    assert ia[:512] == ib[:512] and ia[512:900] != ib[512:900]
    longer = D.trace_input_ids(D.DatasetRequest(index=2, input_length=700, hash_ids=(7,)), 512, 32000, "s")
    assert longer[:512] == ia[:512] and len(longer) == 700  # past its blocks: ids of its own
    assert D.trace_input_ids(a, 512, 32000, "other repeat")[:512] != ia[:512]
    assert D.trace_offsets_ns(
        [D.DatasetRequest(0, timestamp_ms=1000.0), D.DatasetRequest(1, timestamp_ms=1500.0)], speed=2.0
    ) == [0, 250 * MS]


# -------------------------------------------------------------------------------- the kind


@pytest.mark.parametrize(
    "fields,message",
    [
        (dict(format="sharegpt", arrivals="trace"), "only the mooncake format"),
        (dict(format="mooncake", arrivals="trace", rate=2), "leave out rate"),
        (dict(format="mooncake", arrivals="trace", max_concurrency=[1, 2]), "one number"),
        (dict(format="mooncake", arrivals="trace", order="shuffled"), "keeps the trace's order"),
        (dict(format="sharegpt", rate=2, speed=2), "needs arrivals: trace"),
        (dict(format="sharegpt"), "give a rate"),
        (dict(format="sharegpt", rate=1, output_tokens=300), "over max_output_tokens"),
    ],
)
def test_bad_replay_configs_are_refused(fields, message):
    with pytest.raises(ValidationError, match=message):
        workload(kind="dataset_replay", path="x.json", **fields)


def test_a_replays_longest_request_is_its_prompt_limit_and_output():
    w = workload(kind="dataset_replay", format="mooncake", path="t.jsonl", arrivals="trace")
    assert w.longest_request_tokens(10_000) == 5000 + 256
    w = workload(
        kind="dataset_replay", format="sharegpt", path="s.json", rate=1, max_prompt_tokens=2000, output_tokens=32
    )
    assert w.longest_request_tokens(10_000) == 2032


TRACE = dict(
    kind="dataset_replay", format="mooncake", path="mooncake_mini.jsonl", arrivals="trace", max_prompt_tokens=4096
)


def _lag_line(fig):
    return (
        f"lag p50 {fig['lag_p50_ms']:.3f} ms, p99 {fig['lag_p99_ms']:.3f} ms, max {fig['lag_max_ms']:.3f} ms, "
        f"client_bound {fig['client_bound']}"
    )


def test_a_trace_is_replayed_on_its_own_clock():
    """The mini trace's first 60 requests (2.5 s of its 9.7 s clock) at their own timestamps."""
    w = workload(**TRACE, max_requests=60)
    with sim() as s:
        outcome, records = run_on(s, [w])
    assert outcome.ok and len(records) == 60
    trace = D.load_dataset("mooncake", DATASETS / "mooncake_mini.jsonl")[:60]
    records.sort(key=lambda r: r.index)
    t0 = records[0].scheduled_ns
    # each request is due at its timestamp on the trace's clock, and never sent before it
    assert [r.scheduled_ns - t0 for r in records] == [
        round((q.timestamp_ms - trace[0].timestamp_ms) * MS) for q in trace
    ]
    assert all(r.sent_ns >= r.scheduled_ns for r in records)
    assert [r.prompt_len for r in records] == [q.input_length for q in trace]
    assert sum(1 for r in records if (r.cached_tokens or 0) > 0) > 30  # the shared "system prompt" blocks
    phase = summary_of(records, [w])["dataset_replay"]["phases"]["trace"]
    fig = phase["figures"]
    assert fig["lag_n"] == 60 and fig["client_bound"] == (fig["lag_p99_ms"] > 1.0)
    print(f"\nmooncake_mini at its rate ({fig['achieved_rps']:.1f} req/s): {_lag_line(fig)}")


def test_a_trace_whose_client_falls_behind_is_reported_client_bound(caplog):
    """The mini trace with its event loop blocked 4 ms of every 6: the lag is past 1 ms and the
    run says so (phase figures, derived figures, console) instead of reporting the load as kept."""

    async def hog():
        while True:
            time.sleep(0.004)  # noqa: ASYNC251 - blocking the loop is the point
            await asyncio.sleep(0.002)

    w = workload(**TRACE, max_requests=60)
    with sim() as s, caplog.at_level(logging.WARNING):
        outcome, records = run_on(s, [w], during=hog)
    assert outcome.ok
    summary = summary_of(records, [w])["dataset_replay"]
    assert summary["phases"]["trace"]["figures"]["client_bound"] is True
    assert summary["derived"]["client_bound"] == 1.0 and summary["derived"]["schedule_lag_p99_ms"] > 1.0
    assert "dataset_replay/trace is CLIENT-BOUND" in caplog.text


def test_document_questions_find_the_document_cached():
    w = workload(
        kind="dataset_replay",
        format="doc_qa",
        path="loogle_mini.jsonl",
        tokenizer="tokenizer.json",
        mode="text",
        max_concurrency=1,
        output_tokens=4,
    )
    with sim() as s:
        outcome, records = run_on(s, [w])
    assert outcome.ok and len(records) == 9
    parts = D.PartIds(D.load_text_tokenizer(DATASETS / "tokenizer.json"))
    rs = D.load_dataset("doc_qa", DATASETS / "loogle_mini.jsonl")
    records.sort(key=lambda r: r.index)
    for rec, req in zip(records, rs):
        doc = len(parts.of(req.parts[0]))
        assert rec.prompt_len == parts.length(req)
        if req.index % 3 == 0:  # the first question on a document computes it
            assert (rec.cached_tokens or 0) < doc
        else:  # the others find it cached
            assert rec.cached_tokens >= doc - 1


def test_text_mode_without_a_tokenizer_fails_and_auto_says_it_falls_back(caplog, tmp_path):
    text = workload(
        kind="dataset_replay",
        format="sharegpt",
        path="sharegpt_mini.json",
        mode="text",
        tokenizer=str(tmp_path),
        rate=50,
        arrivals="constant",
    )
    auto = workload(
        kind="dataset_replay",
        name="auto",
        format="sharegpt",
        path="sharegpt_mini.json",
        tokenizer=str(tmp_path),
        rate=50,
        arrivals="constant",
        max_requests=4,
    )
    with sim() as s, caplog.at_level(logging.WARNING):
        outcome, records = run_on(s, [text, auto])
    assert "needs a tokenizer" in outcome.failed["dataset_replay"]
    assert outcome.completed == ["auto"] and len(records) == 4
    assert "auto: no tokenizer at" in caplog.text and "sending token ids made from the words" in caplog.text
    words = D.WordIds(32000)
    rs = D.load_dataset("sharegpt", DATASETS / "sharegpt_mini.json")
    assert sorted(r.prompt_len for r in records) == sorted(len(words.encode(q.parts[0])) for q in rs[:4])


def test_prompts_over_the_limit_are_skipped_and_counted(caplog):
    trace = D.load_dataset("mooncake", DATASETS / "mooncake_mini.jsonl")
    w = workload(**{**TRACE, "max_prompt_tokens": 600}, max_requests=30, speed=4.0)
    with sim() as s, caplog.at_level(logging.WARNING):
        outcome, records = run_on(s, [w])
    assert outcome.ok and len(records) == 30 and all(r.prompt_len <= 600 for r in records)
    first_30 = [q for q in trace if q.input_length <= 600][:30]
    skipped = sum(1 for q in trace[: trace.index(first_30[-1]) + 1] if q.input_length > 600)
    assert f"skipped {skipped} of the file's requests" in caplog.text


@pytest.mark.slow
def test_measure_the_mini_traces_schedule_lag():
    """The figure for the record: `pytest -m slow -s -k schedule_lag tests/unit/workloads/test_datasets.py`
    replays the mini trace five times at its own rate and prints the lag of each run (no bound is
    asserted: the machine's load sets it; the flag must agree with the figure)."""
    w = workload(**TRACE)
    lines = []
    with sim() as s:
        for repeat in range(5):
            _, records = run_on(s, [w], repeat=repeat)
            fig = summary_of(records, [w])["dataset_replay"]["phases"]["trace"]["figures"]
            assert fig["client_bound"] == (fig["lag_p99_ms"] > 1.0)
            load = Path("/proc/loadavg").read_text().split()[0]
            lines.append(f"run {repeat}: {_lag_line(fig)}; load average {load}")
    p99 = [float(line.split("p99 ")[1].split(" ms")[0]) for line in lines]
    print("\n" + "\n".join(lines) + f"\nmedian p99 {np.median(p99):.3f} ms")


@pytest.mark.parametrize("fmt", ["sharegpt", "doc_qa", "mooncake"])
def test_a_dataset_nested_too_deep_is_one_line_naming_the_file(tmp_path, fmt):
    """100,000 nested lists in a dataset file: DatasetError naming it (RecursionError before)."""
    deep = "[" * 100_000 + "]" * 100_000
    path = tmp_path / ("d.json" if fmt == "sharegpt" else "d.jsonl")
    path.write_text(deep if fmt == "sharegpt" else deep + "\n")
    with pytest.raises(D.DatasetError, match=rf"{path}.*nested too deep"):
        D.load_dataset(fmt, path)


def test_a_trace_spanning_55_years_is_refused_naming_the_row(tmp_path):
    """A gap of 55 years between two timestamps would make a replay wait that long."""
    path = tmp_path / "t.jsonl"
    path.write_text(
        '{"timestamp": 0, "input_length": 10, "output_length": 1}\n'
        '{"timestamp": 1734000000000, "input_length": 10, "output_length": 1}\n'
    )
    with pytest.raises(D.DatasetError, match=rf"{path} row 2: timestamp 1\.734e\+12 ms is 20,069 days"):
        D.load_dataset("mooncake", path)

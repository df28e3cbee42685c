"""Malformed dataset files, as an unlucky or hostile user gives them: `validate` and `run` refuse
each before anything starts, in one line naming the scenario's key and the file, exit 2. Before,
`validate` said ok and `run` started a server for them: the variant failed (workload_error), or
the run crashed (exit 3: NaN timestamps, an Infinity length, a lone surrogate) or hung (2 million
hash ids in a row)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from harness.cli import main

ROOT = Path(__file__).resolve().parents[3]
SCENARIO = """\
name: ds
server:
  backend: sim
  model_path: {model}
  args: {{--max-total-tokens: 8192, --skip-tokenizer-init: true}}
variants:
  - name: "off"
workloads:
  - {{kind: dataset_replay, format: {fmt}, path: {path}, mode: token_ids, {arrivals}max_output_tokens: 2}}
"""
ROW = {"timestamp": 0, "input_length": 10, "output_length": 2, "hash_ids": [1]}


def _conv(prompt: str, reply: str = "ok") -> bytes:
    return json.dumps(
        [{"conversations": [{"from": "human", "value": prompt}, {"from": "gpt", "value": reply}]}]
    ).encode()


def _line(**fields) -> bytes:
    return json.dumps({**ROW, **fields}).encode() + b"\n"


# name: (format, file bytes, words in the one line)
CASES = {
    "empty sharegpt": ("sharegpt", b"", "not valid JSON"),
    "empty trace": ("mooncake", b"\n  \n", "no usable request"),
    "empty doc_qa": ("doc_qa", b"", "no usable request"),
    "truncated sharegpt": ("sharegpt", _conv("hi")[:40], "not valid JSON"),
    "truncated trace line": ("mooncake", _line()[:30], ":1: not a JSON line"),
    "sharegpt of wrong types": (
        "sharegpt",
        json.dumps([{"conversations": "x"}, {"conversations": [1, 2]}]).encode(),
        "no usable",
    ),
    "trace of strings": ("mooncake", json.dumps({k: str(v) for k, v in ROW.items()}).encode() + b"\n", "timestamp"),
    "a trace row that is a list": ("mooncake", b"[1]\n", "row 1: expected a JSON object"),
    "doc_qa without a document": ("doc_qa", b'{"question": "q"}\n', "row 1: no document"),
    "non-UTF-8": ("sharegpt", b"\xff\xfe\x00\x80garbage", "not UTF-8 text"),
    "deep nesting": ("sharegpt", b"[" * 100_000 + b"]" * 100_000, "nested too deep"),
    "deep nesting in a trace line": ("mooncake", b'{"a": ' + b"[" * 50_000 + b"]" * 50_000 + b"}\n", "nested too deep"),
    "deep qa_pairs literal": (
        "doc_qa",
        json.dumps({"input": "d", "qa_pairs": "[" * 10_000}).encode() + b"\n",
        "qa_pairs",
    ),
    "huge garbage line": ("mooncake", b"{" + b"x" * (8 << 20) + b"\n", "not a JSON line"),
    "NaN timestamp": ("mooncake", _line().replace(b'"timestamp": 0', b'"timestamp": NaN'), "finite"),
    "a 400-digit timestamp": ("mooncake", _line().replace(b'"timestamp": 0', b'"timestamp": ' + b"9" * 400), "2^53"),
    "Infinity length": ("mooncake", _line().replace(b'"input_length": 10', b'"input_length": Infinity'), "16,777,216"),
    "a 1e300-token prompt": ("mooncake", _line(input_length=1e300), "16,777,216"),
    "2 million hash ids": ("mooncake", _line(hash_ids=[1] * 2_000_000), "more than 65,536"),
    "a lone surrogate": ("sharegpt", _conv("\ud800", "x"), "not valid Unicode"),
    "a lone surrogate in a document": (
        "doc_qa",
        json.dumps({"context": "\udfff", "input": "q"}).encode() + b"\n",
        "Unicode",
    ),
}


def _scenario(tmp_path: Path, fmt: str, data_path: Path) -> Path:
    arrivals = "arrivals: trace, " if fmt == "mooncake" else "max_concurrency: 2, "
    path = tmp_path / "s.yaml"
    model = ROOT / "scenarios" / "models" / "llama-tiny"
    path.write_text(SCENARIO.format(model=model, fmt=fmt, path=data_path, arrivals=arrivals))
    return path


def _one_line(capsys, scenario: Path, data: Path, words: str) -> None:
    captured = capsys.readouterr()
    out = captured.out + captured.err
    assert "Traceback" not in out
    lines = [x for x in captured.err.splitlines() if x.strip()]
    assert len(lines) == 1, out
    assert lines[0].startswith(f"{scenario}:") and " workloads[0].path: " in lines[0], lines[0]
    assert str(data) in lines[0] and words in lines[0], lines[0]


@pytest.mark.parametrize("name", list(CASES))
def test_validate_refuses_a_malformed_dataset_in_one_line(name, tmp_path, capsys):
    fmt, content, words = CASES[name]
    data = tmp_path / "data.jsonl"
    data.write_bytes(content)
    scenario = _scenario(tmp_path, fmt, data)
    assert main(["validate", str(scenario)]) == 2
    _one_line(capsys, scenario, data, words)


@pytest.mark.parametrize("name", ["empty trace", "NaN timestamp", "a lone surrogate", "truncated sharegpt"])
def test_run_refuses_it_before_anything_starts(name, tmp_path, capsys):
    fmt, content, words = CASES[name]
    data = tmp_path / "data.jsonl"
    data.write_bytes(content)
    scenario = _scenario(tmp_path, fmt, data)
    results = tmp_path / "results"
    assert main(["run", str(scenario), "--results-dir", str(results), "--no-report"]) == 2
    _one_line(capsys, scenario, data, words)
    assert not results.exists()  # no run folder, no server


@pytest.mark.parametrize("kind", ["folder", "fifo", "device"])
def test_a_dataset_path_that_is_no_regular_file_is_refused(kind, tmp_path, capsys):
    """A FIFO would block the read for ever, /dev/zero never ends: neither is read."""
    data = tmp_path / "data"
    if kind == "folder":
        data.mkdir()
    elif kind == "fifo":
        os.mkfifo(data)
    else:
        data.symlink_to("/dev/zero")
    scenario = _scenario(tmp_path, "sharegpt", data)
    assert main(["validate", str(scenario)]) == 2
    _one_line(capsys, scenario, data, "not a regular file")

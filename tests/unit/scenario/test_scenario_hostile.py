"""Hostile and mistyped scenario input: everything `run` would refuse, `validate` refuses first,
with `file:line key.path: message`, exit 2, nothing started and nothing written."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from harness.cli import main

ROOT = Path(__file__).resolve().parents[3]
BASE = """\
name: t
server:
  backend: sim
  model_path: models/llama-tiny
  args: {--max-total-tokens: 4096}
variants:
  - name: off
workloads:
  - kind: cold_prefill
    prompt_tokens: 100
"""


def _sub(old: str, new: str) -> str:
    assert old in BASE
    return BASE.replace(old, new)


def _alias_nest(levels: int = 60, aliases: int = 24) -> str:
    """About 3 KB: each anchor nests the one before it ``levels`` deep, the last under a known key
    (1,440 levels once expanded, each line under the 64-level limit)."""
    lines = ["l0: &l0 x"] + [
        f"l{i}: &l{i} " + "[" * levels + f"*l{i - 1}" + "]" * levels for i in range(1, aliases + 1)
    ]
    return "\n".join(lines) + f"\ndescription: *l{aliases}\n"


CASES = {
    # name: (scenario text, expected key path, words in the message)
    "alias-amplified nesting": (BASE + _alias_nest(), "", "nesting too deep"),  # was a RecursionError, exit 3
    "deep nesting": ("name: t\nx: " + "[" * 600 + "]" * 600 + "\n", "", "nesting too deep"),
    "deep mapping": ("name: t\nx: " + "{a: " * 80 + "1" + "}" * 80 + "\n", "", "nesting too deep"),
    "bad host": (_sub("  args:", "  host: 'not a host!'\n  args:"), "server.host", "not a host name"),
    "NUL in an arg": (
        _sub("{--max-total-tokens: 4096}", '{--max-total-tokens: 4096, --x: "a\\0b"}'),
        "server.args.--x",
        "NUL byte",
    ),
    "NUL in env": (_sub("  args:", '  env: {X: "a\\0b"}\n  args:'), "server.env.X", "NUL byte"),
    "NUL in a variant name": (_sub("- name: off", '- name: "o\\0ff"'), "variants[0].name", "NUL byte"),
    "missing config.json": (_sub("models/llama-tiny", "models/none"), "server.model_path", "no such file"),
    "garbage config.json": (_sub("models/llama-tiny", "models/garbage"), "server.model_path", "config.json"),
    "zero layers": (_sub("models/llama-tiny", "models/zero"), "server.model_path", "num_hidden_layers = 0"),
    "prompt 1e12": (
        _sub("prompt_tokens: 100", "prompt_tokens: 1e12"),
        "workloads[0].prompt_tokens",
        "more than any model's context",
    ),
    "100000x pool": (
        _sub("prompt_tokens: 100", 'prompt_tokens: "100000x pool"'),
        "workloads[0].prompt_tokens",
        "<= 100",
    ),
    "prompt over the context": (
        _sub("prompt_tokens: 100", "prompt_tokens: 40000"),
        "workloads[0]",
        "more than the context",
    ),
    "2x pool prompt": (
        _sub("prompt_tokens: 100", 'prompt_tokens: "2x pool"'),
        "workloads[0]",
        "more than the GPU pool",
    ),
    "n 1e12": (_sub("prompt_tokens: 100", "prompt_tokens: 100\n    n: 1e12"), "workloads[0].n", "1..100,000 requests"),
    "repeats 1e30": (_sub("name: t\n", "name: t\nrepeats: 1e30\n"), "repeats", ""),
    "repeats 1e6": (_sub("name: t\n", "name: t\nrepeats: 1000000\n"), "repeats", "1..1000 repeats"),
    "quality length 1e12": (
        BASE + "quality:\n  enabled: true\n  lengths: [1e12]\n",
        "quality.lengths[0]",
        "more than any model's context",
    ),
    "quality length over context": (
        BASE + "quality:\n  enabled: true\n  lengths: [30000]\n",
        "quality.lengths[0]",
        "more than the context",
    ),
    "variant COMPLETE": (_sub("- name: off", "- name: COMPLETE"), "variants[0].name", "run's own file"),
    "variant manifest.json": (_sub("- name: off", "- name: manifest.json"), "variants[0].name", "run's own file"),
    "variant interrupted": (_sub("- name: off", "- name: interrupted"), "variants[0].name", "run's own file"),
    "misspelt fault": (
        _sub("- name: off", "- name: off\n    sim_faults: [crash_at_reqest=3]"),
        "variants[0].sim_faults[0]",
        "did you mean 'crash_at_request'",
    ),
    "unknown workload kind": (_sub("kind: cold_prefill", "kind: cold_prefil"), "workloads[0].kind", "unknown kind"),
    # absurd numbers that validated (issue 26): each refused naming the key and its range
    "ratio 1e-300": (
        _sub("- name: off", "- name: off\n    hicache: {ratio: 1e-300}"),
        "variants[0].hicache.ratio",
        "0.01",
    ),
    "ratio 1e300": (
        _sub("- name: off", "- name: off\n    hicache: {ratio: 1e300}"),
        "variants[0].hicache.ratio",
        "1000",
    ),
    "ratio .inf": (
        _sub("- name: off", "- name: off\n    hicache: {ratio: .inf}"),
        "variants[0].hicache.ratio",
        "finite",
    ),
    "time_scale 1e300": (
        _sub("  args:", "  sim: {time_scale: 1e300}\n  args:"),
        "server.sim.time_scale",
        "0.0001..10,000 x the cost model's time",
    ),
    "tp_size 1e6": (_sub("  args:", "  tp_size: 1000000\n  args:"), "server.tp_size", "1024"),
    "seed 2**70": (BASE + "seed: 1180591620717411303424\n", "seed", "9223372036854775807"),
    "sampler 1 ns": (BASE + "sampling: {interval_s: 1e-9}\n", "sampling.interval_s", "0.01"),
    "huge layer count": (_sub("models/llama-tiny", "models/huge"), "server.model_path", "no model has more than"),
}


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("hostile") / "models"
    shutil.copytree(ROOT / "scenarios" / "models" / "llama-tiny", d / "llama-tiny")
    (d / "garbage").mkdir()
    (d / "garbage" / "config.json").write_text("{not json")
    cfg = json.loads((ROOT / "scenarios" / "models" / "llama-tiny" / "config.json").read_text())
    (d / "zero").mkdir()
    (d / "zero" / "config.json").write_text(json.dumps({**cfg, "num_hidden_layers": 0}))
    (d / "huge").mkdir()
    (d / "huge" / "config.json").write_text(json.dumps({**cfg, "num_hidden_layers": 10**15}))
    return d


@pytest.mark.parametrize("name", list(CASES))
def test_validate_refuses_with_file_line_and_key_path(name, models, tmp_path, capsys, monkeypatch):
    text, path, words = CASES[name]
    scenario = models.parent / f"{name.replace(' ', '_')}.yaml"
    scenario.write_text(text)
    monkeypatch.chdir(tmp_path)
    rc = main(["validate", str(scenario)])
    err = capsys.readouterr()
    out = err.out + err.err
    assert rc == 2, out
    assert "Traceback" not in out
    first = out.strip().splitlines()[0]
    assert first.startswith(str(scenario)), first
    if path:
        assert f" {path}: " in first, first
    assert words in out, out
    assert list(tmp_path.iterdir()) == []  # nothing written


def test_the_base_scenario_is_valid(models, tmp_path, capsys):
    scenario = models.parent / "base.yaml"
    scenario.write_text(BASE)
    assert main(["validate", str(scenario)]) == 0, capsys.readouterr()


@pytest.mark.parametrize("name", ["bad host", "NUL in env", "prompt over the context", "variant COMPLETE"])
def test_run_refuses_the_same_before_writing_anything(name, models, tmp_path, capsys):
    text, _, words = CASES[name]
    scenario = models.parent / f"run_{name.replace(' ', '_')}.yaml"
    scenario.write_text(text)
    rc = main(["run", str(scenario), "--results-dir", str(tmp_path / "r"), "--reports-dir", str(tmp_path / "p")])
    assert rc == 2
    assert words in capsys.readouterr().err
    assert not (tmp_path / "r").exists() and not (tmp_path / "p").exists()

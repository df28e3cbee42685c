"""`harness run --set KEY=VALUE`, `--repeats N`, `--no-quality`: checked like the YAML, named in
their errors, kept in the manifest and in the scenario's hash."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.cli import main
from harness.scenario import load_scenario
from harness.scenario.overrides import load_with_overrides, parse_override
from harness.store import results
from tests.conftest import REPO, TINY_QUALITY, only_run, tiny_scenario, write_scenario

SMOKE = REPO / "scenarios" / "sim_smoke.yaml"


def _load(*sets: str):
    return load_with_overrides(SMOKE, [parse_override(s) for s in sets])


def test_a_value_set_on_the_command_line_is_the_one_the_scenario_has():
    plain = load_scenario(SMOKE)
    scn = _load("workloads.cold_prefill.n=5", "variants.on-r2.hicache.ratio=3", "repeats=2", "sampling.interval_s=0.5")
    assert plain.workload("cold_prefill").n == 2 and scn.workload("cold_prefill").n == 5
    assert scn.variant("on-r2").hicache.ratio == 3 and scn.repeats == 2 and scn.sampling.interval_s == 0.5
    # the rest is the file's
    assert scn.workload("decode").output_tokens == plain.workload("decode").output_tokens
    assert [v.name for v in scn.expand_variants()] == [v.name for v in plain.expand_variants()]
    assert scn.name == plain.name == "sim_smoke"
    # indices and names reach the same element; the text it ran lists the overrides; its hash differs
    assert _load("workloads[0].n=5").hash == _load("workloads.0.n=5").hash == scn_hash_of("workloads.cold_prefill.n=5")
    assert scn.hash != plain.hash and "# --set variants[1].hicache.ratio=3" in scn.text
    assert scn.overrides == [
        "workloads.cold_prefill.n=5",
        "variants.on-r2.hicache.ratio=3",
        "repeats=2",
        "sampling.interval_s=0.5",
    ]


def scn_hash_of(*sets: str) -> str:
    return _load(*sets).hash


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (
            "workloads.cold_prefill.n=abc",
            "--set workloads.cold_prefill.n=abc workloads[0].n: expected a whole number in 1..100,000 requests, got 'abc'",
        ),
        (
            "variants.on-r2.hicache.ratio=0",
            "--set variants.on-r2.hicache.ratio=0 variants[1].hicache.ratio: expected a number in 0.01..1000 x the device KV pool, got 0",
        ),
        ("quality.bogus=1", "--set quality.bogus=1 quality.bogus: unknown key 'bogus'"),
        ("variants.nope.x=1", "--set variants.nope.x=1: variants has no element named 'nope'"),
        ("repeats.x=1", "--set repeats.x=1: repeats is a value (1), not a mapping or a list"),
        ("seed", "harness: --set seed: expected KEY=VALUE"),
        # read as a file's value is: PyYAML's 1.1 resolver made 0x10 the ratio 16
        (
            "variants.on-r2.hicache.ratio=0x10",
            "--set variants.on-r2.hicache.ratio=0x10: 0x10 is a hex numeral: write the number in plain decimal (16)",
        ),
        ("repeats=1_0", "--set repeats=1_0: 1_0 is a numeral with '_'"),
    ],
)
def test_a_bad_override_is_refused_naming_its_key(value, message, capsys):
    assert main(["run", str(SMOKE), "--set", value, "--dry-run"]) == 2
    assert message in capsys.readouterr().err


def test_the_file_s_own_errors_come_first_with_its_lines(tmp_path, capsys):
    path = write_scenario(tmp_path, tiny_scenario(1).replace("n: 2", "n: -1"))
    assert main(["run", str(path), "--set", "repeats=2", "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert f"{path.name}:" in err and "workloads[0].n" in err and "--set" not in err


def test_repeats_and_no_quality_run_and_are_kept_in_the_manifest(tmp_path, capsys):
    text = tiny_scenario(1, quality=True) + 'expectations:\n  checks: ["on-r2: quality.parity == PASS"]\n'
    assert TINY_QUALITY.splitlines()[1] in text
    path = write_scenario(tmp_path, text)
    args = ["run", str(path), "--results-dir", str(tmp_path / "r"), "--no-report", "--set", "workloads.0.n=1"]
    assert main([*args, "--repeats", "2", "--no-quality"]) == 0
    err = capsys.readouterr().err
    assert "not evaluated: 'on-r2: quality.parity == PASS': quality is off in this run (--no-quality)" in err
    run = only_run(tmp_path / "r")
    manifest = results.read_json(run / "manifest.json")
    assert manifest["repeats"] == 2
    assert manifest["scenario"]["overrides"] == ["workloads.0.n=1", "repeats=2", "quality.enabled=false"]
    assert manifest["scenario"]["hash"] != load_scenario(path).hash
    rows = [r for r in results.read_jsonl(run / "on-r2" / "requests.jsonl") if r["phase"] == "cold"]
    assert len(rows) == 2  # n=1, twice
    assert not list(results.read_jsonl(run / "on-r2" / "quality.jsonl"))
    (check,) = results.read_json(run / "expectations.json")["checks"]
    assert check["outcome"] == "skipped" and check["reason"].startswith("not evaluated: quality is off")


def test_resume_says_the_overrides_again(tmp_path):
    """The printed resume command carries the overrides (a resume without them is another scenario)."""
    from harness.cli import build_parser

    args = build_parser().parse_args(["run", "s.yaml", "--set", "repeats=2", "--no-quality"])
    assert args.set == ["repeats=2"] and args.no_quality and Path(args.scenario).name == "s.yaml"


def test_keep_workloads_keeps_those_and_what_names_them():
    """A --decide round runs only the workloads its undecided rows need: the others, their gate
    entries and their checks go (the checks come back as not evaluated, with why)."""
    from harness.scenario.overrides import keep_workloads

    tree = {
        "workloads": [{"kind": "cold_prefill"}, {"kind": "repeat_prefill", "name": "host_reuse"}, {"kind": "decode"}],
        "gate": ["cold_prefill.cold.ttft_ms", "on-r1.3: host_reuse.repeat_after_evict.ttft_ms", "on: quality.parity"],
        "expectations": {
            "checks": [
                "on-r1.3: decode.decode.tpot_ms < 30",
                "cold_prefill.cold.n >= 1",
                "quality.parity == PASS",
                "sampling.idle.max_pswpin_kib_s < 1",
            ]
        },
    }
    unrun = keep_workloads(tree, ["cold_prefill", "host_reuse"])
    assert [w.get("name") or w["kind"] for w in tree["workloads"]] == ["cold_prefill", "host_reuse"]
    assert tree["gate"] == tree["gate"][:3] and len(tree["gate"]) == 3  # every entry names a kept workload or none
    assert tree["expectations"]["checks"] == [
        "cold_prefill.cold.n >= 1",
        "quality.parity == PASS",
        "sampling.idle.max_pswpin_kib_s < 1",
    ]
    assert unrun == [
        {
            "check": "on-r1.3: decode.decode.tpot_ms < 30",
            "reason": "this round runs only cold_prefill, host_reuse (run --decide)",
        }
    ]
    keep_workloads(tree, ["cold_prefill"])
    assert tree["gate"] == ["cold_prefill.cold.ttft_ms", "on: quality.parity"]


def test_a_key_nested_past_the_scenario_limit_is_one_line(capsys):
    # 5,000 segments: a RecursionError and its traceback (exit 3); 100 already said "too deep"
    key = "a." * 5000 + "b"
    assert main(["run", str(SMOKE), "--set", f"{key}=1", "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err[-500:]
    assert "5001 levels" in err and "at most 64" in err, err[-500:]

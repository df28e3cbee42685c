"""`harness validate`: every expectation check's metric name is checked against what a run
measures (with did-you-mean), and every error that can be found comes in one pass."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from harness.scenario import ScenarioError, load_scenario
from harness.scenario.checks import check_metric_problem

ROOT = Path(__file__).resolve().parents[3]
LINE_RE = re.compile(r"^(?P<file>[^\n]+?):(?P<line>\d+) (?P<path>[^\n]+?): (?P<msg>.+)$")

WORKLOADS = {"cold_prefill": "cold_prefill", "parallel_prefixes": "parallel_prefixes", "short": "short_ttft"}

HEAD = """\
name: t
server:
  backend: sim
  model_path: m
  args: {--max-total-tokens: 8192, --context-length: 16384}
variants:
  - name: off
  - name: on-r2
    hicache: {ratio: 2}
workloads:
  - kind: cold_prefill
    n: 1
    prompt_tokens: 256
  - kind: parallel_prefixes
    k: 2
    prompt_tokens: 256
"""


@pytest.fixture
def scenario_dir(tmp_path):
    shutil.copytree(ROOT / "scenarios" / "models" / "llama-tiny", tmp_path / "m")
    return tmp_path


def errors_of(path: Path) -> list[tuple[int, str, str]]:
    with pytest.raises(ScenarioError) as ei:
        load_scenario(path, {})
    out = []
    for line in ei.value.errors:
        m = LINE_RE.match(line)
        assert m, line
        out.append((int(m.group("line")), m.group("path"), m.group("msg")))
    return out


@pytest.mark.parametrize(
    "metric",
    [
        "cold_prefill.cold.ttft_ms",
        "cold_prefill.cold.ttft_ms_p90",
        "cold_prefill.cold.n_errors",
        "cold_prefill.cold.prefill_tok_s_mean",
        "parallel_prefixes.second_pass_speedup",
        "parallel_prefixes.pass2.hits.host_tokens",
        "short.interference",
        "quality.parity",
        "sampling.idle.max_pswpin_kib_s",
        "sampling.cold_prefill.cold.min_mem_available_kib",
        "pools.host_pool_gb",
        "status.ready_s",
    ],
)
def test_declared_metrics_pass(metric):
    assert check_metric_problem(metric, WORKLOADS, quality_enabled=True) is None


@pytest.mark.parametrize(
    "metric,words",
    [
        ("parallel_prefix.pass2.ttft_ms", ["unknown workload 'parallel_prefix'", "did you mean 'parallel_prefixes'"]),
        (
            "parallel_prefixes.second_pass_speedp",
            ["no figure 'second_pass_speedp'", "did you mean 'second_pass_speedup'"],
        ),
        ("cold_prefill.cold.ttft_msec", ["no metric 'ttft_msec'", "did you mean 'ttft_ms'"]),
        ("cold_prefill.cold.ttft_ms_p97", ["unknown statistic 'p97' of ttft_ms"]),  # p95 is one
        ("quality.pariti", ["quality.parity"]),
        ("status.pools.host", ["expected status.<key>"]),
        ("sampling.idle", ["sampling.<phase>.<key>"]),
        ("cold_prefill", ["names a workload, not a figure"]),
        ("cold_prefill.cold.x.y.z", ["cannot read metric"]),
    ],
)
def test_misspelt_metrics_are_named_with_a_suggestion(metric, words):
    problem = check_metric_problem(metric, WORKLOADS, quality_enabled=True)
    assert problem is not None
    for w in words:
        assert w in problem, problem


def test_parity_check_without_quality_is_refused():
    assert "quality is not enabled" in check_metric_problem("quality.parity", WORKLOADS, quality_enabled=False)


def test_a_misspelt_check_fails_validate_at_its_line(scenario_dir):
    p = scenario_dir / "s.yaml"
    p.write_text(
        HEAD + 'expectations:\n  checks:\n    - "on-r2: parallel_prefixes.second_pass_speedup >= 1.3"\n'
        '    - "on-r2: parallel_prefixes.second_pass_spedup >= 1.3"\n'
    )
    errs = errors_of(p)
    assert len(errs) == 1, errs
    line, path, msg = errs[0]
    assert (line, path) == (20, "expectations.checks[1]")
    assert "did you mean 'second_pass_speedup'" in msg and "on-r2: parallel_prefixes.second_pass_spedup" in msg


def test_every_layer_reports_in_one_pass(scenario_dir):
    """A cross-field error, a duplicate variant, an unknown check variant, a misspelt metric and a
    prompt longer than the context: each used to hide the ones after it."""
    p = scenario_dir / "s.yaml"
    p.write_text(
        HEAD.replace("  - name: on-r2\n", "  - name: on-r2\n    expect_cause: assertion\n")
        + "  - kind: short_ttft\n    n: 1\n    prompt_tokens: 32\n    long_prompt_tokens: 20000\n"
        + "  - kind: decode\n    prompt_tokens: 64\n    output_tokens: 8\n    batch: 1\n"
        + "  - kind: decode\n    prompt_tokens: 64\n    output_tokens: 8\n    batch: 1\n"
        + 'expectations:\n  checks:\n    - "of: cold_prefill.cold.ttft_ms <= 5"\n'
        + '    - "cold_prefil.cold.ttft_ms <= 5"\n'
    )
    errs = errors_of(p)
    paths = [path for _, path, _ in errs]
    assert "variants[1].expect_cause" in paths  # cross-field (semantic)
    assert "workloads[4]" in paths  # duplicate workload name (semantic)
    assert "expectations.checks[0]" in paths  # unknown variant (late)
    assert "expectations.checks[1]" in paths  # misspelt workload (late)
    assert "workloads[2]" in paths  # over the context (size)
    assert [line for line, _, _ in errs] == sorted(line for line, _, _ in errs)


def test_model_errors_come_with_the_metric_names(scenario_dir):
    """The typed model fails (repeats: 0): the expectations' metric names are still checked."""
    p = scenario_dir / "s.yaml"
    p.write_text(HEAD + "repeats: 0\n" + 'expectations:\n  checks:\n    - "parallel_prefixes.pass2.ttft_mss <= 5"\n')
    errs = errors_of(p)
    assert {path for _, path, _ in errs} == {"repeats", "expectations.checks[0]"}, errs
    assert any("did you mean 'ttft_ms'" in msg for _, _, msg in errs)


def test_validate_prints_every_error_and_exits_2(scenario_dir):
    p = scenario_dir / "s.yaml"
    p.write_text(HEAD + "repeats: 0\n" + 'expectations:\n  checks:\n    - "parallel_prefixes.pass2.ttft_mss <= 5"\n')
    r = subprocess.run(
        [sys.executable, "-m", "harness", "validate", str(p)], capture_output=True, text=True, cwd=scenario_dir
    )
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 2 and all(line.startswith(f"{p}:") for line in lines), lines
    assert "Traceback" not in r.stderr

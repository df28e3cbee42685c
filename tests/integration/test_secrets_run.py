"""Secrets never reach a file (docs/security.md): a simulated run with a dozen secret shapes
planted — environment variables, flags, flow maps, block scalars, quoted keys, a matrix axis,
``extra_args``, a ``${VAR}`` expansion, the harness's argv — and every file the run, its report
and a comparison write is searched for every value."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from harness.cli.compare import cli_main as compare_main
from harness.report.html import write_report
from harness.run.runner import RunOptions, run_scenario
from harness.scenario import load_scenario
from harness.store import run_folder
from harness.store.secrets import REDACTED

REPO = Path(__file__).resolve().parents[2]
MODELS = REPO / "scenarios" / "models"

SECRETS = {
    "environ": "hf_environ_0001",  # HF_TOKEN in the harness's environment
    "flow_map": "sk-flowmap-0002",  # server.args: {--api-key: ...}
    "extra_args": "hf_extraargs_0003",  # server.extra_args: "--api-key ..." (wins over args)
    "env_block": "tok-block-0004",  # server.env, block style
    "quoted_key": "quoted-0005",  # "QUOTED_API_KEY": '...'
    "block_scalar": "block-scalar-0006",  # MULTI_PASSWORD: |
    "expanded": "expanded-pw-0007",  # DB_PASSWORD: ${PLANTED_DB_PW} (an ordinary variable name)
    "variant_env": "variant-env-0008",  # a variant's env flow map
    "variant_flag": "variant-flag-0009",  # a variant's args (--api-key): what the server really gets
    "matrix_a": "axis-secret-0010a",  # a matrix env axis, first value
    "matrix_b": "axis-secret-0010b",  # ... second value
    "argv": "argv-secret-0011",  # the harness's own command line
    "folded": "folded-secret-0012",  # a folded scalar under a secret name (db_password: >-)
}


def _scenario(tmp_path: Path) -> Path:
    s = SECRETS
    text = textwrap.dedent(f"""\
        name: secrets
        server:
          backend: sim
          model_path: {MODELS / "llama-tiny"}
          args: {{--max-total-tokens: 4096, --skip-tokenizer-init: true, --api-key: {s["flow_map"]}}}
          extra_args: "--api-key {s["extra_args"]}"
          startup_timeout_s: 20
          startup_retries: 0
          liveness_idle_s: 0.1
          env:
            SGLANG_TEST_TOKEN: {s["env_block"]}
            "QUOTED_API_KEY": '{s["quoted_key"]}'
            MULTI_PASSWORD: |
              {s["block_scalar"]}
            DB_PASSWORD: ${{PLANTED_DB_PW}}
            SGLANG_DB_PASSWORD: >-
              {s["folded"]}
          sim: {{time_scale: 0.05, startup_s: 0.05, host_mem_scale: 0.001, mem_available_gib: 16}}
        sampling: {{enabled: true, interval_s: 0.2, idle_window_s: 0.2, cooldown_timeout_s: 2, gpu: false}}
        preflight: {{mode: warn}}
        variants:
          - name: off
            env: {{WANDB_API_KEY: "{s["variant_env"]}"}}
            args:
              --api-key: {s["variant_flag"]}
        matrix:
          - prefix: on
            hicache: {{ratio: 2}}
            axes: {{env.OPENAI_API_KEY: [{s["matrix_a"]}, {s["matrix_b"]}]}}
        workloads:
          - kind: cold_prefill
            n: 2
            prompt_tokens: 256
        """)
    path = tmp_path / "secrets.yaml"
    path.write_text(text)
    return path


def _files(*roots: Path) -> list[Path]:
    return [p for root in roots for p in root.rglob("*") if p.is_file()]


@pytest.fixture
def planted_env(monkeypatch):
    monkeypatch.setenv("HF_TOKEN", SECRETS["environ"])
    monkeypatch.setenv("PLANTED_DB_PW", SECRETS["expanded"])


def test_no_secret_value_in_any_file_of_a_run_its_report_or_a_comparison(tmp_path, planted_env):
    scenario = load_scenario(_scenario(tmp_path))
    assert [v.name for v in scenario.expand_variants()] == [
        "off",
        "on-OPENAI_API_KEY_secret1",
        "on-OPENAI_API_KEY_secret2",
    ]
    outcome = run_scenario(
        scenario,
        RunOptions(results_dir=tmp_path / "results", live_progress=False),
        harness_argv=["harness", "run", "secrets.yaml", "--api-key", SECRETS["argv"]],
    )
    run = outcome.run_dir
    assert all(
        json.loads((run / v / "status.json").read_text())["state"] == "ok"
        for v in ("off", "on-OPENAI_API_KEY_secret1", "on-OPENAI_API_KEY_secret2")
    )
    report = write_report(run, tmp_path / "reports")
    assert report.exists()

    class Args:  # `harness compare RUN --baseline RUN --junit F --markdown F`
        baseline = str(run)
        results_dir = str(tmp_path / "results")
        junit = str(tmp_path / "compare" / "junit.xml")
        markdown = str(tmp_path / "compare" / "summary.md")

    Args.run = str(run)
    compare_main(Args)

    files = _files(tmp_path / "results", tmp_path / "reports", tmp_path / "compare")
    names = {p.name for p in files}
    assert {
        "manifest.json",
        "status.json",
        "server.log",
        "server_info.json",
        "requests.jsonl",
        "samples.jsonl",
        "summary.json",
        "index.html",
        "junit.xml",
        "summary.md",
    } <= names
    leaks = {}
    for path in files:
        data = path.read_bytes()
        found = [label for label, value in SECRETS.items() if value.encode() in data]
        if found:
            leaks[str(path.relative_to(tmp_path))] = found
    assert leaks == {}

    # The secrets were really there to be found: the server got its key and printed it, the
    # manifest records where each one was.
    off = run / "off"
    assert "api_key='***'" in (off / "server.log").read_text()
    assert json.loads((off / "server_info.json").read_text())["api_key"] == REDACTED
    manifest = json.loads((run / "manifest.json").read_text())
    entry = {e["name"]: e for e in manifest["variants"]}["off"]
    assert entry["env"]["WANDB_API_KEY"] == REDACTED and entry["env"]["DB_PASSWORD"] == REDACTED
    assert entry["argv"][entry["argv"].index("--api-key") + 1] == REDACTED
    assert manifest["env"]["HF_TOKEN"] == REDACTED
    assert "--max-total-tokens: 4096" in manifest["scenario"]["text"]  # the rest of the text is intact
    assert run_folder.load_run(run).variant("off").status.pools["max_total_num_tokens"] == 4096


def test_an_interrupted_variant_s_log_is_scrubbed_too(tmp_path, monkeypatch, planted_env):
    """Ctrl-C mid-variant: the server is stopped and its log scrubbed before the run exits 130."""
    from harness.run import serving_window

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(serving_window, "run_window", interrupted)
    path = _scenario(tmp_path)
    outcome = run_scenario(
        load_scenario(path),
        RunOptions(results_dir=tmp_path / "results", live_progress=False, only=["off"]),
    )
    assert outcome.interrupted
    log = (outcome.run_dir / "off" / "server.log").read_text()
    assert "api_key='***'" in log and SECRETS["variant_flag"] not in log

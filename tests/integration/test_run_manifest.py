"""Every run is fingerprinted and secrets never reach a file (P14, security); preflight strict
refuses before launch (P9); a dirty environment after cooldown marks the next variant; progress
is plain lines in a CI log."""

from __future__ import annotations

import io
import json
from pathlib import Path

from harness.host import fingerprint
from harness.run.manifest import run_redactor
from harness.run.progress import Progress
from harness.run.runner import RunOptions, run_scenario
from harness.scenario import load_scenario
from harness.store import results
from harness.store.secrets import REDACTED, Redactor
from tests.conftest import sim_scenario, write_scenario


def test_allowlisted_env_is_redacted():
    env = {
        "HF_TOKEN": "hf_secret",
        "SGLANG_HICACHE_HOST_ALLOC": "pin",
        "MY_API_KEY": "k",
        "DB_PASSWORD": "p",
        "HOME": "/root",
        "CUDA_VISIBLE_DEVICES": "0,1",
        "SGLANG_NOTE": "uses hf_secret",
    }
    kept = fingerprint.allowlisted_env(env, {"AWS_SECRET_ACCESS_KEY": "s"}, redactor=Redactor().learn(env))
    assert kept["SGLANG_HICACHE_HOST_ALLOC"] == "pin" and kept["CUDA_VISIBLE_DEVICES"] == "0,1"
    assert kept["HF_TOKEN"] == REDACTED and kept["AWS_SECRET_ACCESS_KEY"] == REDACTED
    assert kept["SGLANG_NOTE"] == "uses ***"  # a known secret value under an ordinary name
    assert "HOME" not in kept and "MY_API_KEY" not in kept  # not allowlisted at all


def test_results_json_keeps_figures_named_like_credentials():
    """The run's scrubbing replaces secret values and strings under credential names, never a
    number: ``kv_bytes_per_token`` is a figure, not a token."""
    r = Redactor(values={"k-123456"})
    out = fingerprint.scrub_json(
        r,
        {
            "kv_bytes_per_token": 131072,
            "api_key": "k-123456",
            "admin_api_key": "other",
            "log": ["api_key='k-123456'"],
            "hf_token": None,
            "ok": True,
        },
    )
    assert out == {
        "kv_bytes_per_token": 131072,
        "api_key": REDACTED,
        "admin_api_key": REDACTED,
        "log": ["api_key='***'"],
        "hf_token": None,
        "ok": True,
    }


def test_wsl_detection():
    assert fingerprint.is_wsl("5.15.167.4-microsoft-standard-WSL2")
    assert not fingerprint.is_wsl("6.18.44-fc-v657-gpu")


def test_manifest_fingerprint_and_no_secret_in_any_file(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_do_not_leak")
    path = write_scenario(
        tmp_path,
        sim_scenario("""\
        - name: off
          env: {SGLANG_TEST_TOKEN: also_secret, SGLANG_HICACHE_HOST_REGISTER_CHUNK_GB: "1"}
        """),
    )
    outcome = run_scenario(load_scenario(path), RunOptions(results_dir=tmp_path / "results", live_progress=False))
    manifest = json.loads((outcome.run_dir / "manifest.json").read_text())
    assert manifest["schema_version"] == results.SCHEMA_VERSION and manifest["simulated"] is True
    assert manifest["scenario"]["hash"] and "variants:" in manifest["scenario"]["text"]
    host = manifest["host"]
    assert {"kernel", "wsl", "cpu", "mem_total_kib", "gpus"} <= set(host)
    assert manifest["client"]["event_loop"] in ("uvloop", "asyncio") and manifest["client"]["json"] in (
        "orjson",
        "json",
    )
    (variant,) = manifest["variants"]
    assert variant["config_hash"] and "--max-total-tokens" in variant["argv"]
    assert variant["env"]["SGLANG_HICACHE_HOST_REGISTER_CHUNK_GB"] == "1"
    assert variant["env"]["SGLANG_TEST_TOKEN"] == REDACTED
    for f in outcome.run_dir.rglob("*"):
        if f.is_file():
            text = f.read_text(errors="replace")
            assert "hf_do_not_leak" not in text and "also_secret" not in text, f


def test_preflight_strict_refuses_before_launch_with_numbers(tmp_path):
    path = write_scenario(
        tmp_path,
        sim_scenario("""\
        - name: huge
          hicache: {size_gb: 500}
        """),
    )
    scenario = load_scenario(path)
    scenario.preflight.mode = "strict"
    outcome = run_scenario(scenario, RunOptions(results_dir=tmp_path / "results", live_progress=False))
    status = json.loads((outcome.run_dir / "huge" / "status.json").read_text())
    assert status["state"] == "refused" and status["cause"] == "preflight"
    assert status["cause_detail"]["requested_gb"] > status["cause_detail"]["budget_gb"]
    assert not (outcome.run_dir / "huge" / "server.log").exists()  # nothing was launched
    assert outcome.exit_code == 1


def test_unclean_cooldown_marks_the_next_variant(tmp_path, monkeypatch):
    from harness.run import cooldown

    real = cooldown.wait
    calls = []

    def first_unclean(*args, **kwargs):
        result = real(*args, **kwargs)
        calls.append(result)
        if len(calls) == 1:  # as if GPU memory had not come back after the first server
            return {"clean": False, "reason": "GPU 0 still holds 5000 MiB"}
        return result

    monkeypatch.setattr(cooldown, "wait", first_unclean)
    path = write_scenario(tmp_path, sim_scenario("- name: a\n- name: b\n"))
    outcome = run_scenario(load_scenario(path), RunOptions(results_dir=tmp_path / "results", live_progress=False))
    a = json.loads((outcome.run_dir / "a" / "status.json").read_text())
    b = json.loads((outcome.run_dir / "b" / "status.json").read_text())
    assert a["env_not_clean"] is False and b["env_not_clean"] is True


def test_progress_plain_lines_when_not_a_terminal():
    out = io.StringIO()
    progress = Progress(3, stream=out, live=False, heartbeat_s=3600)
    progress.variant(2, "on-r2")
    progress.phase("parallel_prefixes/pass2")
    progress.note("variant on-r2: ok")
    progress.close()
    lines = out.getvalue().splitlines()
    assert any("variant 2/3 on-r2 | parallel_prefixes/pass2" in line for line in lines)
    assert not any("\r" in line or "\x1b" in line for line in lines)


def test_preflight_mode_option_overrides_the_scenario(tmp_path):
    """RunOptions.preflight_mode (``--preflight strict``) overrides scenario.preflight.mode."""
    path = write_scenario(
        tmp_path,
        sim_scenario("""\
        - name: huge
          hicache: {size_gb: 500}
        """),
    )
    scenario = load_scenario(path)
    assert scenario.preflight.mode == "warn"
    outcome = run_scenario(
        scenario,
        RunOptions(results_dir=tmp_path / "results", live_progress=False, preflight_mode="strict"),
    )
    status = json.loads((outcome.run_dir / "huge" / "status.json").read_text())
    assert status["state"] == "refused" and status["cause"] == "preflight"


def test_the_run_redactor_learns_values_not_switches(tmp_path):
    """Secret values come from the scenario as written, the variants as expanded, the argv and
    the environment; a switch under a credential name (``true``) is not scrubbed from every text."""
    path = write_scenario(
        tmp_path,
        sim_scenario("""\
        - name: a
          env: {HF_TOKEN: "${PLANTED:-hf_from_default}", MULTI_SECRET: "line-one-secret\\nline-two-secret"}
        """),
    )
    r = run_redactor(
        load_scenario(path),
        ["harness", "--api-key=argv-key-1"],
        environ={"HF_HUB_DISABLE_TOKEN": "true", "GITHUB_TOKEN": "ghs_abcdef", "HOME": "/root"},
    )
    assert {"hf_from_default", "argv-key-1", "ghs_abcdef", "line-one-secret", "line-two-secret"} <= r.values
    assert "true" not in r.values and "/root" not in r.values
    assert r.text("--enable-metrics: true; token ghs_abcdef") == "--enable-metrics: true; token ***"


def test_a_preflight_that_does_not_fit_is_said_before_launch(tmp_path, capsys):
    """The host-pool prediction's "does not fit" is printed before the server starts, in warn mode."""
    from harness.run.runner import RunOptions, run_scenario
    from harness.scenario import load_scenario

    root = Path(__file__).resolve().parents[2]
    outcome = run_scenario(
        load_scenario(root / "scenarios" / "sim_smoke.yaml"),
        RunOptions(results_dir=tmp_path / "r", only=["on-200gb"], live_progress=False),
    )
    err = capsys.readouterr().err
    said, started = err.find("preflight: on-200gb: does not fit"), err.find("starting (attempt 1)")
    assert outcome.exit_code == 0 and 0 <= said < started

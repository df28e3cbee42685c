"""Secrets never reach a file: one naming rule, one value-based redactor."""

from __future__ import annotations

import pytest

from harness.core.yaml_lines import load_yaml_text
from harness.spec.values import fmt_num  # noqa: F401 - the scenario package imports cleanly first
from harness.store.secrets import REDACTED, Redactor, is_secret_name, secret_values_in


@pytest.mark.parametrize(
    "name",
    [
        "HF_TOKEN",
        "--api-key",
        "api_key",
        "OPENAI_API_KEY",
        "db_password",
        "AWS_SECRET_ACCESS_KEY",
        "X_CREDENTIALS",
        "Authorization",
        "cookie",
        "token",
    ],
)
def test_secret_names(name):
    assert is_secret_name(name)


@pytest.mark.parametrize(
    "name",
    [
        "--max-total-tokens",
        "prompt_tokens",
        "eos_token_id",
        "sessions",
        "passes",
        "SGLANG_HICACHE_HOST_ALLOC",
        "--skip-tokenizer-init",
        "keyboard",
        "monkey",
    ],
)
def test_not_secret_names(name):
    assert not is_secret_name(name)


# A dozen shapes a secret takes in a scenario file.
SCENARIO = """\
name: t
server:
  backend: sglang
  model_path: /m
  args: {--api-key: s3cret-flow-map, --max-total-tokens: 4096}
  extra_args: "--admin-api-key s3cret-extra --tp 1"
  env:
    HF_TOKEN: s3cret-block
    "QUOTED_TOKEN": 's3cret-quoted'
    MULTI_SECRET: |
      s3cret-block-scalar
variants:
  - name: off
    env: {WANDB_API_KEY: "s3cret-variant-env"}
    args:
      --api-key=s3cret-eq: true
notes:
  auth: {password: s3cret-nested}
  db_password: >-
    s3cret-folded
"""


def test_every_yaml_shape_is_found_and_scrubbed():
    data = load_yaml_text(SCENARIO, "s.yaml").data
    r = Redactor().learn(data)
    scrubbed = r.text(SCENARIO)
    assert "s3cret" not in scrubbed, [line for line in scrubbed.splitlines() if "s3cret" in line]
    assert "4096" in scrubbed and "--max-total-tokens" in scrubbed  # nothing else touched


def test_json_objects_argv_and_env():
    r = Redactor().learn({"env": {"HF_TOKEN": "hf_abcdef"}})
    obj = {
        "argv": ["python", "-m", "sglang", "--api-key", "k-123456", "--port", "1"],
        "env": {"HF_TOKEN": "hf_abcdef", "PATH": "/bin"},
        "log_excerpt": "server_args=ServerArgs(api_key='k-123456', hf='hf_abcdef')",
        "nested": [{"password": "pw-7777"}],
    }
    r.learn(obj["argv"])
    out = r.obj(obj)
    assert out["argv"] == ["python", "-m", "sglang", "--api-key", REDACTED, "--port", "1"]
    assert out["env"] == {"HF_TOKEN": REDACTED, "PATH": "/bin"}
    assert "k-123456" not in out["log_excerpt"] and "hf_abcdef" not in out["log_excerpt"]
    assert out["nested"] == [{"password": REDACTED}]


def test_linear_on_a_huge_line():
    """The old pattern-based redaction was quadratic on a long comment line (hours on 1 MiB)."""
    r = Redactor(values={"s3cret-value"})
    text = "# " + "x" * 5_000_000 + " s3cret-value"
    assert r.text(text).endswith(" " + REDACTED)


def test_short_values_are_not_scrubbed_from_free_text():
    r = Redactor().learn({"TOKEN": "1"})
    assert r.text("tp 1 of 1") == "tp 1 of 1"
    assert r.obj({"TOKEN": "1"}) == {"TOKEN": REDACTED}
    assert secret_values_in({"TOKEN": "1"}) == {"1"}


def test_a_secret_matrix_axis_never_becomes_a_name(tmp_path):
    from harness.scenario import load_scenario

    p = tmp_path / "s.yaml"
    p.write_text(
        "name: t\nserver: {backend: sglang, model_path: /m}\nvariants: [{name: off}]\n"
        "matrix:\n  - prefix: on\n    hicache: {ratio: 2}\n"
        "    axes: {env.HF_TOKEN: [hf_aaaa1111, hf_bbbb2222], args.--api-key: [key-zzzz9999]}\n"
    )
    variants = load_scenario(p, {}).expand_variants()
    names = [v.name for v in variants]
    assert names == ["off", "on-HF_TOKEN_secret1-api-key_secret1", "on-HF_TOKEN_secret2-api-key_secret1"]
    assert variants[1].env["HF_TOKEN"] == "hf_aaaa1111"  # the value itself still reaches the server


def test_scenario_env_keeps_only_harmless_tuning_values():
    """MYSQL_PWD and a *_TOKEN_FOLDED are no tuning knobs: their values are recorded as the name
    and a hash, and learnt as secrets to scrub; sglang/CUDA/NCCL tuning is kept as written."""
    from harness.host import fingerprint
    from harness.store.secrets import hidden_value, scrub

    env = {
        "MYSQL_PWD": "hunter2-hunter2",
        "GH_TOKEN_FOLDED": "ghp-folded-0123",
        "NCCL_DEBUG": "INFO",
        "SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR": "/tmp/hicache",
        "CUDA_VISIBLE_DEVICES": "0,1",
        "SGLANG_API_KEY": "sk-in-a-tuning-prefix",
    }
    r = Redactor().learn_env(env)
    out = fingerprint.allowlisted_env({}, env, r)
    assert out["MYSQL_PWD"] == hidden_value("hunter2-hunter2") and out["MYSQL_PWD"].startswith("*** sha256:")
    assert out["GH_TOKEN_FOLDED"] == hidden_value("ghp-folded-0123")
    assert out["SGLANG_API_KEY"] == REDACTED  # a credential name is never a knob
    assert (out["NCCL_DEBUG"], out["CUDA_VISIBLE_DEVICES"]) == ("INFO", "0,1")
    assert out["SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR"] == "/tmp/hicache"
    assert r.text("login with hunter2-hunter2 as ghp-folded-0123") == "login with *** as ***"
    assert scrub("server said hunter2-hunter2") == "server said ***"

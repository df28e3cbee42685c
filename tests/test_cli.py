"""The `harness` command as a user types it: help everywhere, one-line errors with exit 2 and no
traceback for every kind of bad scenario, dry runs, schema."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def harness(*args: str, env: dict | None = None, cwd: Path = REPO) -> subprocess.CompletedProcess:
    full_env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    full_env.update(env or {})
    return subprocess.run([sys.executable, "-m", "harness", *args], capture_output=True, text=True,
                          cwd=cwd, env=full_env, timeout=120)


@pytest.mark.parametrize("sub", ["run", "validate", "schema", "report", "compare", "history", "load", "merge",
                                 "sim", "probe"])
def test_every_subcommand_has_help(sub):
    r = harness(sub, "--help")
    assert r.returncode == 0, r.stderr
    assert "usage" in r.stdout.lower()


BAD = {
    "syntax.yaml": ("name: x\nserver: {backend: sim\n", ":"),
    "unknown.yaml": ("name: x\nserver: {backend: sim, model_path: m, bogus: 1}\n", "server.bogus"),
    "enum.yaml": ("name: x\nserver: {backend: sim, model_path: m}\nvariants:\n  - name: a\n"
                  "    hicache: {mem_layout: page-first}\n", "variants[0].hicache.mem_layout"),
    "list.yaml": ("- a\n- b\n", "mapping"),
    "bomb.yaml": ("a: &a [x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
                  "c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]\nd: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]\n"
                  "e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d]\nf: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e]\n"
                  "g: [*f, *f, *f, *f, *f, *f, *f, *f, *f]\n", ""),
}


@pytest.mark.parametrize("name", sorted(BAD) + ["latin1.yaml"])
def test_bad_scenarios_exit_2_with_one_clear_line_and_no_traceback(tmp_path, name):
    path = tmp_path / name
    if name == "latin1.yaml":
        path.write_bytes("name: caf\xe9\n".encode("latin-1"))
        expect = "UTF-8"
    else:
        text, expect = BAD[name]
        path.write_text(text)
    r = harness("validate", str(path))
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "Traceback" not in r.stderr and "Traceback" not in r.stdout
    first = r.stderr.strip().splitlines()[0]
    assert first.startswith(str(path) + ":"), first
    assert expect in r.stderr
    r2 = harness("run", str(path), "--results-dir", str(tmp_path / "results"))
    assert r2.returncode == 2 and not (tmp_path / "results").exists()  # nothing started


def test_validate_and_dry_run_of_shipped_scenarios():
    for scenario in ["scenarios/sim_smoke.yaml", "scenarios/h200_smoke.yaml"]:
        assert harness("validate", scenario).returncode == 0
    r = harness("run", "scenarios/wsl_tp2.yaml", "--dry-run", env={"MODEL_PATH": "/models/gdn",
                                                                   "SGLANG_EXTRA_ARGS": "--attention-backend triton"})
    assert r.returncode == 0, r.stderr
    assert "--tp-size 2" in r.stdout and "--attention-backend triton" in r.stdout
    assert "SGLANG_HICACHE_HOST_ALLOC=pin" in r.stdout
    r = harness("run", "scenarios/sim_smoke.yaml", "--only", "nope", "--dry-run")
    assert r.returncode == 2 and "no variant named nope" in r.stderr


def test_unset_variable_is_a_clear_error():
    r = harness("validate", "scenarios/wsl_tp2.yaml", env={"MODEL_PATH": ""})
    # an empty value is still a value; an unset one without default is the error
    env = {k: v for k, v in os.environ.items() if k != "MODEL_PATH"}
    full = subprocess.run([sys.executable, "-m", "harness", "validate", "scenarios/wsl_tp2.yaml"], capture_output=True,
                          text=True, cwd=REPO, env={**env, "PYTHONPATH": str(REPO)}, timeout=60)
    assert full.returncode == 2 and "MODEL_PATH" in full.stderr and "server.model_path" in full.stderr
    assert r.returncode == 2


def test_schema_is_json_schema():
    r = harness("schema")
    schema = json.loads(r.stdout)
    assert r.returncode == 0 and "properties" in schema and "variants" in schema["properties"]


def test_run_with_probe_keeps_the_probe_in_the_manifest(tmp_path):
    from tests.test_lifecycle import write_scenario

    path = write_scenario(tmp_path, "- name: off\n")
    r = harness("run", str(path), "--results-dir", str(tmp_path / "results"), "--no-report", "--probe")
    assert r.returncode == 0, r.stderr
    (manifest,) = (tmp_path / "results").glob("*/*/manifest.json")
    probe = json.loads(manifest.read_text())["probe"]
    assert probe["gpu_present"] is False and probe["reason"]  # this machine has no GPU
    assert "wsl" in probe and probe["kernel_release"]

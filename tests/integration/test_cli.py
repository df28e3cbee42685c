"""The `harness` command as a user types it: help everywhere, one-line errors with exit 2 and no
traceback for every kind of bad scenario, dry runs, schema.

Most cases call `harness.cli.main` in this process (what `python -m harness` runs, without a
second of interpreter start-up each); one case per promise runs the real command in a subprocess."""

from __future__ import annotations

import json
import logging

import pytest

from harness.cli import main
from harness.core.exit_codes import ExitCode
from tests.conftest import REPO, run_harness, sim_scenario, write_scenario


def cli(capsys, caplog, *args: object) -> tuple[int, str, str]:
    """``main(args)`` in this process: (exit code, stdout, stderr). Fails on a logged error (a
    traceback the command would print)."""
    try:
        rc = main([str(a) for a in args])
    except SystemExit as exc:  # argparse's --help and usage errors
        rc = exc.code if isinstance(exc.code, int) else ExitCode.BAD_INPUT
    out, err = capsys.readouterr()
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert not errors, [r.getMessage() for r in errors]
    return rc, out, err


SUBCOMMANDS = ["run", "validate", "schema", "report", "compare", "history", "load", "merge", "sim", "probe"]


@pytest.mark.parametrize("sub", SUBCOMMANDS)
def test_every_subcommand_has_help(sub, capsys, caplog):
    rc, out, err = cli(capsys, caplog, sub, "--help")
    assert rc == 0, err
    assert "usage" in out.lower()


def test_help_as_typed():
    r = run_harness("run", "--help")
    assert r.returncode == 0, r.stderr
    assert "usage" in r.stdout.lower() and "--resume" in r.stdout


BAD = {
    "syntax.yaml": ("name: x\nserver: {backend: sim\n", ":"),
    "unknown.yaml": ("name: x\nserver: {backend: sim, model_path: m, bogus: 1}\n", "server.bogus"),
    "enum.yaml": (
        "name: x\nserver: {backend: sim, model_path: m}\nvariants:\n  - name: a\n"
        "    hicache: {mem_layout: page-first}\n",
        "variants[0].hicache.mem_layout",
    ),
    "list.yaml": ("- a\n- b\n", "mapping"),
    "bomb.yaml": (
        "a: &a [x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
        "c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]\nd: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]\n"
        "e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d]\nf: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e]\n"
        "g: [*f, *f, *f, *f, *f, *f, *f, *f, *f]\n",
        "",
    ),
}


def _write_bad(tmp_path, name: str):
    path = tmp_path / name
    if name == "latin1.yaml":
        path.write_bytes("name: caf\xe9\n".encode("latin-1"))
        return path, "UTF-8"
    text, expect = BAD[name]
    path.write_text(text)
    return path, expect


@pytest.mark.parametrize("name", sorted(BAD) + ["latin1.yaml"])
def test_bad_scenarios_exit_2_with_one_clear_line_and_no_traceback(tmp_path, name, capsys, caplog):
    path, expect = _write_bad(tmp_path, name)
    rc, out, err = cli(capsys, caplog, "validate", path)
    assert rc == ExitCode.BAD_INPUT, (out, err)
    assert "Traceback" not in err and "Traceback" not in out
    first = err.strip().splitlines()[0]
    assert first.startswith(str(path) + ":"), first
    assert expect in err
    rc, out, err = cli(capsys, caplog, "run", path, "--results-dir", tmp_path / "results")
    assert rc == ExitCode.BAD_INPUT and not (tmp_path / "results").exists()  # nothing started


def test_a_bad_scenario_as_typed_is_one_line_without_traceback(tmp_path):
    path, expect = _write_bad(tmp_path, "enum.yaml")
    r = run_harness("run", path, "--results-dir", tmp_path / "results")
    assert r.returncode == ExitCode.BAD_INPUT, (r.stdout, r.stderr)
    assert "Traceback" not in r.stderr + r.stdout
    assert r.stderr.strip().splitlines()[0].startswith(str(path) + ":") and expect in r.stderr
    assert not (tmp_path / "results").exists()


def test_validate_and_dry_run_of_shipped_scenarios(capsys, caplog, monkeypatch):
    monkeypatch.chdir(REPO)
    for scenario in ["scenarios/sim_smoke.yaml", "scenarios/h200_smoke.yaml"]:
        rc, _, err = cli(capsys, caplog, "validate", scenario)
        assert rc == 0, err
    monkeypatch.setenv("MODEL_PATH", "/models/gdn")
    monkeypatch.setenv("SGLANG_EXTRA_ARGS", "--attention-backend triton")
    rc, out, err = cli(capsys, caplog, "run", "scenarios/wsl_tp2.yaml", "--dry-run")
    assert rc == 0, err
    assert "--tp-size 2" in out and "--attention-backend triton" in out
    assert "SGLANG_HICACHE_HOST_ALLOC=pin" in out
    rc, _, err = cli(capsys, caplog, "run", "scenarios/sim_smoke.yaml", "--only", "nope", "--dry-run")
    assert rc == ExitCode.BAD_INPUT and "no variant named nope" in err


def test_unset_variable_is_a_clear_error(capsys, caplog, monkeypatch):
    monkeypatch.chdir(REPO)
    monkeypatch.delenv("MODEL_PATH", raising=False)
    rc, _, err = cli(capsys, caplog, "validate", "scenarios/wsl_tp2.yaml")
    assert rc == ExitCode.BAD_INPUT and "MODEL_PATH" in err and "server.model_path" in err
    monkeypatch.setenv("MODEL_PATH", "")  # set but empty: named as such, still an error
    rc, _, err = cli(capsys, caplog, "validate", "scenarios/wsl_tp2.yaml")
    assert rc == ExitCode.BAD_INPUT and "MODEL_PATH" in err


def test_schema_is_json_schema(capsys, caplog):
    rc, out, _ = cli(capsys, caplog, "schema")
    schema = json.loads(out)
    assert rc == 0 and "properties" in schema and "variants" in schema["properties"]


def test_run_with_probe_keeps_the_probe_in_the_manifest(tmp_path, capsys, caplog):
    path = write_scenario(tmp_path, sim_scenario("- name: off\n"))
    rc, _, err = cli(capsys, caplog, "run", path, "--results-dir", tmp_path / "results", "--no-report", "--probe")
    assert rc == 0, err
    (manifest,) = (tmp_path / "results").glob("*/*/manifest.json")
    probe = json.loads(manifest.read_text())["probe"]
    assert probe["gpu_present"] is False and probe["reason"]  # this machine has no GPU
    assert "wsl" in probe and probe["kernel_release"]


@pytest.mark.parametrize(
    "host, cmd, message",
    [
        ("256.256.256.256", "validate", "'256.256.256.256' is not an IP address (each of its four numbers is 0-255)"),
        ("no-such-host.invalid", "run", "variant off: server.host 'no-such-host.invalid': cannot listen there ("),
    ],
)
def test_a_host_that_is_no_address_or_does_not_resolve_is_one_line_exit_2(tmp_path, host, cmd, message):
    """Both crashed `run` with a traceback, exit 3."""
    text = sim_scenario("- name: off\n").replace("  model_path:", f"  host: {host}\n  model_path:", 1)
    r = run_harness(cmd, write_scenario(tmp_path, text), "--results-dir", tmp_path / "results")
    assert r.returncode == ExitCode.BAD_INPUT, r.stdout + r.stderr
    errors = [
        x for x in r.stderr.splitlines() if x.strip() and "plan for a verdict" not in x and "harness:   " not in x
    ]
    assert len(errors) == 1 and message in errors[0], errors  # the plan's lines aside, one line
    assert "Traceback" not in r.stderr and not (tmp_path / "results").exists()


def test_a_results_folder_the_file_system_refuses_is_one_line_exit_2(tmp_path):
    """A results folder under a regular file (and, alike, one read-only or on a full disk): the
    file and why in one line, exit 2 — a traceback, exit 3, before."""
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    text = sim_scenario("- name: off\n")
    r = run_harness("run", write_scenario(tmp_path, text), "--results-dir", blocker / "results", "--no-report")
    assert r.returncode == ExitCode.BAD_INPUT, r.stdout + r.stderr
    assert "Traceback" not in r.stderr
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith(f"harness: {blocker / 'results'}") and last.endswith(": Not a directory"), r.stderr[-1500:]

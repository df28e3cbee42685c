"""Builds (harness/run/builds.py): named sglang installs per variant, verified before any server
starts, recorded per variant, confirmed against what the server reports."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from harness import cli
from harness.compare.runs import build_change
from harness.core.exit_codes import ExitCode
from harness.report.header import build_label
from harness.run import builds
from harness.run.manifest import dry_run_text
from harness.run.runner import RunOptions, run_scenario
from harness.scenario import ScenarioError, load_scenario, load_scenario_text, variant_config_hash
from harness.server.process import ServerProcess
from harness.store.manifest import BuildInfo
from tests.conftest import REPO, sim_scenario, write_scenario


def fake_sglang(root: Path, version: str, *, layout: str = "checkout", git: bool = False) -> Path:
    """A folder holding a tiny ``sglang`` package that declares ``version``: ``python/sglang``
    (a git checkout's layout) or ``sglang/`` directly; optionally committed to git."""
    pkg = (root / "python" / "sglang") if layout == "checkout" else (root / "sglang")
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(f'__version__ = "{version}"\n')
    if git:
        run = {"cwd": root, "check": True, "capture_output": True}
        subprocess.run(["git", "init", "-q", "-b", "patched-branch"], **run)
        subprocess.run(["git", "add", "-A"], **run)
        subprocess.run(
            ["git", "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-q", "-m", "patch"],
            **run,
        )
    return root


@pytest.fixture
def no_server_starts(monkeypatch):
    """Every ServerProcess.start is recorded (and refused): a refused build starts none."""
    started: list = []

    def start(self):
        started.append(self.spec.argv)
        raise AssertionError("a server was started")

    monkeypatch.setattr(ServerProcess, "start", start)
    return started


def _sglang_scenario(builds_yaml: str, variants: str = "- name: a\n  build: patched\n") -> str:
    return (
        textwrap.dedent("""\
        name: real
        server:
          backend: sglang
          python: python3
          model_path: /nonexistent/model
        sampling: {enabled: false}
        """)
        + "builds:\n"
        + textwrap.indent(textwrap.dedent(builds_yaml), "  ")
        + "variants:\n"
        + textwrap.indent(variants, "  ")
    )


def _refused(capsys, path: Path, results_dir: Path) -> str:
    rc = cli.main(["run", str(path), "--results-dir", str(results_dir), "--no-report"])
    err = capsys.readouterr().err
    assert rc == ExitCode.BAD_INPUT, err
    assert not results_dir.exists() or not any(results_dir.rglob("manifest.json")), "a run folder was written"
    return err


# ------------------------------------------------------------------------- refused before launch


@pytest.mark.parametrize("backend", ["sim", "sglang"])
def test_a_missing_sglang_source_is_refused_before_any_server_starts(tmp_path, capsys, no_server_starts, backend):
    missing = tmp_path / "no-such-checkout"
    if backend == "sim":
        text = sim_scenario(
            "- name: a\n  build: patched\n- name: b\n",
            extra=f"builds:\n  patched: {{sglang_source: {missing}}}\n",
        )
    else:
        text = _sglang_scenario(f"patched: {{sglang_source: {missing}}}\n")
    err = _refused(capsys, write_scenario(tmp_path, text), tmp_path / "results")
    assert f"sglang_source {missing} does not exist" in err
    assert "build 'patched' (variants a)" in err
    assert no_server_starts == []


def test_a_source_that_is_not_sglang_is_refused(tmp_path, capsys, no_server_starts):
    other = tmp_path / "some-repo"
    (other / "python" / "vllm").mkdir(parents=True)
    (other / "python" / "vllm" / "__init__.py").write_text("")
    text = _sglang_scenario(f"patched: {{sglang_source: {other}}}\n")
    err = _refused(capsys, write_scenario(tmp_path, text), tmp_path / "results")
    assert f"{other} is not a checkout of sglang" in err
    assert no_server_starts == []


def test_an_interpreter_that_imports_sglang_from_elsewhere_is_refused_with_both_paths(
    tmp_path, capsys, no_server_starts
):
    """A wrapper that sets its own PYTHONPATH (the server would run the installed sglang, not the
    patched checkout): refused, naming the imported file and the checkout."""
    patched = fake_sglang(tmp_path / "patched", "0.5.17+patch")
    site = fake_sglang(tmp_path / "site", "0.5.17", layout="flat")
    wrapper = tmp_path / "python-wrapper"
    wrapper.write_text(f'#!/bin/sh\nPYTHONPATH={site} exec {sys.executable} "$@"\n')
    wrapper.chmod(0o755)
    text = _sglang_scenario(f"patched: {{python: {wrapper}, sglang_source: {patched}}}\n")
    err = _refused(capsys, write_scenario(tmp_path, text), tmp_path / "results")
    assert f"imports sglang from {site / 'sglang' / '__init__.py'}" in err
    assert f"not from sglang_source {patched / 'python'}" in err
    assert no_server_starts == []

    # the same interpreter without the override imports the checkout: accepted, recorded
    wrapper.write_text(f'#!/bin/sh\nexec {sys.executable} "$@"\n')
    scn = load_scenario(write_scenario(tmp_path, text))
    (check,) = builds.verify_builds(scn, scn.expand_variants()).values()
    assert check.version == check.imported_version == "0.5.17+patch"
    assert check.imported_file == str(patched / "python" / "sglang" / "__init__.py")


def test_the_dry_run_and_validate_check_a_builds_source(tmp_path, capsys, no_server_starts):
    """`--dry-run` printed the argv of a build whose checkout did not exist, or whose interpreter
    imported another sglang, and exited 0; `validate` said ok. Both now refuse what the run refuses
    (exit 2), and the dry run says which sglang each build imports, from which commit."""
    missing = tmp_path / "no-such-checkout"
    path = write_scenario(tmp_path, _sglang_scenario(f"patched: {{sglang_source: {missing}}}\n"))
    for command in (["validate", str(path)], ["run", str(path), "--dry-run"]):
        assert cli.main(command) == ExitCode.BAD_INPUT, command
        err = capsys.readouterr().err
        assert f"builds.patched.sglang_source: sglang_source {missing} does not exist" in err, err

    patched = fake_sglang(tmp_path / "patched", "0.5.17+patch", git=True)
    site = fake_sglang(tmp_path / "site", "0.5.17", layout="flat")
    wrapper = tmp_path / "python-wrapper"
    wrapper.write_text(f'#!/bin/sh\nPYTHONPATH={site} exec {sys.executable} "$@"\n')
    wrapper.chmod(0o755)
    path = write_scenario(tmp_path, _sglang_scenario(f"patched: {{python: {wrapper}, sglang_source: {patched}}}\n"))
    assert cli.main(["run", str(path), "--dry-run"]) == ExitCode.BAD_INPUT
    assert f"imports sglang from {site / 'sglang' / '__init__.py'}" in capsys.readouterr().err

    wrapper.write_text(f'#!/bin/sh\nexec {sys.executable} "$@"\n')
    assert cli.main(["run", str(path), "--dry-run"]) == ExitCode.OK
    out = capsys.readouterr().out
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=patched, capture_output=True, text=True).stdout[:12]
    assert (
        f"# build 'patched' (variant a): sglang 0.5.17+patch imported from "
        f"{patched / 'python' / 'sglang' / '__init__.py'} inside {patched} (commit {commit}, branch patched-branch)"
    ) in out, out
    assert no_server_starts == []


def test_a_source_whose_sglang_does_not_import_is_refused(tmp_path):
    """A checkout whose sglang fails to import is refused with the import's error, not started."""
    patched = fake_sglang(tmp_path / "patched", "1")
    (patched / "python" / "sglang" / "__init__.py").write_text("raise ImportError('broken checkout')\n")
    scn = load_scenario_text(_sglang_scenario(f"patched: {{sglang_source: {patched}}}\n"), base_dir=tmp_path)
    with pytest.raises(builds.BuildError, match="cannot import sglang from .*broken checkout"):
        builds.verify_builds(scn, scn.expand_variants())


def test_a_build_without_source_that_cannot_import_sglang_is_recorded_not_refused(tmp_path):
    """No source to check: the server start fails as a classified startup failure, as before."""
    scn = load_scenario_text(_sglang_scenario("stock: {python: /nonexistent/python3}\n", "- name: a\n  build: stock\n"))
    (check,) = builds.verify_builds(scn, scn.expand_variants()).values()
    assert check.version is None and "nonexistent" in check.error


# ------------------------------------------------------------------------- two builds in one run


def test_two_builds_in_one_run_record_two_versions_and_the_matrix_crosses_them(tmp_path):
    """Stock vs patched in one run (matrix axis `build`): each variant's manifest entry and
    server_info.json carry its build's version; the patched checkout's git state and imported
    path are recorded."""
    patched = fake_sglang(tmp_path / "patched", "0.5.17+patch", git=True)
    text = sim_scenario(
        "[]\n",
        "- kind: cold_prefill\n  n: 1\n  prompt_tokens: 64\n",
        time_scale=0.01,
        startup_s=0,
        extra=textwrap.dedent(f"""\
        builds:
          stock:
            env: {{HARNESS_SIM_VERSION: 0.5.17-stock}}
          patched:
            sglang_source: {patched}
            env: {{HARNESS_SIM_VERSION: 0.5.17-patched}}
        matrix:
          - prefix: "on"
            hicache: {{mem_layout: page_first}}
            axes:
              build: [stock, patched]
              hicache.ratio: [2]
        """),
    )
    path = write_scenario(tmp_path, text)
    scn = load_scenario(path)
    by_name = {v.name: v for v in scn.expand_variants()}
    assert list(by_name) == ["on-stock-r2", "on-patched-r2"]
    assert [v.build for v in by_name.values()] == ["stock", "patched"]
    assert by_name["on-patched-r2"].matrix_values == {"build": "patched", "hicache.ratio": 2}
    outcome = run_scenario(scn, RunOptions(results_dir=tmp_path / "results"))
    assert outcome.exit_code == ExitCode.OK, outcome.verdict.lines()
    manifest = json.loads((outcome.run_dir / "manifest.json").read_text())
    got = {e["name"]: e["build"] for e in manifest["variants"]}
    assert {n: (b["build"], b["version"]) for n, b in got.items()} == {
        "on-stock-r2": ("stock", "0.5.17-stock"),
        "on-patched-r2": ("patched", "0.5.17-patched"),
    }
    p = got["on-patched-r2"]
    assert p["sglang_source"] == str(patched)
    assert p["imported_file"] == str(patched / "python" / "sglang" / "__init__.py")
    assert p["imported_version"] == "0.5.17+patch"
    assert p["git"]["branch"] == "patched-branch" and len(p["git"]["commit"]) == 40 and p["git"]["dirty"] is False
    assert got["on-stock-r2"]["git"] is None and got["on-stock-r2"]["sglang_source"] is None
    for name, b in got.items():  # what the server itself said matches
        info = json.loads((outcome.run_dir / name / "server_info.json").read_text())
        assert info["version"] == b["version"]


def test_a_server_that_reports_another_version_fails_its_variant(tmp_path, monkeypatch):
    """Confirmed after start: a server reporting another version than its build's is FAILED
    (cause build_mismatch), the run goes on and exits 1."""
    real = builds.verify_builds

    def claims_patched(scenario, variants, timeout_s=builds.IMPORT_TIMEOUT_S):
        checks = real(scenario, variants, timeout_s)
        c = checks["b"]
        checks["b"] = builds.BuildCheck(c.build, c.backend, c.python, None, "9.9-patched", None, None, None)
        return checks

    monkeypatch.setattr(builds, "verify_builds", claims_patched)
    path = write_scenario(tmp_path, sim_scenario("- name: a\n- name: b\n", time_scale=0.01, startup_s=0))
    outcome = run_scenario(load_scenario(path), RunOptions(results_dir=tmp_path / "results"))
    assert outcome.exit_code == ExitCode.FAILED
    status = {v.name: v for v in outcome.variants}
    assert status["a"].state == "ok"
    assert status["b"].state == "failed" and status["b"].cause == builds.BUILD_MISMATCH
    detail = json.loads((outcome.run_dir / "b" / "status.json").read_text())["cause_detail"]
    entry = json.loads((outcome.run_dir / "manifest.json").read_text())["variants"][0]
    assert entry["build"]["build"] == "default" and entry["build"]["version"] == "0.5.17-sim"
    assert detail["expected"] == "9.9-patched" and detail["reported"] == "0.5.17-sim"


def test_confirm_server_compares_versions():
    check = builds.BuildCheck(
        "patched", "sglang", "python3", "/src", "0.5.17+p", "/src/python/sglang/__init__.py", "0.5.17+p", None
    )
    assert builds.confirm_server(check, "0.5.17+p") is None
    problem = builds.confirm_server(check, "0.5.17")
    assert "build 'patched' is sglang 0.5.17+p" in problem and "reports version 0.5.17" in problem
    assert builds.confirm_server(check, None) is None  # nothing reported: nothing to compare


# ------------------------------------------------------------------------- the scenario block


def _load(extra: str, variants: str = "- name: a\n") -> object:
    return load_scenario_text(sim_scenario(variants, extra=extra), base_dir=REPO / "scenarios")


def test_unknown_builds_are_named_with_did_you_mean():
    with pytest.raises(ScenarioError) as exc:
        _load(
            "builds:\n  patched: {}\nmatrix:\n  - prefix: m\n    axes: {build: [patched, stok]}\n",
            "- name: a\n  build: pached\n",
        )
    text = str(exc.value)
    assert "variants[0].build: unknown build 'pached' (did you mean 'patched'?)" in text
    assert "matrix[0].axes.build[1]: unknown build 'stok'" in text


def test_default_is_reserved_and_sim_builds_take_no_python():
    with pytest.raises(ScenarioError) as exc:
        _load("builds:\n  default: {}\n  p: {python: /usr/bin/python3}\n")
    text = str(exc.value)
    assert "builds.default: 'default' is the server block's own build" in text
    assert "builds.p.python: only with backend: sglang" in text


def test_build_env_and_args_sit_between_the_servers_and_the_variants(tmp_path):
    text = _sglang_scenario(
        "p:\n  python: /opt/p/bin/python\n  sglang_source: ./src\n  env: {A: build, B: build}\n"
        "  args: {--x: 1, --y: 1}\n  extra_args: --z 3\n",
        "- name: a\n  build: p\n  env: {B: variant}\n  args: {--y: 2}\n- name: b\n",
    ).replace("  model_path: /nonexistent/model\n", "  model_path: /m\n  env: {A: server}\n  args: {--x: 0}\n")
    fake_sglang(tmp_path / "src", "0.5.17+p")
    scn = load_scenario_text(text, base_dir=tmp_path)
    a, b = scn.expand_variants()
    assert (a.build, a.python, a.sglang_source) == ("p", "/opt/p/bin/python", str(tmp_path / "src"))
    assert a.env == {"A": "build", "B": "variant"} and a.args == {"--x": 1, "--y": 2, "--z": "3"}
    assert (b.build, b.python, b.sglang_source, b.env, b.args) == (
        "default",
        "python3",
        None,
        {"A": "server"},
        {"--x": 0},
    )
    assert variant_config_hash(scn, a) != variant_config_hash(scn, b)


def test_a_scenario_without_builds_keeps_its_config_hashes(tmp_path):
    """Back-compatible: adding a builds block no variant picks changes no variant's hash."""
    base = sim_scenario("- name: a\n- name: b\n  hicache: {ratio: 2}\n")
    with_builds = base + "builds:\n  patched: {env: {HARNESS_SIM_VERSION: x}}\n"
    s1 = load_scenario_text(base, base_dir=REPO / "scenarios")
    s2 = load_scenario_text(with_builds, base_dir=REPO / "scenarios")
    assert [variant_config_hash(s1, v) for v in s1.expand_variants()] == [
        variant_config_hash(s2, v) for v in s2.expand_variants()
    ]


def test_the_h200_builds_scenario_checks_both_builds_and_tells_them_apart(tmp_path):
    """scenarios/gpu/h200_builds.yaml against stand-ins for the site (sglang/ directly in it) and
    make_broken_hicache.sh's copy (python/sglang): both verified, the same version, two imported
    files; the patched copy goes first on the patched variants' PYTHONPATH only."""
    site = fake_sglang(tmp_path / "site", "0.5.17", layout="flat")
    patched = fake_sglang(tmp_path / "patched", "0.5.17")
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text((REPO / "scenarios/models/llama-tiny/config.json").read_text())
    env = {
        "SGLANG_SITE": str(site),
        "PATCHED_SGLANG": str(patched),
        "MODEL_PATH": str(model),
        "SGLANG_PYTHON": sys.executable,
    }
    scn = load_scenario(REPO / "scenarios/gpu/h200_builds.yaml", env=env)
    variants = scn.expand_variants()
    assert [(v.name, v.build) for v in variants] == [
        ("off-stock", "stock"),
        ("off-patched", "patched"),
        ("on-stock", "stock"),
        ("on-patched", "patched"),
    ]
    checks = builds.verify_builds(scn, variants)
    assert {n: c.imported_file for n, c in checks.items()} == {
        "off-stock": str(site / "sglang" / "__init__.py"),
        "on-stock": str(site / "sglang" / "__init__.py"),
        "off-patched": str(patched / "python" / "sglang" / "__init__.py"),
        "on-patched": str(patched / "python" / "sglang" / "__init__.py"),
    }
    assert {c.version for c in checks.values()} == {"0.5.17"}
    text = dry_run_text(scn, variants)
    blocks = {b.split("\n", 1)[0].strip(): b for b in text.split("# variant ")[1:]}
    assert (
        f"PYTHONPATH={patched / 'python'}" in blocks["on-patched"] and "HICACHE_CORRUPT_LOAD=1" in blocks["on-patched"]
    )
    assert str(patched) not in blocks["on-stock"] and "HICACHE_CORRUPT_LOAD" not in blocks["on-stock"]


def test_compare_and_report_name_a_changed_build():
    stock = {"build": "stock", "version": "0.5.17", "git": None, "imported_file": "/site/sglang/__init__.py"}
    patched = {
        "build": "patched",
        "version": "0.5.17",
        "git": {"commit": "a" * 40, "branch": "fix", "dirty": True},
        "imported_file": "/p/python/sglang/__init__.py",
    }
    stock, patched = BuildInfo.from_json(stock), BuildInfo.from_json(patched)
    assert build_change(stock, BuildInfo.from_json(dict(stock.raw))) is None
    assert build_change(None, stock) is None  # a run recorded before builds: nothing to say
    assert build_change(stock, patched) == "build changed: stock 0.5.17 → patched 0.5.17@aaaaaaaaaa+dirty"
    assert build_label(patched) == "patched 0.5.17 @aaaaaaaaaa+dirty"
    assert build_label(None) is None


def test_an_external_run_takes_no_builds():
    """backend: external starts nothing: a builds block is refused (its servers' versions are
    recorded from what they report)."""
    text = textwrap.dedent("""\
        name: ext
        server: {backend: external}
        builds:
          patched: {sglang_source: /x}
        variants:
          - name: a
            url: http://127.0.0.1:30000
        """)
    with pytest.raises(ScenarioError, match="builds: does not apply to backend: external"):
        load_scenario_text(text)

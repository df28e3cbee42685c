"""Rules of the test suite itself: test modules never import each other (shared helpers and fixtures
have one home, tests/conftest.py, plus the helper modules tests/factories.py and
tests/hostile_server.py), and the shared helpers do what the suite relies on."""

from __future__ import annotations

import ast
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import psutil

from harness.scenario import load_scenario
from tests.conftest import MODELS, REPO, reap_orphans, sim_scenario, tiny_scenario, wait_for, write_scenario

TESTS = Path(__file__).resolve().parents[1]


def imported_test_modules(source: str, filename: str = "<test>") -> list[str]:
    """The test modules (``test_*``, or a bare ``conftest`` that would load a second copy) that
    ``source`` imports, at module level or inside functions."""
    found = []
    for node in ast.walk(ast.parse(source, filename)):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            names = [base] if base else []
            if node.level or base in ("tests", ""):  # `from tests import test_x`, `from . import test_x`
                names += [f"{base}.{a.name}" if base else a.name for a in node.names]
        else:
            continue
        for name in names:
            last = name.rpartition(".")[2]
            if last.startswith("test_") or name == "conftest":
                found.append(name)
    return found


def test_no_test_module_imports_another():
    offenders = {
        p.name: imported_test_modules(p.read_text(encoding="utf-8"), str(p)) for p in sorted(TESTS.rglob("*.py"))
    }
    offenders = {name: found for name, found in offenders.items() if found}
    assert offenders == {}, (
        f"test modules importing test modules (move the shared helper to tests/conftest.py): {offenders}"
    )


def test_the_import_rule_sees_every_spelling():
    assert imported_test_modules("from tests.test_lifecycle import write_scenario") == ["tests.test_lifecycle"]
    assert imported_test_modules("def f():\n    import tests.test_shard_kit as k\n") == ["tests.test_shard_kit"]
    assert imported_test_modules("from tests import test_compare") == ["tests.test_compare"]
    assert imported_test_modules("from . import test_compare") == ["test_compare"]
    assert imported_test_modules("from conftest import GOLDEN_RUNS") == ["conftest"]
    assert (
        imported_test_modules(
            "from tests.conftest import GOLDEN_RUNS\nfrom tests.factories import make_record\nimport pytest_randomly\n"
        )
        == []
    )


def test_write_scenario_puts_a_readable_model_next_to_the_scenario(tmp_path):
    path = write_scenario(
        tmp_path,
        sim_scenario(
            "- name: a\n- name: b\n  hicache: {ratio: 2}\n", "- kind: cold_prefill\n  n: 1\n  prompt_tokens: 64\n"
        ),
    )
    assert path == tmp_path / "lifecycle.yaml"
    assert (tmp_path / "models" / "llama-tiny" / "config.json").read_bytes() == (
        MODELS / "llama-tiny" / "config.json"
    ).read_bytes()
    s = load_scenario(path)
    assert [v.name for v in s.expand_variants()] == ["a", "b"]
    assert s.variant("a").model_path == str(tmp_path / "models" / "llama-tiny")
    assert s.server.liveness_idle_s < 1 and s.server.sim.time_scale < 1  # fast by default


def test_tiny_scenario_validates(tmp_path):
    s = load_scenario(write_scenario(tmp_path, tiny_scenario(quality=True)))
    assert [v.name for v in s.expand_variants()] == ["off", "on-r2", "on-r3", "on-r4"]
    assert s.quality.baseline_variant == "off"
    pooled = load_scenario(
        write_scenario(tmp_path, tiny_scenario(n_on=1, max_total_tokens="${TINY_POOL:-8192}"), name="pooled"),
        env={"TINY_POOL": "4096"},
    )
    assert pooled.variant("off").args["--max-total-tokens"] in (4096, "4096")


def test_reap_orphans_finds_and_kills_a_server_left_running(tmp_path):
    """The leak check behind the autouse no_leaked_servers fixture: a simulated server whose log
    is under the test's folder and that is still running is found, killed, and reported."""
    log = tmp_path / "results" / "s" / "run" / "v" / "server.log"
    log.parent.mkdir(parents=True)
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    with log.open("w") as out:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "harness.sim",
                "--model-path",
                str(MODELS / "llama-tiny"),
                "--port",
                "0",
                "--sim-startup-s",
                "0",
                "--sim-host-mem-scale",
                "0.001",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=REPO,
            env=env,
            start_new_session=True,
        )
    try:
        wait_for(lambda: "Started server process" in log.read_text() or proc.poll() is not None, what="sim start")
        assert proc.poll() is None, log.read_text()
        assert reap_orphans(tmp_path) == [proc.pid]
        assert proc.wait(timeout=60) == -signal.SIGKILL
        assert reap_orphans(tmp_path) == []  # gone: nothing left to report
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


NESTED_TEST = """
import subprocess, sys

def test_{name}():
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep({sleep_s})"])
"""


def _nested(pytester, monkeypatch, name: str, sleep_s: float):
    """Run one test in a nested session with this conftest's no_leaked_servers fixture: it starts
    a process that lives ``sleep_s`` and returns without waiting for it."""
    import tests.conftest as conftest

    monkeypatch.setattr(conftest, "SERVER_STOP_GRACE_S", 2.0)
    pytester.makeconftest("from tests.conftest import no_leaked_servers  # noqa: F401\n")
    pytester.makepyfile(**{f"test_{name}": NESTED_TEST.format(name=name, sleep_s=sleep_s)})
    return pytester.runpytest_inprocess("-p", "no:randomly", "-p", "no:cacheprovider")


def test_a_process_that_outlives_its_test_fails_it_and_is_killed(pytester, monkeypatch):
    result = _nested(pytester, monkeypatch, "leaks", sleep_s=600)
    result.assert_outcomes(passed=1, errors=1)  # the test passed; its teardown failed
    (pid,) = {int(m) for m in re.findall(r"process\(es\) \[(\d+)\] outlived the test", result.stdout.str())}
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


def test_a_process_still_stopping_gets_the_grace_time(pytester, monkeypatch):
    result = _nested(pytester, monkeypatch, "stops", sleep_s=0.5)  # gone well inside the 2 s grace
    result.assert_outcomes(passed=1)


def test_the_random_order_s_seed_is_printed_under_q(pytester):
    """README's command runs -q, which hides pytest-randomly's header: the suite's conftest prints
    the seed at the end, so the order can be replayed."""
    pytester.makeconftest("from tests.conftest import pytest_terminal_summary  # noqa: F401\n")
    pytester.makepyfile(test_order="def test_a():\n    pass\n\ndef test_b():\n    pass\n")
    result = pytester.runpytest_inprocess("-q", "-p", "randomly", "-p", "no:cacheprovider", "--randomly-seed=4711")
    assert result.ret == 0
    assert "random order: replay it with --randomly-seed=4711" in result.stdout.str()
    quiet = pytester.runpytest_inprocess("-q", "-p", "no:randomly", "-p", "no:cacheprovider")
    assert "random order" not in quiet.stdout.str()  # no random order, no seed line


def test_every_test_file_the_docs_name_exists():
    """README.md and docs/ name test files by path (`tests/unit/run/test_estimate.py`); each exists
    (a test moved or renamed leaves no dangling name behind)."""
    named = set()
    for doc in [REPO / "README.md", *(REPO / "docs").glob("*.md")]:
        named |= {(doc.name, m) for m in re.findall(r"\btests/[\w/]*test_\w+\.py\b", doc.read_text(encoding="utf-8"))}
    assert len(named) >= 3
    assert sorted((d, p) for d, p in named if not (REPO / p).exists()) == []

"""Result files a reader of a run meets on disk (``show``, ``accept``, ``compare``, ``report``,
a ``--baseline``): each refused in one line naming the file, exit 2 — never read forever, never a
hang, never a traceback. Found: ``manifest.json`` a link to /dev/zero grew ``harness show`` until
the kernel killed it; a FIFO as a variant's ``summary.json`` hung it; 5,000 levels of nesting
(RecursionError) and a 5,000-digit number (Python's int limit) were tracebacks, exit 3; so was a
FIFO or /dev/zero as ``requests.jsonl`` for ``compare``."""

from __future__ import annotations

import os
import resource
import shutil
import subprocess

import pytest

from harness.core import bounds
from harness.run.runner import RunOptions, run_scenario
from harness.scenario import load_scenario
from tests.conftest import REPO, harness_command, harness_env, sim_scenario, write_scenario


@pytest.fixture(scope="module")
def good_run(tmp_path_factory):
    d = tmp_path_factory.mktemp("hostile_results")
    scn = write_scenario(d, sim_scenario("- name: off\n", "- kind: cold_prefill\n  prompt_tokens: 64\n", name="hr"))
    out = run_scenario(load_scenario(scn), RunOptions(results_dir=d / "results", live_progress=False))
    assert out.run_dir is not None
    return out.run_dir


def _deep(path):
    path.write_text('{"schema_version": 1, "x": ' + "[" * 5000 + "1" + "]" * 5000 + "}")


def _digits(path):
    path.write_text('{"schema_version": 1, "x": ' + "9" * 5000 + "}")


def _zero(path):
    path.unlink()
    path.symlink_to("/dev/zero")


def _fifo(path):
    path.unlink()
    os.mkfifo(path)


def _huge(path):
    with open(path, "r+b") as f:  # sparse: costs no disk
        f.truncate(bounds.RESULT_JSON_BYTES + 1)


CASES = {
    "manifest deep": ("manifest.json", _deep, "show", "nested deeper"),
    "manifest 5000 digits": ("manifest.json", _digits, "show", "not valid JSON"),
    "manifest /dev/zero": ("manifest.json", _zero, "show", "not a regular file"),
    "manifest over the bound": ("manifest.json", _huge, "show", "larger than"),
    "summary FIFO": ("off/summary.json", _fifo, "show", "not a regular file"),
    "summary deep": ("off/summary.json", _deep, "accept", "nested deeper"),
    "verdict 5000 digits": ("verdict.json", _digits, "show", "not valid JSON"),
    "requests /dev/zero": ("off/requests.jsonl", _zero, "compare", "not a regular file"),
    "requests FIFO": ("off/requests.jsonl", _fifo, "compare", "not a regular file"),
}


def _limit_memory():  # a reader that reads /dev/zero is stopped at 2 GiB, not by the kernel's OOM killer
    resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))


@pytest.mark.parametrize("name", list(CASES))
def test_a_hostile_result_file_is_one_line_naming_it(name, good_run, tmp_path):
    rel, spoil, command, says = CASES[name]
    run = tmp_path / good_run.name
    shutil.copytree(good_run, run)
    spoil(run / rel)
    argv = [command, run] + (["--baseline", good_run] if command == "compare" else [])
    proc = subprocess.run(
        harness_command(*argv),
        cwd=REPO,
        env=harness_env(),
        capture_output=True,
        text=True,
        timeout=120,  # a hang guard, not a speed target
        preexec_fn=_limit_memory,
    )
    err = proc.stderr
    assert proc.returncode == 2, (proc.returncode, err[-2000:])
    assert "Traceback" not in err, err[-2000:]
    line = [x for x in err.splitlines() if str(run / rel) in x]
    assert line and says in line[0], err[-2000:]

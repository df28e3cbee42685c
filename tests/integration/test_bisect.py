"""``harness bisect`` on the simulator (harness/compare/bisect.py): a synthetic git history of
simulated sglang checkouts, one of whose commits turns on the simulator's ``slow_prefill`` fault
(its ``sglang/__init__.py`` declares ``HARNESS_SIM_BUILD``, docs/simulator.md), is bisected to
exactly that commit; a commit that cannot build is skipped; an interrupted bisection resumes
without redoing its steps; a step that cannot be decided is reported, not guessed."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from harness.cli import main
from harness.compare import bisect as b
from tests.conftest import write_scenario

# one variant, one gated row: 16 cold prefills of ~75 modelled ms, a regression of 4x in their
# prefill against a 100 % threshold. With 8 prefills of ~38 ms, at load ~17 a healthy step came
# out UNDECIDED ("needs 20 requests a side ... at the spread measured here"): the box's own
# scheduling noise is smaller against a longer prefill, and 16 a side leave a margin
SCENARIO = """\
name: bisect
server:
  backend: sim
  model_path: models/llama-tiny
  args: {--max-total-tokens: 8192, --skip-tokenizer-init: true}
  startup_timeout_s: 30
  request_timeout_s: 20
  liveness_idle_s: 0.1
  sim: {time_scale: 2, startup_s: 0}
variants:
  - name: "off"
workloads:
  - kind: cold_prefill
    n: {n}
    prompt_tokens: 2048
    warmup: 0
  - kind: short_ttft
    name: not_gated
    n: 1
    prompt_tokens: 16
    long_prompt_tokens: 512
sampling: {enabled: false}
gate: [cold_prefill.cold.ttft_ms]
expectations:
  thresholds: {ttft_ms: 100%}
verdict: {rounds: {rounds}{budget}}
"""
SLOW = "--sim-fault slow_prefill=4"


def make_history(root: Path, n: int, slow_at: int, broken: tuple[int, ...] = ()) -> list[str]:
    """A git repository of commits 0..n (0 the good one); from ``slow_at`` on the checkout's
    simulated build has the slow prefill; a commit in ``broken`` is no sglang checkout (its
    python/sglang/__init__.py is gone: builds.py refuses it). Returns the commits' hashes."""
    root.mkdir(parents=True)

    def git(*args: str) -> str:
        env = {"GIT_AUTHOR_DATE": "2026-01-01T00:00:00Z", "GIT_COMMITTER_DATE": "2026-01-01T00:00:00Z"}
        return subprocess.run(
            ["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@t", *args],
            check=True,
            capture_output=True,
            text=True,
            env={**__import__("os").environ, **env},
        ).stdout.strip()

    git("init", "-q", "-b", "main")
    init = root / "python" / "sglang" / "__init__.py"
    out = []
    for i in range(n + 1):
        if i in broken:
            init.unlink(missing_ok=True)
        else:
            init.parent.mkdir(parents=True, exist_ok=True)
            build = f"HARNESS_SIM_BUILD = {SLOW!r}\n" if i >= slow_at else ""
            init.write_text(f'__version__ = "0.5.17-sim"\n{build}')
        (root / "CHANGES").write_text("".join(f"change {j}\n" for j in range(i + 1)))
        git("add", "-A")
        git("commit", "-q", "-m", f"commit {i}" + (" slows prefill" if i == slow_at else ""))
        out.append(git("rev-parse", "HEAD"))
    return out


def scenario(tmp: Path, n: int = 16, rounds: int = 0, budget: float | None = None) -> Path:
    text = SCENARIO.replace("{n}", str(n)).replace("{rounds}", str(rounds))
    return write_scenario(tmp, text.replace("{budget}", "" if budget is None else f", budget_minutes: {budget}"))


def bisect_cli(scn: Path, repo: Path, commits: list[str], folder: Path, *extra: str) -> int:
    argv = ["bisect", str(scn), "--repo", str(repo), "--good", commits[0], "--bad", commits[-1], "--dir", str(folder)]
    return main([*argv, *extra])


def verdicts(folder: Path) -> dict[int, str]:
    state = json.loads((folder / b.STATE_FILE).read_text())
    return {state["commits"].index(c): state["steps"][c]["verdict"] for c in state["order"]}


def test_bisect_finds_the_commit_that_turned_the_fault_on(tmp_path, capsys):
    commits = make_history(tmp_path / "repo", 5, slow_at=3)
    folder = tmp_path / "bis"
    rc = bisect_cli(scenario(tmp_path), tmp_path / "repo", commits, folder, "--good-repeats", "2")
    out = capsys.readouterr().out
    assert rc == 1, out  # the first bad commit found: FAIL's code
    state = json.loads((folder / b.STATE_FILE).read_text())
    assert state["result"]["outcome"] == "found"
    assert state["result"]["first_bad"] == commits[3] and state["result"]["last_good"] == commits[2]
    # good side, bad side, then 2 (good) and 3 (bad): never 1 or 4
    assert verdicts(folder) == {0: "good", 5: "bad", 2: "good", 3: "bad"}
    # only the gated workload ran, in the gated variant, with the commit's build recorded
    step = state["steps"][commits[3]]
    manifest = json.loads((Path(step["runs"][0]) / "manifest.json").read_text())
    ran = json.loads("\n".join(x for x in manifest["scenario"]["text"].splitlines() if not x.startswith("#")))
    assert [w["kind"] for w in ran["workloads"]] == ["cold_prefill"]
    assert manifest["variants"][0]["build"]["git"]["commit"] == commits[3] and manifest["repeats"] == 1
    good = json.loads((Path(state["steps"][commits[0]]["runs"][0]) / "manifest.json").read_text())
    assert good["repeats"] == 2  # --good-repeats: a larger baseline, still compared with every step
    summary = (folder / b.SUMMARY_FILE).read_text()
    assert f"first bad commit {commits[3][:10]}" in summary and "commit 3 slows prefill" in summary
    assert "+HARNESS_SIM_BUILD = '--sim-fault slow_prefill=4'" in (folder / b.DIFF_FILE).read_text()
    assert "### The comparison that decided it" in summary and "FAIL" in summary
    assert summary in out  # the console prints the summary


@pytest.mark.slow
def test_a_commit_that_cannot_build_is_skipped(tmp_path, capsys):
    commits = make_history(tmp_path / "repo", 5, slow_at=4, broken=(2,))
    folder = tmp_path / "bis"
    rc = bisect_cli(scenario(tmp_path), tmp_path / "repo", commits, folder)
    out = capsys.readouterr().out
    assert rc == 1, out
    assert verdicts(folder) == {0: "good", 5: "bad", 2: "skip", 3: "good", 4: "bad"}
    state = json.loads((folder / b.STATE_FILE).read_text())
    assert state["result"]["first_bad"] == commits[4]
    assert "is not a checkout of sglang" in state["steps"][commits[2]]["why"]


@pytest.mark.slow
def test_a_skipped_commit_next_to_the_first_bad_leaves_a_range_not_a_guess(tmp_path, capsys):
    commits = make_history(tmp_path / "repo", 4, slow_at=3, broken=(2,))
    folder = tmp_path / "bis"
    rc = bisect_cli(scenario(tmp_path), tmp_path / "repo", commits, folder)
    out = capsys.readouterr().out
    assert rc == 4, out  # INCONCLUSIVE
    result = json.loads((folder / b.STATE_FILE).read_text())["result"]
    assert result["outcome"] == "ambiguous" and result["candidates"] == commits[2:4]
    assert "the first bad commit is one of" in out


@pytest.mark.slow
def test_an_interrupted_bisection_resumes_without_redoing_its_steps(tmp_path, capsys, monkeypatch):
    commits = make_history(tmp_path / "repo", 5, slow_at=3)
    folder = tmp_path / "bis"
    scn = scenario(tmp_path)
    from harness.cli import bisect as cli_bisect

    real = cli_bisect._runner
    calls: list[int] = []

    def interrupting():
        run = real()

        def once(*args):
            calls.append(1)
            if len(calls) == 3:  # the first midpoint: Ctrl-C while it starts
                raise KeyboardInterrupt
            return run(*args)

        return once

    monkeypatch.setattr(cli_bisect, "_runner", interrupting)
    assert bisect_cli(scn, tmp_path / "repo", commits, folder) == 130
    assert f"resume: harness bisect --resume {folder}" in capsys.readouterr().out
    assert verdicts(folder) == {0: "good", 5: "bad"}
    monkeypatch.setattr(cli_bisect, "_runner", real)
    done = set((folder / "results" / "bisect").iterdir())
    assert main(["bisect", "--resume", str(folder)]) == 1
    assert verdicts(folder) == {0: "good", 5: "bad", 2: "good", 3: "bad"}
    new = set((folder / "results" / "bisect").iterdir()) - done
    assert len(new) == 2  # commits 2 and 3 only: the good and bad sides were not run again
    assert json.loads((folder / b.STATE_FILE).read_text())["result"]["first_bad"] == commits[3]
    # a finished bisection resumed again runs nothing and says the same
    assert main(["bisect", "--resume", str(folder)]) == 1
    assert set((folder / "results" / "bisect").iterdir()) - done == new


@pytest.mark.slow
@pytest.mark.parametrize(
    "rounds, budget, said",
    [(0, None, "no round left to run"), (2, 0.0001, "verdict.budget_minutes 0.0001 spent")],
    ids=["no-round", "budget-spent"],
)
def test_an_undecidable_step_is_reported_not_guessed(tmp_path, capsys, rounds, budget, said):
    """One request a run: no comparison can decide (a side needs two values), and no round is
    allowed or the step's budget is spent before one: the bad side is UNDECIDED, saying which, the
    bisection INCONCLUSIVE (exit 4), nothing called bad."""
    commits = make_history(tmp_path / "repo", 3, slow_at=2)
    folder = tmp_path / "bis"
    rc = bisect_cli(scenario(tmp_path, n=1, rounds=rounds, budget=budget), tmp_path / "repo", commits, folder)
    out = capsys.readouterr().out
    assert rc == 4, out
    state = json.loads((folder / b.STATE_FILE).read_text())
    assert verdicts(folder) == {0: "good", 3: "undecided"}
    assert state["result"]["outcome"] == "bad_undecided"
    why = state["steps"][commits[3]]["why"]
    assert why.startswith(f"still INCONCLUSIVE after the night and 0 round(s): {said}"), why
    assert "UNDECIDED" in out and "first bad commit" not in out


# -- scenarios/gpu/run_bisect_h200.sh's history, against a stand-in for the offline site (the
# bisection itself needs real sglang: docs/gpu.md)

ROOT = Path(__file__).resolve().parents[2]
MHA = """
import logging
logger = logging.getLogger("fake_mha")


class MHATokenToKVPoolHost:
    def load_to_device_per_layer(self, device_pool, host_indices, device_indices, layer_id, io_backend):
        pass
"""


def test_the_h200_script_makes_a_history_with_one_slow_commit(tmp_path):
    site = tmp_path / "site"
    (site / "sglang/srt/mem_cache/pool_host").mkdir(parents=True)
    (site / "sglang/__init__.py").write_text('__version__ = "0.5.17"\n')
    (site / "sglang/srt/mem_cache/pool_host/mha.py").write_text(MHA)
    repo = tmp_path / "repo"
    env = {
        "PATH": "/usr/bin:/bin",
        "PY": __import__("sys").executable,
        "HISTORY_ONLY": "1",
        "SITE": str(site),
        "REPO": str(repo),
        "OUT": str(tmp_path / "out"),
        "SLOW_SLEEP_MS": "35",
    }
    r = subprocess.run(
        ["bash", str(ROOT / "scenarios/gpu/run_bisect_h200.sh")], capture_output=True, text=True, env=env, cwd=ROOT
    )
    assert r.returncode == 0, r.stdout + r.stderr

    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True).stdout

    commits = git("rev-list", "--reverse", "HEAD").split()
    assert len(commits) == 5
    changed = [git("diff", "--name-only", a, c).split() for a, c in zip(commits, commits[1:])]
    mha = "python/sglang/srt/mem_cache/pool_host/mha.py"
    assert changed == [["BISECT_NOTES"], ["BISECT_NOTES", mha], ["BISECT_NOTES"], ["BISECT_NOTES"]]
    # the inert block (repeat 1, sleep 0) is there from commit 0; commit 2 bakes the sleep in
    assert '"35"' in git("show", f"{commits[2]}:{mha}") and '"35"' not in git("show", f"{commits[1]}:{mha}")
    assert '"35"' in git("show", f"{commits[4]}:{mha}")
    assert "__pycache__" not in git("ls-files")
    again = {**env, "HISTORY_ONLY": "0", "RESUME": "1", "SKIP_INSTALL": "1", "BISECT_DIR": str(tmp_path / "none")}
    r = subprocess.run(
        ["bash", str(ROOT / "scenarios/gpu/run_bisect_h200.sh")], capture_output=True, text=True, env=again, cwd=ROOT
    )
    assert r.returncode == 2 and "RESUME=1: no " in r.stdout  # nothing to resume: said, nothing run
    # the scenario each step runs: the gated workload in its variant, the source at the worktree
    plan = b.step_scenario(ROOT / "scenarios/gpu/h200_bisect.yaml", repo, None, [])
    assert (plan.variants, plan.workloads, plan.build, plan.parity) == (["on-r2"], ["repeat_prefill"], "default", False)
    from harness.run.launch import launch_spec

    scn = b.load_step(ROOT / "scenarios/gpu/h200_bisect.yaml", plan)
    (variant,) = scn.expand_variants()
    assert launch_spec(scn, variant, 30000).full_env()["PYTHONPATH"].split(":")[0] == str(repo / "python")


# A stand-in site whose `python -m sglang.launch_server` is the simulator (reporting the package's
# version), slowed on host load-back when the copy's mha.py has the slow patch's sleep baked in:
# the whole of run_bisect_h200.sh -- history, worktree, build checks, four runs, summary -- on CPU.
LAUNCH = """
import os, re, sys
from pathlib import Path
import sglang
os.environ["HARNESS_SIM_VERSION"] = sglang.__version__
mha = (Path(sglang.__file__).parent / "srt/mem_cache/pool_host/mha.py").read_text()
m = re.search(r'HICACHE_SLOW_LOAD_SLEEP_MS", "([0-9.]+)"', mha)
slow = ["--sim-fault", "slow_host_load=400"] if m and float(m.group(1)) > 0 else []
from harness.sim.cli import main
sys.exit(main(sys.argv[1:] + ["--sim-time-scale", "0.5", "--sim-startup-s", "0"] + slow))
"""


@pytest.mark.slow
def test_the_h200_script_bisects_a_simulated_site_to_its_slow_commit(tmp_path):
    site = tmp_path / "site"
    (site / "sglang/srt/mem_cache/pool_host").mkdir(parents=True)
    (site / "sglang/__init__.py").write_text('__version__ = "0.5.17"\n')
    (site / "sglang/srt/mem_cache/pool_host/mha.py").write_text(MHA)
    (site / "sglang/launch_server.py").write_text(LAUNCH)
    out = tmp_path / "out"
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
        "PY": __import__("sys").executable,
        "SGLANG_PYTHON": __import__("sys").executable,
        "SKIP_INSTALL": "1",
        "GOOD_REPEATS": "10",
        "SITE": str(site),
        "REPO": str(tmp_path / "repo"),
        "BISECT_DIR": str(tmp_path / "bis"),
        "OUT": str(out),
        "MODEL_PATH": str(ROOT / "scenarios/models/llama-tiny"),
        "PYTHONPATH": str(site),
    }
    r = subprocess.run(
        ["bash", str(ROOT / "scenarios/gpu/run_bisect_h200.sh")], capture_output=True, text=True, env=env, cwd=ROOT
    )
    console = (out / "bisect.out").read_text()
    assert r.returncode == 1, console
    commits = [line.split()[0] for line in reversed((out / "history.txt").read_text().splitlines())]
    state = json.loads((out / "bisect.json").read_text())
    assert state["result"]["first_bad"].startswith(commits[2]), console
    assert [state["commits"].index(c) for c in state["order"]] == [0, 4, 2, 1]
    assert f"first bad commit {state['result']['first_bad'][:10]}" in (out / "summary.md").read_text()
    assert 'HICACHE_SLOW_LOAD_SLEEP_MS", "20"' in (out / "first_bad.diff").read_text()  # the sleep baked in
    assert (out / "bisect-results.tar.gz").is_file()

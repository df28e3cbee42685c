"""`harness run --resume RUN_DIR` (P8): interrupt a simulated run (SIGINT, SIGKILL) at several
points, resume it, and require the same variants, states and row counts as an uninterrupted run,
no duplicate rows, the same run folder; refusals (exit 2) when the scenario or a variant's server
configuration changed, when the run is live, or when --shard asks for another selection."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import psutil
import pytest

from harness import cli
from harness.run.manifest import build_manifest
from harness.run.resume import check_resume, plan_resume, reopen_run
from harness.scenario import load_scenario, variant_config_hash
from harness.store import results, run_folder
from harness.store.variant_status import FINAL_STATES
from tests.conftest import (
    kill_hard,
    only_run,
    run_dirs,
    run_harness,
    shape,
    start_harness,
    status_state,
    tiny_scenario,
    wait_for,
    wait_state,
    write_scenario,
)


@pytest.fixture
def scenario(tiny_quality_scenario):
    return tiny_quality_scenario


@pytest.fixture
def reference(tiny_quality_reference):
    return shape(tiny_quality_reference)


def _rows_seen(variant: str, at_least: int = 1):
    def pred(out: Path) -> bool:
        for r in run_dirs(out):
            p = r / variant / "requests.jsonl"
            if p.exists() and len(p.read_bytes().splitlines()) >= at_least:
                return True
        return False

    return pred


def _interrupt_at(scenario: Path, out: Path, variant: str, point: str, sig: int) -> Path:
    """Start a run, wait for ``point`` in ``variant`` (``running``: its status says so; ``rows``: it
    has written a request row; ``ok``: it finished), deliver ``sig``; return the run folder."""
    proc = start_harness("run", scenario, "--results-dir", out, "--no-report")
    try:
        if point == "rows":
            wait_for(lambda: _rows_seen(variant)(out) or proc.poll() is not None, 60, f"{variant} rows")
        else:
            wait_state(out, variant, point, proc)
        assert proc.poll() is None, "the run ended before the interrupt"
    except BaseException:
        kill_hard(proc)
        raise
    if sig == signal.SIGKILL:
        kill_hard(proc)
        assert proc.returncode == -signal.SIGKILL
    else:
        proc.send_signal(sig)
        assert proc.wait(timeout=60) == 130, proc.stdout.read()
    return only_run(out)


def _resume(scenario: Path, run: Path, *extra: str) -> subprocess.CompletedProcess:
    return run_harness("run", scenario, "--resume", run, "--no-report", *extra)


def _check_resumed(run: Path, reference: dict, out: Path) -> dict:
    assert run_dirs(out) == [run]  # same folder, no new run
    assert shape(run) == reference  # same variants, states, row counts; no duplicates
    assert (run / results.COMPLETE_MARKER).exists() and not (run / results.INTERRUPTED_MARKER).exists()
    loaded = run_folder.load_run(run)
    for v in loaded.variants:
        if v.name != "off":
            assert v.summary.parity["verdict"] == "PASS"
    return dict(loaded.manifest.raw)


# One instant of each signal runs by default; the others are `-m slow`. SIGKILL mid-rows is
# test_resume_stops_the_server_a_sigkilled_harness_left_running (the harness alone killed).
@pytest.mark.parametrize("variant,point", [("on-r2", "running"), pytest.param("on-r3", "rows", marks=pytest.mark.slow)])
def test_sigint_then_resume(scenario, reference, tmp_path, variant, point):
    run = _interrupt_at(scenario, tmp_path, variant, point, signal.SIGINT)
    assert (run / results.INTERRUPTED_MARKER).exists()
    assert status_state(run, variant) == "interrupted"
    r = _resume(scenario, run)
    assert r.returncode == 0, r.stdout + r.stderr
    m = _check_resumed(run, reference, tmp_path)
    done_before = ["off", "on-r2"][: ["on-r2", "on-r3"].index(variant) + 1]
    (resume,) = m["resumes"]
    assert resume["skipped"] == done_before
    assert resume["rerun"][0] == {"variant": variant, "was": "interrupted", "moved_to": f".attempts/{variant}.1"}
    assert (run / ".attempts" / f"{variant}.1" / "status.json").exists()


@pytest.mark.slow
@pytest.mark.parametrize("variant,point", [("off", "running"), ("on-r2", "rows"), ("on-r3", "ok")])
def test_sigkill_then_resume(scenario, reference, tmp_path, variant, point):
    run = _interrupt_at(scenario, tmp_path, variant, point, signal.SIGKILL)
    assert not (run / results.COMPLETE_MARKER).exists() and not (run / results.INTERRUPTED_MARKER).exists()
    r = _resume(scenario, run)
    assert r.returncode == 0, r.stdout + r.stderr
    m = _check_resumed(run, reference, tmp_path)
    rerun = [x["variant"] for x in m["resumes"][0]["rerun"]]
    if point == "ok":
        assert variant not in rerun  # finished before the kill: not run again
    else:
        assert rerun[0] == variant


@pytest.mark.slow  # a resume left unfinished, then resumed: also the lock test's (in-process) first resume
def test_resume_interrupted_again_then_resumed(scenario, reference, tmp_path):
    run = _interrupt_at(scenario, tmp_path, "on-r2", "rows", signal.SIGKILL)
    proc = start_harness("run", scenario, "--resume", run, "--no-report")
    try:
        wait_for(lambda: status_state(run, "on-r3") == "running" or proc.poll() is not None, 60, "on-r3 running")
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=60) == 130
    r = _resume(scenario, run)
    assert r.returncode == 0, r.stdout + r.stderr
    m = _check_resumed(run, reference, tmp_path)
    assert len(m["resumes"]) == 2
    assert [x["variant"] for x in m["resumes"][1]["rerun"]] == ["on-r3", "on-r4"]
    assert m["resumes"][1]["skipped"] == ["off", "on-r2"]


def test_resume_of_complete_run_reruns_nothing(scenario, reference, tmp_path):
    r = run_harness("run", scenario, "--only", "off", "--results-dir", tmp_path, "--no-report")
    assert r.returncode == 0
    run = only_run(tmp_path)
    before = (run / "off" / "requests.jsonl").read_bytes()
    r = _resume(scenario, run)
    assert r.returncode == 0, r.stderr
    assert "1 complete, 0 to rerun" in r.stderr
    assert (run / "off" / "requests.jsonl").read_bytes() == before
    assert (run / results.COMPLETE_MARKER).exists()


def test_refuses_changed_server_arg(tmp_path):
    """Same scenario text, a ${VAR} that sets a server flag changed: every variant's config hash
    differs, the refusal names them with both hashes, and the run folder is left as it was."""
    path = write_scenario(tmp_path, tiny_scenario(n_on=1, max_total_tokens="${TINY_POOL:-8192}"))
    r = run_harness("run", path, "--only", "off", "--results-dir", tmp_path / "out", "--no-report")
    assert r.returncode == 0, r.stderr
    run = only_run(tmp_path / "out")
    manifest_before = (run / "manifest.json").read_text()
    old = json.loads(manifest_before)["variants"][0]["config_hash"]
    scn = load_scenario(path, env={"TINY_POOL": "4096"})
    new = variant_config_hash(scn, scn.variant("off"))
    assert new != old

    r = run_harness("run", path, "--resume", run, "--no-report", env={"TINY_POOL": "4096"})
    assert r.returncode == 2
    assert "variant 'off': server configuration changed" in r.stderr
    assert old in r.stderr and new in r.stderr
    assert (run / "manifest.json").read_text() == manifest_before
    assert not (run / ".attempts").exists()


def test_refuses_changed_scenario_and_other_shard(tmp_path, capsys):
    path = write_scenario(tmp_path, tiny_scenario(n_on=1))
    r = run_harness("run", path, "--only", "off", "--results-dir", tmp_path / "out", "--no-report")
    assert r.returncode == 0
    run = only_run(tmp_path / "out")
    assert cli.main(["run", str(path), "--resume", str(run), "--shard", "2/2", "--no-report"]) == 2
    assert "the run holds off" in capsys.readouterr().err
    path.write_text(path.read_text() + "\n# edited\n")
    assert cli.main(["run", str(path), "--resume", str(run), "--no-report"]) == 2
    assert "scenario changed since the run" in capsys.readouterr().err


def test_a_folder_holding_only_its_lock_is_run_again_in_place(tmp_path, capsys):
    """Killed between taking the run's lock and writing its manifest: the folder holds only its
    .lock. --resume refused it as no run folder; nothing was measured, so the run starts in it."""
    path = write_scenario(tmp_path, tiny_scenario(n_on=0))
    scn = load_scenario(path)
    run = tmp_path / "out" / scn.name / "20261201T230000Z-abcdef"
    run.mkdir(parents=True)
    (run / ".lock").write_text("pid 4242 on box since 2026-12-01T23:00:00+00:00\n")
    assert cli.main(["run", str(path), "--resume", str(run), "--no-report"]) == 0
    err = capsys.readouterr().err
    assert f"{run} holds only its .lock" in err
    assert only_run(tmp_path / "out") == run and (run / results.COMPLETE_MARKER).exists()
    assert status_state(run, "off") == "ok"
    # a folder with anything else in it is still no run to resume
    other = tmp_path / "out" / scn.name / "20261201T230001Z-abcdef"
    other.mkdir()
    (other / ".lock").write_text("")
    (other / "notes.txt").write_text("mine")
    assert cli.main(["run", str(path), "--resume", str(other), "--no-report"]) == 2
    assert (other / "notes.txt").read_text() == "mine" and not (other / "manifest.json").exists()
    # nor is one where runs of another scenario live
    stray = tmp_path / "out" / "elsewhere" / "20261201T230002Z-abcdef"
    stray.mkdir(parents=True)
    (stray / ".lock").write_text("")
    assert cli.main(["run", str(path), "--resume", str(stray), "--no-report"]) == 2
    assert "not under a folder named tiny" in capsys.readouterr().err and not (stray / "manifest.json").exists()


def test_refuses_a_live_run(scenario, tmp_path):
    proc = start_harness("run", scenario, "--results-dir", tmp_path, "--no-report")
    try:
        run = wait_state(tmp_path, "off", "running", proc)
        r = _resume(scenario, run)
        assert r.returncode == 2 and "another harness process is writing this run" in r.stderr
        assert status_state(run, "off") in ("running", "ok")  # untouched
        assert not (run / ".attempts").exists()
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
        proc.wait(timeout=60)


@pytest.mark.slow  # resume (the tests above) then merge (test_merge, on hand-made shards) in one story
def test_killed_shard_resumed_then_merged(scenario, reference, tmp_path):
    """A shard whose task was killed (preemption) is resumed, then merged with the other shard:
    the merged run equals one uninterrupted run."""
    shard1 = start_harness("run", scenario, "--shard", "1/2", "--results-dir", tmp_path / "s1", "--no-report")
    try:
        wait_for(lambda: _rows_seen("on-r4")(tmp_path / "s1") or shard1.poll() is not None, 60, "on-r4 rows")
    finally:
        kill_hard(shard1)
    r = run_harness("run", scenario, "--shard", "2/2", "--results-dir", tmp_path / "s2", "--no-report")
    assert r.returncode == 0, r.stderr
    s1 = only_run(tmp_path / "s1")
    merged = run_harness("merge", s1, only_run(tmp_path / "s2"), "--results-dir", tmp_path / "m1")
    assert merged.returncode == 1 and "not complete" in merged.stderr  # refuses to call it COMPLETE
    assert _resume(scenario, s1).returncode == 0
    merged = run_harness("merge", s1, only_run(tmp_path / "s2"), "--results-dir", tmp_path / "m2")
    assert merged.returncode == 0, merged.stderr
    assert shape(only_run(tmp_path / "m2")) == reference


# ---------------------------------------------------------------------- plan_resume on hand-made states


def test_plan_resume_states(tmp_path):
    path = write_scenario(tmp_path, tiny_scenario(n_on=8))
    scn = load_scenario(path)
    variants = scn.expand_variants()
    run = results.create_run_dir(tmp_path / "out", scn.name)
    results.write_json_atomic(run.manifest, build_manifest(scn, variants, ["harness"], True))
    states = [
        "ok",
        "startup_failed",
        "refused",
        "failed",
        "partial",
        "interrupted",
        "running",
        "no_summary",
        "unreadable",
    ]  # the 10th variant: missing
    for v, state in zip(variants, states):
        vp = run.variant(v.name)
        vp.root.mkdir()
        if state == "unreadable":
            vp.status.write_text('{"state": "o')  # torn
            continue
        results.write_json_atomic(vp.status, {"state": "ok" if state == "no_summary" else state})
        if state != "no_summary":
            results.write_json_atomic(vp.summary, {"variant": v.name})
    plan = plan_resume(run.root, scn, variants)
    assert plan.ok
    assert plan.skip == [v.name for v, s in zip(variants, states) if s in FINAL_STATES]
    assert plan.why == {v.name: s for v, s in zip(variants, states + ["missing"]) if s not in FINAL_STATES}
    assert plan.rerun == [v.name for v in variants if v.name in plan.why]


def test_plan_resume_refuses_merged_and_missing(tmp_path):
    scn = load_scenario(write_scenario(tmp_path, tiny_scenario(n_on=1)))
    plan = plan_resume(tmp_path / "nope", scn)
    assert not plan.ok and "not a run folder" in plan.refusals[0]
    run = results.create_run_dir(tmp_path / "out", scn.name)
    manifest = build_manifest(scn, scn.expand_variants(), ["harness"], True)
    results.write_json_atomic(run.manifest, {**manifest, "merged_from": ["a", "b"]})
    assert "merged run cannot be resumed" in plan_resume(run.root, scn).refusals[0]


def test_resume_stops_the_server_a_sigkilled_harness_left_running(scenario, reference, tmp_path):
    """SIGKILL only the harness (as the OOM killer would) while on-r2 writes its rows: its server
    keeps running in its own session, holding memory. The marker in its environment names its run
    and its dead harness; resume stops it (and records that it did), reruns on-r2 and what followed
    (not ``off``, finished before the kill), and the run equals an uninterrupted one."""
    out = tmp_path / "results"
    proc = start_harness("run", scenario, "--results-dir", out, "--no-report")
    try:
        wait_for(lambda: _rows_seen("on-r2")(out) or proc.poll() is not None, 60, "on-r2 rows")
    except BaseException:
        kill_hard(proc)
        raise
    run = only_run(out)
    identity = json.loads((run / "on-r2" / "status.json").read_text())["server"]
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    assert psutil.pid_exists(identity["pid"])  # orphaned, still serving
    r = _resume(scenario, run)
    assert r.returncode == 0, r.stdout + r.stderr
    assert not psutil.pid_exists(identity["pid"]) or psutil.Process(identity["pid"]).status() == psutil.STATUS_ZOMBIE
    (resumed,) = _check_resumed(run, reference, out)["resumes"]
    assert any(identity["pid"] in o["pids"] for o in resumed["orphans_stopped"])
    assert resumed["skipped"] == ["off"] and resumed["rerun"][0]["variant"] == "on-r2"


@pytest.mark.parametrize(
    "file, content, says",
    [
        ("manifest.json", [1, 2], "expected a JSON object, found a list"),
        (
            "manifest.json",
            {"schema_version": 1, "kind": "run", "scenario": {"name": "t"}, "variants": {"a": 1}},
            "'variants' must be a list",
        ),
        ("off/status.json", [], "expected a JSON object, found a list"),
        ("off/summary.json", "hello", "expected a JSON object, found a string"),
        ("off/summary.json", "torn", "not valid JSON"),
    ],
)
def test_damaged_result_files_refuse_the_resume_naming_the_file(tmp_path, capsys, file, content, says):
    """``--resume`` of a run with a damaged file: exit 2 naming the file, no traceback, nothing
    moved or started (the CLI in this process; the refusals above run it as a user does)."""
    path = write_scenario(tmp_path, tiny_scenario(n_on=1))
    scn = load_scenario(path)
    run = results.create_run_dir(tmp_path / "out", scn.name)
    results.write_json_atomic(run.manifest, build_manifest(scn, scn.expand_variants(), ["harness"], True))
    for v in scn.expand_variants():
        vp = run.variant(v.name)
        vp.root.mkdir()
        results.write_json_atomic(vp.status, {"state": "ok" if v.name == "off" else "interrupted"})
        results.write_json_atomic(vp.summary, {"variant": v.name})
    if content == "torn":
        (run.root / file).write_text('{"state": "o')
    else:
        results.write_json_atomic(run.root / file, content)
    rc = cli.main(["run", str(path), "--resume", str(run.root), "--no-report"])
    err = capsys.readouterr().err
    assert rc == 2, err
    assert str(run.root / file) in err and says in err and "Traceback" not in err
    assert not run.attempts.exists() and not (run.root / "on-r2" / "requests.jsonl").exists()


def test_a_resume_holds_the_lock_from_reopening_to_the_end_and_plans_again_under_it(scenario, reference, tmp_path):
    """While one resume has the run reopened (folders moved aside, the run not yet over) a second
    ``--resume`` is refused with one line, exit 2, and touches nothing; once the first lets go
    the run can be resumed. A resume planned before another finished plans again under the lock:
    it sees the run complete and reruns nothing, instead of moving finished variants aside."""
    run = _interrupt_at(scenario, tmp_path, "on-r2", "running", signal.SIGINT)
    scn = load_scenario(scenario)
    stale = check_resume(scn, run)
    assert "on-r2" in stale.rerun
    reopened = reopen_run(check_resume(scn, run), scn, ["harness", "run", "--resume", str(run)])
    try:
        second = _resume(scenario, run)
        assert second.returncode == 2, second.stdout + second.stderr
        assert f"another harness process is writing this run (pid {os.getpid()} on " in second.stderr
        assert "Traceback" not in second.stderr
        assert len(json.loads((run / "manifest.json").read_text())["resumes"]) == 1  # only the first's
    finally:
        reopened.close()
    assert _resume(scenario, run).returncode == 0  # the other resume ran to the end meanwhile
    assert (run / results.COMPLETE_MARKER).exists()
    attempts = sorted(p.name for p in (run / ".attempts").iterdir())
    reopened = reopen_run(stale, scn, ["harness"])
    reopened.close()
    assert reopened.variants == [] and reopened.plan.rerun == []
    assert sorted(p.name for p in (run / ".attempts").iterdir()) == attempts  # nothing moved again
    assert shape(run) == reference

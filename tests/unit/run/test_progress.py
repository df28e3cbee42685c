"""The run's console progress: variant, workload/phase, requests done/total, req/s, elapsed and
ETA; plain lines (and ::group:: per variant) in CI, one redrawn line on a terminal; the request
count per variant comes from the scenario (harness.run.estimate.request_counts)."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

from harness.run.estimate import request_counts
from harness.run.progress import Progress, fmt_duration, plural
from harness.scenario import load_scenario

ROOT = Path(__file__).resolve().parents[3]
GOLDEN = ROOT / "tests" / "golden"


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def plain(groups: bool = False, heartbeat_s: float = 30.0):
    out, clock = io.StringIO(), Clock()
    p = Progress(3, stream=out, live=False, heartbeat_s=heartbeat_s, groups=groups, clock=clock)
    return p, out, clock


def test_phase_lines_carry_counts_and_no_zero_timer():
    p, out, clock = plain()
    p.variant(2, "on-r2", requests=40)
    clock.t += 12
    p.phase("parallel_prefixes/pass2")
    p.close()
    lines = out.getvalue().splitlines()
    assert lines[0] == "[00:00] variant 2/3 on-r2 | launching | requests 0/40"
    assert lines[1] == "[00:12] variant 2/3 on-r2 | parallel_prefixes/pass2 | requests 0/40"
    assert "(00:00)" not in out.getvalue()


def test_heartbeat_has_rate_eta_and_time_in_phase():
    p, out, clock = plain(heartbeat_s=30)
    p.variant(1, "off", requests=40)
    clock.t += 60  # start-up: not part of the rate
    p.phase("cold_prefill/cold")
    p.request_done()
    clock.t += 10
    for _ in range(10):
        p.request_done()  # 10 more in 10 s: 1 req/s, 29 left
    clock.t += 20
    p.tick()
    p.close()
    beat = out.getvalue().splitlines()[-1]
    # 10 requests after the first in 30 s since it: 0.33 req/s; 29 left -> 87 s
    assert beat == "[01:30] variant 1/3 off | cold_prefill/cold 00:30 | requests 11/40 0.3 req/s ETA 01:27", beat


def test_no_heartbeat_before_it_is_due_and_unknown_totals():
    p, out, clock = plain(heartbeat_s=30)
    p.variant(1, "off")  # total unknown: no total, no ETA
    p.request_done(3)
    clock.t += 29
    p.tick()
    assert len(out.getvalue().splitlines()) == 1
    clock.t += 1
    p.tick()
    p.close()
    beat = out.getvalue().splitlines()[-1]
    assert "requests 3 " in beat and "requests 3/" not in beat and "ETA" not in beat, beat


def test_github_groups_per_variant_with_outcome_outside():
    p, out, clock = plain(groups=True)
    p.variant(1, "off", requests=2)
    p.phase("decode/decode")
    p.end_variant("variant off: ok")
    p.variant(2, "on", requests=2)
    p.close()
    lines = out.getvalue().splitlines()
    assert lines[0] == "::group::variant 1/3 off"
    assert lines[3] == "::endgroup::" and lines[4].endswith("variant off: ok")
    assert lines[5] == "::group::variant 2/3 on" and lines[-1] == "::endgroup::"
    assert sum(1 for x in lines if x == "::group::variant 1/3 off") == 1


def test_groups_follow_github_actions_and_never_on_a_terminal(monkeypatch):
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    p = Progress(1, stream=io.StringIO(), live=False)
    q = Progress(1, stream=io.StringIO(), live=True)
    monkeypatch.delenv("GITHUB_ACTIONS")
    r = Progress(1, stream=io.StringIO(), live=False)
    for x in (p, q, r):
        x.close()
    assert (p.groups, q.groups, r.groups) == (True, False, False)


def test_live_line_is_redrawn_and_cut_to_the_terminal():
    out, clock = io.StringIO(), Clock()
    p = Progress(1, stream=out, live=True, width=40, clock=clock)
    p.variant(1, "a-rather-long-variant-name", requests=9)
    p.tick()
    p.close()
    frames = out.getvalue().split("\r\x1b[2K")[1:]
    assert frames and all(len(f.rstrip("\n")) <= 39 for f in frames)
    assert "\n" not in frames[0]  # a redrawn line, not a new one


def test_plural_and_durations():
    assert plural(1, "variant") == "1 variant" and plural(3, "variant") == "3 variants"
    assert fmt_duration(59) == "00:59" and fmt_duration(3725) == "1:02:05" and fmt_duration(-3) == "00:00"


def test_request_counts_match_a_real_run(monkeypatch):
    """The golden run's scenario: the counts are the rows each variant recorded."""
    monkeypatch.setenv("GOLDEN_MODEL", str(ROOT / "scenarios" / "models" / "llama-tiny"))
    scenario = load_scenario(GOLDEN / "golden.yaml", os.environ)
    counts = request_counts(scenario)
    run = GOLDEN / "runs" / "healthy"
    for name in ("off", "on-r2"):
        rows = sum(1 for f in ("requests.jsonl", "quality.jsonl") for line in (run / name / f).open() if line.strip())
        assert counts[name] == rows, name
    assert counts["on-200gb"] == 0  # declared startup failure
    assert json.loads((run / "on-200gb" / "status.json").read_text())["state"] == "startup_failed"

"""The search of `harness bisect` (harness/compare/bisect.py) on made-up histories, no server: every
history of 1-12 commits with the regression at any commit and any set of commits that cannot
build or cannot be decided ends at exactly the first bad commit, or at a range holding it that
only skipped or undecided commits make, in about log2(N) steps plus the skipped ones."""

from __future__ import annotations

import math
import random
from pathlib import Path

import pytest

from harness.compare import bisect as b


class FakeStepper:
    """Verdicts by index: good before ``k``, bad from it; ``untestable`` commits skip or undecided."""

    def __init__(self, state: b.Bisection, k: int, untestable: dict[int, str]):
        self.state, self.k, self.untestable, self.say = state, k, untestable, lambda line: None
        self.tested: list[int] = []

    def run_commit(self, commit, plan, repeats=None):
        self.tested.append(self.state.index(commit))
        return type("Out", (), {"exit_code": 0, "run_dir": Path("/runs") / commit, "verdict": None})(), None

    def judge(self, commit, plan, baseline):
        i = self.state.index(commit)
        self.tested.append(i)
        verdict = self.untestable.get(i) or (b.BAD if i >= self.k else b.GOOD)
        return {"verdict": verdict, "why": "made up", "runs": [f"/runs/{commit}"]}


@pytest.fixture(autouse=True)
def no_git_no_scenario(monkeypatch):
    monkeypatch.setattr(b, "step_scenario", lambda *a: None)
    monkeypatch.setattr(b, "git", lambda *a, **k: "")
    monkeypatch.setattr(b.results, "write_json_atomic", lambda *a: None)
    monkeypatch.setattr(b.results, "write_text_atomic", lambda *a: None)


def run(n: int, k: int, untestable: dict[int, str]) -> tuple[dict, FakeStepper]:
    commits = [f"{i:040x}" for i in range(n + 1)]
    state = b.Bisection(Path("/bis"), "s.yaml", "/repo", "g", "b", commits, [f"c{i}" for i in commits], None, [], None)
    stepper = FakeStepper(state, k, untestable)
    return b.bisect(state, stepper), stepper


def test_every_history_ends_at_its_first_bad_commit_or_at_a_range_that_holds_it():
    rng = random.Random(29)
    cases = 0
    for n in range(1, 13):
        for k in range(1, n + 1):
            for _ in range(6):
                middle = list(range(1, n))
                untestable = {
                    i: rng.choice([b.SKIP, b.UNDECIDED]) for i in rng.sample(middle, rng.randint(0, len(middle)))
                }
                result, stepper = run(n, k, untestable)
                cases += 1
                assert stepper.tested[:2] == [0, n]  # the good side, then the bad side
                assert len(set(stepper.tested)) == len(stepper.tested)  # no commit run twice
                assert len(stepper.tested) <= 2 + math.ceil(math.log2(n + 1)) + len(untestable)
                commits = [f"{i:040x}" for i in range(n + 1)]
                if result["outcome"] == "found":
                    assert result["first_bad"] == commits[k] and result["last_good"] == commits[k - 1]
                    assert k not in untestable and k - 1 not in untestable
                else:
                    assert result["outcome"] == "ambiguous" and commits[k] in result["candidates"]
                    lo = int(result["last_good"], 16)
                    hi = int(result["first_bad"], 16)
                    assert result["candidates"] == commits[lo + 1 : hi + 1]
                    assert all(i in untestable for i in range(lo + 1, hi))  # only untestable ones between
                    assert result["exit_code"] == 4
    assert cases == 6 * sum(range(1, 13))


def test_without_untestable_commits_the_steps_are_a_binary_search():
    result, stepper = run(16, 11, {})
    assert result["outcome"] == "found" and int(result["first_bad"], 16) == 11
    assert stepper.tested == [0, 16, 8, 12, 10, 11]


def test_a_bad_side_that_is_not_bad_ends_the_bisection_unbisected():
    result, stepper = run(5, 6, {})  # never bad: the bad commit is as good as the good one
    assert result["outcome"] == "not_reproduced" and result["exit_code"] == 0 and stepper.tested == [0, 5]
    result, _ = run(5, 3, {5: b.UNDECIDED})
    assert result["outcome"] == "bad_undecided" and result["exit_code"] == 4

"""``harness bisect``: the first commit of a git history whose build regresses a scenario's gated
rows against a good commit's run, found with the verdict machinery's sequential repeats.

One job: walk a first-parent history from a good commit to a bad one as ``git bisect`` does, each
step a run of the scenario with the bisected build's ``sglang_source`` at the step's commit, judged
against the good commit's run like ``harness run --decide`` judges a night (`harness.compare.rounds`):
extra rounds while the comparison is INCONCLUSIVE, within ``verdict.rounds`` and
``verdict.budget_minutes``. A step is **good** (PASS), **bad** (FAIL), **undecided** (still
INCONCLUSIVE when the rounds or the budget are spent: said so, never called good or bad) or
**skip** (the commit cannot check out, build, pass `harness.run.builds`' checks or start a server:
``git bisect skip``). Undecided and skipped commits are stepped around; when only they are left
between the last good and the first bad commit, the answer is the range, not a guess.

The bisect folder holds everything, written atomically (``bisect.json``: the plan, every step and
the result; `harness.compare.bisect_summary` writes ``summary.md``): ``src/`` (one git worktree,
each step's commit checked out at that one path, so every step's variants keep the good run's
config hash and compare compares them; the manifest records each run's commit), ``results/`` (the
runs and their rounds), ``steps/`` (each step's build log and comparison). ``--resume DIR``
reloads the plan and goes on from the first step not recorded: a finished step is never redone;
the step an interruption cut is run again from its start.

What runs at each step (docs/reports.md "Bisecting a regression"): only the workloads the
scenario's ``gate:`` names (every one without a gate), the variants the gates name (with the
quality baseline when ``quality.parity`` gates; quality off otherwise), the scenario's repeats, and
the expectation checks on the workloads kept.
"""

from __future__ import annotations

import re
import shlex
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.core.errors import BadInput
from harness.core.exit_codes import ExitCode
from harness.core.yaml_lines import load_yaml
from harness.store import results

STATE_FILE = "bisect.json"
SUMMARY_FILE = "summary.md"
DIFF_FILE = "first_bad.diff"
SCHEMA = 1
GIT_TIMEOUT_S = 120.0
BUILD_TIMEOUT_S = 3600.0
GOOD, BAD, SKIP, UNDECIDED = "good", "bad", "skip", "undecided"


class Interrupted(Exception):
    """A step's run was interrupted (SIGINT/SIGTERM/SIGHUP): the bisection stops, resumable."""


def git(repo: Path, *args: str, check: bool = True) -> str:
    """``git -C repo ARGS`` → stdout; BadInput with git's message when it fails and ``check``."""
    try:
        r = subprocess.run(
            ["git", "-C", str(repo), *args],
            capture_output=True,
            text=True,
            timeout=GIT_TIMEOUT_S,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise BadInput(f"git {' '.join(args)} in {repo}: {exc}") from None
    if r.returncode != 0 and check:
        last = (r.stderr.strip().splitlines() or [f"exit {r.returncode}"])[-1]
        raise BadInput(f"git {' '.join(args)} in {repo}: {last}")
    return r.stdout


# ------------------------------------------------------------------------------ the plan


@dataclass(frozen=True)
class StepScenario:
    """How a step's scenario is made from the file: the overrides (the build's source at the
    worktree, quality off unless parity gates, the gated workloads and their checks) and the
    variants it runs."""

    overrides: list[Any]  # harness.scenario.overrides.Override
    variants: list[str]
    build: str
    workloads: list[str]
    parity: bool


def step_scenario(path: Path, src: Path, build: str | None, sets: Sequence[str]) -> StepScenario:
    """The step scenario of the scenario file ``path`` with the bisected build's source at ``src``
    and the user's ``--set``s. BadInput names what cannot be bisected."""
    from harness.scenario.loading import load_scenario
    from harness.scenario.models import DEFAULT_BUILD
    from harness.scenario.overrides import Override, load_with_overrides, parse_override

    user = [parse_override(s) for s in sets]
    scn = load_with_overrides(path, user) if user else load_scenario(path)
    if scn.server.backend == "external":
        raise BadInput("bisect: backend external measures servers somebody else started: nothing to build")
    variants = [v for v in scn.expand_variants() if v.expect != "startup_failed"]
    gates = list(scn.gate)
    parity = any(g.metric == "quality.parity" for g in gates) and scn.quality.enabled
    named = {g.variant for g in gates if g.variant is not None}
    gated = [v for v in variants if not gates or any(g.variant in (None, v.name) for g in gates)]
    if unknown := named - {v.name for v in variants}:
        raise BadInput(f"bisect: the gate names variants that do not run: {', '.join(sorted(unknown))}")
    if parity and scn.quality.baseline_variant and scn.quality.baseline_variant not in {v.name for v in gated}:
        gated += [v for v in variants if v.name == scn.quality.baseline_variant]
    builds_used = sorted({v.build for v in gated})
    if build is None:
        if len(builds_used) != 1:
            raise BadInput(f"bisect: the gated variants run builds {', '.join(builds_used)}: name one with --build")
        build = builds_used[0]
    if build not in builds_used:
        raise BadInput(f"bisect: --build {build}: no gated variant runs it (they run {', '.join(builds_used)})")
    key = "server.sglang_source" if build == DEFAULT_BUILD else f"builds.{build}.sglang_source"
    overrides = [*user, Override(f"{key}={src}", tuple(key.split(".")), str(src))]
    if not parity and scn.quality.enabled:
        overrides.append(Override("quality.enabled=false", ("quality", "enabled"), False))
    names = [w.name for w in scn.workloads]
    keep = names if not gates else [n for n in names if any(g.metric.split(".")[0] == n for g in gates)]
    if not keep and not parity:
        raise BadInput("bisect: the gate names no workload of the scenario")
    if keep != names:
        raw = load_yaml(path).data
        raw = _overridden(raw, user)
        overrides.append(
            Override(
                "workloads=<the gated ones>", ("workloads",), [w for w, n in zip(raw["workloads"], names) if n in keep]
            )
        )
        checks = list((raw.get("expectations") or {}).get("checks") or [])
        kept = [c for c, parsed in zip(checks, scn.expectations.checks) if _check_workload(parsed.metric, keep)]
        if checks and len(kept) != len(checks):
            overrides.append(Override("expectations.checks=<the gated workloads'>", ("expectations", "checks"), kept))
    return StepScenario(overrides, [v.name for v in gated], build, keep, parity)


def _overridden(raw: dict, user: Sequence[Any]) -> dict:
    from harness.scenario.overrides import override_tree

    return override_tree(raw, user)[0] if user else raw


def _check_workload(metric: str, keep: Sequence[str]) -> bool:
    first = metric.split(".")[0]
    return first == "quality" or first in keep


def load_step(path: Path, plan: StepScenario, repeats: int | None = None, good_repeats: int | None = None):
    """The loaded step scenario (a round's: ``repeats`` more, quality off, as `--decide`'s; the
    good side's: ``good_repeats``)."""
    from harness.scenario.overrides import Override, load_with_overrides

    extra = []
    if good_repeats is not None:
        extra = [Override(f"repeats={good_repeats}", ("repeats",), good_repeats)]
    if repeats is not None:
        extra = [
            Override(f"repeats={repeats}", ("repeats",), repeats),
            Override("quality.enabled=false", ("quality", "enabled"), False),
        ]
    return load_with_overrides(path, [*plan.overrides, *extra])


# ------------------------------------------------------------------------------ the state


@dataclass
class Bisection:
    """bisect.json: the plan, each tested commit's step, and the result once there is one."""

    root: Path
    scenario: str
    repo: str
    good_ref: str
    bad_ref: str
    commits: list[str]  # commits[0]: good, commits[-1]: bad, first-parent order
    subjects: list[str]
    build: str | None
    sets: list[str]
    build_cmd: str | None
    good_repeats: int | None = None  # the good side's repeats (the baseline of every step), else the scenario's
    steps: dict[str, dict] = field(default_factory=dict)  # commit → its step
    order: list[str] = field(default_factory=list)  # commits in the order they were tested
    result: dict | None = None

    @property
    def src(self) -> Path:
        return self.root / "src"

    @property
    def results_dir(self) -> Path:
        return self.root / "results"

    def to_json(self) -> dict:
        return {
            "schema_version": SCHEMA,
            "kind": "bisect",
            "scenario": self.scenario,
            "repo": self.repo,
            "good_ref": self.good_ref,
            "bad_ref": self.bad_ref,
            "build": self.build,
            "sets": self.sets,
            "build_cmd": self.build_cmd,
            "good_repeats": self.good_repeats,
            "commits": self.commits,
            "subjects": self.subjects,
            "steps": self.steps,
            "order": self.order,
            "result": self.result,
        }

    def save(self) -> None:
        results.write_json_atomic(self.root / STATE_FILE, self.to_json())

    @classmethod
    def load(cls, root: Path) -> Bisection:
        try:
            d = results.read_json_object(root / STATE_FILE)
        except results.ResultsError as exc:
            raise BadInput(f"bisect --resume {root}: {exc}") from None
        if d.get("kind") != "bisect" or d.get("schema_version") != SCHEMA:
            raise BadInput(f"bisect --resume {root}: {STATE_FILE} is not a bisection of schema {SCHEMA}")
        return cls(
            root,
            d["scenario"],
            d["repo"],
            d["good_ref"],
            d["bad_ref"],
            list(d["commits"]),
            list(d["subjects"]),
            d.get("build"),
            list(d.get("sets") or []),
            d.get("build_cmd"),
            d.get("good_repeats"),
            dict(d.get("steps") or {}),
            list(d.get("order") or []),
            d.get("result"),
        )

    def index(self, commit: str) -> int:
        return self.commits.index(commit)

    def label(self, commit: str) -> str:
        i = self.index(commit)
        return f"{commit[:10]} ({i} of {len(self.commits) - 1}: {self.subjects[i]})"

    def bounds(self) -> tuple[int, int]:
        """(the last good index below the first bad one, the first bad index)."""
        bad = [self.index(c) for c, s in self.steps.items() if s["verdict"] == BAD and c != self.commits[0]]
        hi = min(bad) if bad else len(self.commits) - 1
        good = [self.index(c) for c, s in self.steps.items() if s["verdict"] == GOOD and self.index(c) < hi]
        return (max(good) if good else 0), hi

    def next_commit(self) -> str | None:
        """The untested commit nearest the middle of (last good, first bad); None when none is left."""
        lo, hi = self.bounds()
        left = [i for i in range(lo + 1, hi) if self.commits[i] not in self.steps]
        if not left:
            return None
        mid = (lo + hi) / 2
        return self.commits[min(left, key=lambda i: (abs(i - mid), i))]


def _commit(repo: Path, ref: str, flag: str) -> str:
    try:
        return git(repo, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}").strip()
    except BadInput:
        raise BadInput(f"bisect: {flag} {ref}: no such commit in {repo}") from None


def new_bisection(
    root: Path,
    scenario: Path,
    repo: Path,
    good: str,
    bad: str,
    build: str | None,
    sets: list[str],
    build_cmd: str | None,
    good_repeats: int | None = None,
) -> Bisection:
    """A fresh bisection in ``root`` (made; refused when it already holds one): the refs resolved,
    the first-parent history between them, the worktree at ``root/src``."""
    if (root / STATE_FILE).exists():
        raise BadInput(f"bisect: {root} already holds a bisection: harness bisect --resume {shlex.quote(str(root))}")
    repo = repo.resolve()
    git(repo, "rev-parse", "--git-dir")  # BadInput with git's own words: not a repository
    g, b = (_commit(repo, ref, flag) for ref, flag in ((good, "--good"), (bad, "--bad")))
    if g == b:
        raise BadInput(f"bisect: --good {good} and --bad {bad} are the same commit")
    if subprocess.run(["git", "-C", str(repo), "merge-base", "--is-ancestor", g, b], capture_output=True).returncode:
        raise BadInput(f"bisect: --good {good} is not an ancestor of --bad {bad}")
    chain = git(repo, "rev-list", "--first-parent", "--reverse", f"{g}..{b}").split()
    if not chain or chain[-1] != b:
        raise BadInput(f"bisect: {bad} is not reached from {good} along first parents")
    commits = [g, *chain]
    subjects = [git(repo, "log", "-1", "--format=%s", c).strip() for c in commits]
    root.mkdir(parents=True, exist_ok=True)
    state = Bisection(
        root.resolve(),
        str(scenario.resolve()),
        str(repo),
        good,
        bad,
        commits,
        subjects,
        build,
        sets,
        build_cmd,
        good_repeats,
    )
    state.build = step_scenario(Path(state.scenario), state.src, build, sets).build  # BadInput before anything is made
    git(repo, "worktree", "add", "--detach", "--force", str(state.src), g)
    state.save()
    return state


# ------------------------------------------------------------------------------ one step


@dataclass
class StepRunner:
    """Runs one commit's step. ``run(scenario, only, results_dir)`` runs a loaded scenario and
    returns the runner's outcome (`harness.run.runner.run_scenario`, injected so a caller can
    pass its options); ``say`` prints a console line."""

    state: Bisection
    run: Callable[[Any, list[str], Path], Any]
    say: Callable[[str], None] = print

    def checkout(self, commit: str) -> str | None:
        """The worktree at ``commit`` and the build command run in it; why not, or None."""
        src = self.state.src
        log = self.state.root / "steps" / f"{commit[:12]}.build.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        try:
            git(src, "checkout", "--quiet", "--detach", "--force", commit)
            git(src, "clean", "-qffdx")
        except BadInput as exc:
            return f"cannot check out: {exc}"
        if not self.state.build_cmd:
            return None
        try:
            r = subprocess.run(
                self.state.build_cmd,
                shell=True,
                cwd=src,
                capture_output=True,
                text=True,
                timeout=BUILD_TIMEOUT_S,
                stdin=subprocess.DEVNULL,
            )
        except subprocess.TimeoutExpired:
            return f"the build command ran past {BUILD_TIMEOUT_S:g} s"
        results.write_text_atomic(log, f"$ {self.state.build_cmd}\n{r.stdout}{r.stderr}")
        if r.returncode != 0:
            tail = (r.stderr.strip() or r.stdout.strip()).splitlines()[-1:] or [""]
            return f"the build command exited {r.returncode} ({log.name}): {tail[0]}"
        return None

    def run_commit(self, commit: str, plan: StepScenario, repeats: int | None = None) -> tuple[Any | None, str | None]:
        """(the run's outcome, None) or (None, why the commit is skipped); ``repeats``: the good
        side's own count (the config hash does not cover it, so the steps compare with it)."""
        why = self.checkout(commit)
        if why:
            return None, why
        try:
            scn = load_step(Path(self.state.scenario), plan, good_repeats=repeats)
            outcome = self.run(scn, plan.variants, self.state.results_dir)
        except BadInput as exc:  # a build refused by harness/run/builds.py (or its scenario)
            return None, f"cannot build: {str(exc).splitlines()[-1].strip()}"
        if outcome.interrupted:
            raise Interrupted(str(outcome.run_dir))
        unstarted = [
            f"{v.name}: {v.cause or v.state}" for v in outcome.variants if v.state in ("startup_failed", "refused")
        ]
        if unstarted:
            return None, f"cannot start ({outcome.run_dir.name}): {'; '.join(unstarted)}"
        return outcome, None

    def judge(self, commit: str, plan: StepScenario, baseline: Path) -> dict:
        """One commit's step against the good run: good / bad / undecided / skip."""
        from harness.compare.render import to_markdown
        from harness.compare.rounds import decide, spent_minutes
        from harness.compare.runs import load_baseline, read_run, write_comparison
        from harness.compare.two_runs import compare_runs

        outcome, why = self.run_commit(commit, plan)
        if outcome is None:
            return {"verdict": SKIP, "why": why, "runs": []}
        night = outcome.run_dir

        def run_round(repeats: int, variants: list[str]):
            scn = load_step(Path(self.state.scenario), plan, repeats)
            out = self.run(scn, list(variants), self.state.results_dir)
            if out.interrupted:
                raise Interrupted(str(out.run_dir))
            return out.run_dir, out.exit_code

        budget = load_step(Path(self.state.scenario), plan).verdict.budget_minutes
        base, rounds = decide(night, str(baseline), self.state.results_dir, run_round, budget)
        cand = read_run(night)
        choice = load_baseline(base, self.state.results_dir, cand)
        pooled = [read_run(r) for r in rounds]
        comp = compare_runs(choice.run, cand, choice, pooled)
        write_comparison(cand, comp.to_dict())
        md = self.state.root / "steps" / f"{commit[:12]}.compare.md"
        results.write_text_atomic(md, to_markdown(comp))
        spent = spent_minutes([cand, *pooled])
        verdict = {"PASS": GOOD, "FAIL": BAD}.get(comp.outcome, UNDECIDED)
        step = {
            "verdict": verdict,
            "comparison": comp.outcome,
            "reasons": list(comp.reasons),
            "runs": [str(night), *(str(r) for r in rounds)],
            "gpu_minutes": round(spent, 4),
            "budget_minutes": budget,
            "compare_md": str(md),
        }
        if verdict == UNDECIDED:
            spent_why = (
                f"verdict.budget_minutes {budget:g} spent ({spent:.3g} GPU-minutes)"
                if budget is not None and spent >= budget
                else "no round left to run (verdict.rounds)"
            )
            step["why"] = f"still INCONCLUSIVE after the night and {len(rounds)} round(s): {spent_why}; " + (
                comp.advice or "; ".join(comp.reasons[:2])
            )
        else:
            step["why"] = f"{comp.outcome} against the good run" + (
                f": {comp.reasons[0]}" if comp.reasons and verdict == BAD else ""
            )
        return step


def _record(state: Bisection, commit: str, step: dict, say: Callable[[str], None], role: str = "step") -> None:
    state.steps[commit] = {"commit": commit, "subject": state.subjects[state.index(commit)], "role": role, **step}
    state.order.append(commit)
    state.save()
    say(f"harness bisect: {role} {len(state.order)}: {state.label(commit)}: {step['verdict'].upper()} — {step['why']}")


def bisect(state: Bisection, stepper: StepRunner) -> dict:
    """Run (or go on with) the bisection to its result (also stored in bisect.json)."""
    say = stepper.say
    if state.result is not None:
        return state.result
    plan = step_scenario(Path(state.scenario), state.src, state.build, state.sets)
    good, bad = state.commits[0], state.commits[-1]
    if good not in state.steps:
        say(f"harness bisect: the good side: {state.label(good)}")
        outcome, why = stepper.run_commit(good, plan, state.good_repeats)
        if outcome is None:
            raise BadInput(f"bisect: the good commit {good[:10]} {why}: no baseline to bisect against")
        if outcome.exit_code not in (ExitCode.OK, ExitCode.INCONCLUSIVE):
            head = outcome.verdict.headline() if outcome.verdict else f"exit {int(outcome.exit_code)}"
            raise BadInput(f"bisect: the good commit's own run is not a baseline ({outcome.run_dir}): {head}")
        _record(
            state,
            good,
            {"verdict": GOOD, "why": "the good side: the baseline", "runs": [str(outcome.run_dir)]},
            say,
            "good side",
        )
    baseline = Path(state.steps[good]["runs"][0])
    if bad not in state.steps:
        say(f"harness bisect: the bad side: {state.label(bad)}")
        _record(state, bad, stepper.judge(bad, plan, baseline), say, "bad side")
    while state.steps[bad]["verdict"] == BAD and (commit := state.next_commit()) is not None:
        lo, hi = state.bounds()
        say(
            f"harness bisect: {hi - lo - 1} commit(s) left between good {state.commits[lo][:10]} and bad "
            f"{state.commits[hi][:10]}; testing {state.label(commit)}"
        )
        _record(state, commit, stepper.judge(commit, plan, baseline), say)
    state.result = conclude(state)
    state.save()
    return state.result


def conclude(state: Bisection) -> dict:
    """The result once no commit is left to test: the first bad commit (with the last good one),
    or the range that skipped and undecided commits leave, or why there is nothing to bisect."""
    bad_step = state.steps[state.commits[-1]]
    if bad_step["verdict"] != BAD:
        outcome = {GOOD: "not_reproduced", UNDECIDED: "bad_undecided", SKIP: "bad_skipped"}[bad_step["verdict"]]
        code = {GOOD: ExitCode.OK, UNDECIDED: ExitCode.INCONCLUSIVE, SKIP: ExitCode.BAD_INPUT}[bad_step["verdict"]]
        return {"outcome": outcome, "exit_code": int(code), "why": bad_step["why"]}
    lo, hi = state.bounds()
    out: dict[str, Any] = {"last_good": state.commits[lo], "first_bad": state.commits[hi]}
    if hi - lo == 1:
        repo = Path(state.repo)
        g, b = state.commits[lo], state.commits[hi]
        diff = git(repo, "diff", g, b)
        results.write_text_atomic(state.root / DIFF_FILE, diff)
        out.update(
            outcome="found",
            exit_code=int(ExitCode.FAILED),
            log=git(repo, "log", "--stat", "-1", b),
            diffstat=git(repo, "diff", "--stat", g, b),
            diff_file=str(state.root / DIFF_FILE),
        )
        return out
    between = state.commits[lo + 1 : hi + 1]
    out.update(
        outcome="ambiguous",
        exit_code=int(ExitCode.INCONCLUSIVE),
        candidates=between,
        why=(
            "only skipped or undecided commits are left between the last good and the first bad one: "
            "the first bad commit is one of " + ", ".join(c[:10] for c in between)
        ),
    )
    return out


_SAFE = re.compile(r"[^A-Za-z0-9._-]+")


def default_root(scenario: Path, stamp: str) -> Path:
    return Path("bisect") / f"{_SAFE.sub('_', scenario.stem)}-{stamp}"

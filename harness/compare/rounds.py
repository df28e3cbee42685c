"""``harness run SCENARIO --decide [--baseline latest|RUN]``: decide sequentially by itself. After
the night, compare it with the baseline; while the comparison is INCONCLUSIVE, it advises a round
(`harness.compare.comparison.NextRound`: a round left under ``verdict.rounds``, the repeats the
worst inconclusive gating row still needs, only the variants and the workloads whose rows need
them) and the GPU
minutes measured so far (the night and its rounds, `harness.store.gpu_time`) have not reached
``verdict.budget_minutes``, run that round as a new run folder (``--repeats N --no-quality
--only V`` and only those workloads, the night's other ``--set`` kept so the config hashes match) and compare again with
every round pooled (`compare_runs` tests each look at the alpha ``verdict.rounds`` spends on it).
One console line per round says which rows and why, one why the loop stopped; the final look is
``harness compare``'s (comparison.json, the Markdown, its exit code). docs/reports.md, "Decide
sequentially"."""

from __future__ import annotations

from pathlib import Path

from harness.compare.runs import load_baseline, read_run, run_policy
from harness.compare.two_runs import compare_runs
from harness.core.exit_codes import ExitCode
from harness.store import run_folder
from harness.store.gpu_time import run_folder_gpu_time


def spent_minutes(runs: list[run_folder.LoadedRun]) -> float:
    """The GPU-minutes the night and its rounds measured (every bucket: what the budget pays)."""
    return sum(float(run_folder_gpu_time(r.paths)["gpu_minutes_total"] or 0.0) for r in runs)


def decide(
    night: Path, baseline: str, results_dir: Path, run_round, budget_minutes: float | None, pool: int = 1
) -> tuple[str, list[Path]]:
    """Compare ``night`` with ``baseline`` (``latest`` is chosen once, before any round exists),
    adding the rounds the looks advise; ``run_round(repeats, variants, workloads)`` runs one and returns
    (its folder or None, its exit code). Returns (the baseline, the rounds' folders) for the
    final look, which the caller makes with ``harness compare``. ``pool``: with ``latest``, the
    last ``pool`` passing nights pooled as the baseline side (`harness compare --pool`)."""
    cand = read_run(night)
    choice = load_baseline(baseline, results_dir, cand, pool if baseline == "latest" else 1)
    if choice.run is None:
        print("harness: --decide: no baseline to compare with; no rounds run", flush=True)
    rounds: list[run_folder.LoadedRun] = []
    while choice.run is not None:
        comp = compare_runs(choice.run, cand, choice, rounds)
        nxt = comp.next_round
        look = f"look {1 + len(rounds)}: {comp.outcome}"
        if comp.outcome != "INCONCLUSIVE":
            print(f"harness: {look}: decided", flush=True)
            break
        if nxt is None:
            print(f"harness: {look}, and no round left to run ({_why_none(cand, rounds)})", flush=True)
            break
        spent = spent_minutes([cand, *rounds])
        if budget_minutes is not None and spent >= budget_minutes:
            print(
                f"harness: {look}; round {nxt.number} not run: {spent:.3g} GPU-minutes measured, "
                f"verdict.budget_minutes {budget_minutes:g} spent",
                flush=True,
            )
            break
        budget = f" of verdict.budget_minutes {budget_minutes:g}" if budget_minutes is not None else ""
        print(
            f"harness: {look}; round {nxt.number} of at most {nxt.most}: {nxt.repeats} more repeats of "
            f"{', '.join(nxt.variants)} without quality, only {', '.join(nxt.workloads) or 'every workload'}, for "
            + "; ".join(nxt.rows)
            + f" ({spent:.3g} GPU-minutes "
            f"spent{budget})",
            flush=True,
        )
        folder, code = run_round(nxt.repeats, nxt.variants, nxt.workloads)
        if folder is None or code not in (ExitCode.OK, ExitCode.FAILED, ExitCode.INCONCLUSIVE):
            print(f"harness: round {nxt.number} did not complete (exit {int(code)}): not pooled; stopping", flush=True)
            break
        print(f"harness: round {nxt.number}: {folder} (exit {int(code)}), pooled with the night", flush=True)
        rounds.append(read_run(folder))
    pooled = baseline == "latest" and pool > 1  # the final look chooses the same nights again (rounds are newer)
    chosen = str(choice.run.paths.root) if choice.run is not None and not pooled else baseline
    return chosen, [r.paths.root for r in rounds]


def _why_none(cand: run_folder.LoadedRun, rounds: list[run_folder.LoadedRun]) -> str:
    allowed = run_policy(cand.manifest).rounds
    if len(rounds) >= allowed:
        return f"verdict.rounds {allowed}: {len(rounds)} used"
    return "no inconclusive gating row has a plan the repeats could meet"

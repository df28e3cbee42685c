"""A bisection's summary as Markdown (``summary.md`` in the bisect folder, and the console's text):
the steps, and the first bad commit with both runs, the comparison that decided it and what
changed (``git log --stat``, the diffstat; the whole diff is ``first_bad.diff``). Pure: reads the
state `harness.compare.bisect` stored, and the step's comparison Markdown it wrote."""

from __future__ import annotations

from pathlib import Path

from harness.compare.bisect import BAD, GOOD, SKIP, SUMMARY_FILE, UNDECIDED, Bisection
from harness.store import results

_HEAD = {
    "found": "first bad commit {first}",
    "ambiguous": "INCONCLUSIVE: the first bad commit is one of {n} (skipped or undecided commits)",
    "not_reproduced": "the bad commit is not worse than the good one on the gated rows: nothing to bisect",
    "bad_undecided": "INCONCLUSIVE: the bad commit could not be decided against the good one",
    "bad_skipped": "the bad commit cannot build or start: nothing to bisect against",
}
DIFF_LINES = 200  # of the diff shown in the summary (the whole diff is first_bad.diff)


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def summary_markdown(state: Bisection) -> str:
    res = state.result or {}
    outcome = res.get("outcome", "running")
    head = _HEAD.get(outcome, "not finished").format(
        first=str(res.get("first_bad", ""))[:10], n=len(res.get("candidates") or [])
    )
    counts = {v: sum(1 for s in state.steps.values() if s["verdict"] == v) for v in (GOOD, BAD, SKIP, UNDECIDED)}
    minutes = sum(float(s.get("gpu_minutes") or 0) for s in state.steps.values())
    lines = [
        f"# harness bisect: {Path(state.scenario).name} — {head}",
        "",
        f"- repository: `{state.repo}`; good `{state.good_ref}` ({state.commits[0][:10]}) .. bad `{state.bad_ref}` "
        f"({state.commits[-1][:10]}): {len(state.commits) - 1} commits along first parents",
        f"- build bisected: `{state.build}`; its sglang_source at `{state.src}`"
        + (f"; build command `{state.build_cmd}`" if state.build_cmd else ""),
        f"- steps: {len(state.order)} commits run — {counts[GOOD]} good, {counts[BAD]} bad, {counts[SKIP]} skipped, "
        f"{counts[UNDECIDED]} undecided; {minutes:.3g} GPU-minutes measured in the judged steps",
        f"- exit code: {res.get('exit_code', '—')}",
        "",
    ]
    if res.get("why"):
        lines += [f"**{res['why']}**", ""]
    lines += ["| # | commit | subject | verdict | why | runs |", "|---|---|---|---|---|---|"]
    for n, c in enumerate(state.order, 1):
        s = state.steps[c]
        runs = ", ".join(Path(r).name for r in s.get("runs") or []) or "—"
        lines.append(
            f"| {n} | `{c[:10]}` ({state.index(c)}) | {_cell(s['subject'])} | **{s['verdict'].upper()}** | "
            f"{_cell(s['why'])} | {runs} |"
        )
    if outcome == "found":
        lines += _found(state, res)
    return "\n".join(lines) + "\n"


def _found(state: Bisection, res: dict) -> list[str]:
    first, last = res["first_bad"], res["last_good"]
    fb, lg = state.steps[first], state.steps[last]
    out = [
        "",
        f"## First bad commit: `{first[:10]}` {_cell(fb['subject'])}",
        "",
        f"- last good: `{last[:10]}` {_cell(lg['subject'])} — run `{lg['runs'][0]}`",
        f"- first bad: run `{fb['runs'][0]}`"
        + (f" and its rounds {', '.join('`' + Path(r).name + '`' for r in fb['runs'][1:])}" if fb["runs"][1:] else ""),
        f"- judged against the good commit's run `{state.steps[state.commits[0]]['runs'][0]}`: {fb['comparison']}",
        "",
        "### What changed",
        "",
        "```",
        res["log"].rstrip(),
        "```",
        "",
    ]
    diff = Path(res["diff_file"]).read_text(encoding="utf-8", errors="replace").splitlines()
    out += ["```diff", *diff[:DIFF_LINES], "```"]
    if len(diff) > DIFF_LINES:
        out.append(f"({len(diff) - DIFF_LINES} more lines in `{res['diff_file']}`)")
    md = fb.get("compare_md")
    if md and Path(md).is_file():
        text = Path(md).read_text(encoding="utf-8").splitlines()
        out += ["", "### The comparison that decided it", ""]
        out += ["##" + line if line.startswith("#") else line for line in text]  # its headings below ours
    return out


def write_summary(state: Bisection) -> tuple[Path, str]:
    """summary.md written atomically; (its path, its text)."""
    text = summary_markdown(state)
    path = state.root / SUMMARY_FILE
    results.write_text_atomic(path, text)
    return path, text

"""The HTML report of the committed golden runs, rendered in headless Chromium, and its escaping.

The report reads run folders only, so these tests read the golden runs (`golden_run` in
conftest: tests/golden/runs/{healthy,regressed,merged,interrupted}, simulated runs with every
workload kind) instead of starting servers; a situation the golden runs lack (a parity FAIL, a GPU
selection, per-repeat derived figures, damaged files) is made by editing a copy's files. The
banner states `judge_run`'s verdict; the quality section sets ON-vs-OFF next to the OFF-vs-OFF
control; a delta is coloured only when significant. The Chromium tests skip with a reason when no
chromium binary is installed (`.ci/run` installs Debian's `chromium`).
"""

from __future__ import annotations

import base64
import dataclasses
import fcntl
import io
import json
import os
import re
import shutil
import stat
import subprocess
from pathlib import Path

import pytest
import yaml

import harness.workloads
from harness.analysis.run_products import judge_run
from harness.report import html as report_html
from harness.report.header import header
from harness.report.hicache_table import hicache_table
from harness.report.html import SECTIONS, write_report
from harness.report.tables import delta, delta_test
from harness.report.view import RunView, load_view
from harness.store import results
from harness.store.manifest import Manifest
from harness.workloads import kinds
from tests.conftest import GOLDEN_EXPECTED, GOLDEN_RUNS

XSS = "<script>alert(1)</script>"
XSS_ESCAPED = "&lt;script&gt;alert(1)&lt;/script&gt;"
CHROMIUM = next((shutil.which(b) for b in ("chromium", "chromium-browser", "google-chrome") if shutil.which(b)), None)
TRAILING_ROWS = ["quality parity"]  # after the workloads' rows; load-back needs a probe (golden runs have none)


# A 1x1 white PNG: what the figures are drawn into in the tests that read the report's text.
BLANK_PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAAAAAA6fptVAAAACklEQVR4nGP4DwABAQEAsTj2FAAAAABJRU5ErkJggg=="


@pytest.fixture(autouse=True)
def text_only_figures(request, monkeypatch):
    """Most tests here read the report's text (banner, tables, escaping): for them a figure is a
    blank PNG, not drawn, laid out and encoded (four fifths of a report's time). The figures
    themselves are checked on ``healthy_report`` (every kind of figure, drawn for real), and a test
    that changes what a figure plots asks for ``real_figures``."""
    if "healthy_report" in request.fixturenames or "real_figures" in request.fixturenames:
        return
    monkeypatch.setattr(report_html, "figure_png", lambda *a, **k: BLANK_PNG)


@pytest.fixture
def real_figures():
    """Marks a test whose report is drawn with its real figures (see ``text_only_figures``)."""


@pytest.fixture(scope="module")
def healthy_report(tmp_path_factory) -> Path:
    """The healthy golden run's report with its real figures, drawn once for the module (the tests
    that use it only read it)."""
    root = tmp_path_factory.mktemp("healthy_report")
    run = shutil.copytree(GOLDEN_RUNS / "healthy", root / "results" / "golden" / "healthy")
    return write_report(run, root / "reports")


def chromium(args: list[str], tmp: Path) -> subprocess.CompletedProcess:
    base = [
        CHROMIUM,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={tmp / 'profile'}",
    ]
    return subprocess.run(base + args, check=False, capture_output=True, text=True, timeout=90)


def inline_pngs(html: str) -> list[bytes]:
    return [base64.b64decode(m) for m in re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', html)]


def non_blank(png: bytes) -> tuple[tuple[int, int], float]:
    from PIL import Image

    im = Image.open(io.BytesIO(png)).convert("L")
    hist = im.histogram()
    return im.size, 1 - hist[255] / (im.size[0] * im.size[1])  # share of pixels that are not white


def declared_labels(run: Path) -> list[str]:
    """The HiCache-table labels the run's scenario declares: each workload's kind's report rows,
    workloads in scenario order (read from the manifest's scenario text, not from the view)."""
    scenario = yaml.safe_load(json.loads((run / "manifest.json").read_text())["scenario"]["text"])
    out = []
    for w in scenario["workloads"]:
        name = w.get("name") or w["kind"]
        out += [r.label.replace("{workload}", name) for r in kinds()[w["kind"]].report_rows]
    return out


def test_report_layout_and_sections(healthy_report):
    assert healthy_report.name == "index.html"
    assert healthy_report.parent.name == "healthy" and healthy_report.parent.parent.name == "golden"
    html = healthy_report.read_text()
    for s in SECTIONS:
        assert f'<section id="{s}"' in html, s
    assert 'id="simulated-banner"' in html
    # self-contained: nothing fetched (links to summary.csv are navigation, not loads)
    assert not re.search(r'(src|href)="(https?:)?//', html)
    assert "<script" not in html.lower()
    assert "summary.csv" in html
    # the failed variant appears as a failure, never as numbers, with its log excerpt
    assert "startup_failed: host_memory" in html
    assert "ValueError: Not enough host memory available. Requesting 200.00 GB" in html
    assert banner_of(html) == ("PASS", [])
    pngs = inline_pngs(html)
    assert len(pngs) >= 8
    for png in pngs:
        (w, h), ink = non_blank(png)
        assert w > 300 and h > 150 and ink > 0.02
    for alt in ("pass wall times", "tier hits of on-r2", "TTFT of multi_turn", "time series of off"):
        assert f'alt="{alt}"' in html, alt


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install chromium)")
def test_report_renders_in_chromium(healthy_report, tmp_path):
    url = healthy_report.resolve().as_uri()
    dom = chromium(["--dump-dom", url], tmp_path)
    assert dom.returncode == 0, dom.stderr[-2000:]
    for s in SECTIONS:
        assert f'id="{s}"' in dom.stdout, s
    assert "SIMULATED RUN" in dom.stdout
    shot = tmp_path / "shot.png"
    r = chromium([f"--screenshot={shot}", "--window-size=1400,8000", url], tmp_path)
    assert r.returncode == 0 and shot.exists(), r.stderr[-2000:]
    (w, h), ink = non_blank(shot.read_bytes())
    assert (w, h) == (1400, 8000) and ink > 0.05


def _poison(run: Path) -> Path:
    """Set outside text of the run to a script tag: a YAML string (description), a log line, a
    variant name (by hand: the scenario loader forbids '<' in names) and a model output."""
    m = json.loads((run / "manifest.json").read_text())
    text = m["scenario"]["text"]
    m["scenario"]["text"], n = re.subn(r"^description: .*$", f'description: "{XSS}"', text, count=1, flags=re.MULTILINE)
    assert n == 1
    old, new = "on-200gb", f"on{XSS}"
    for v in m["variants"]:
        if v["name"] == old:
            v["name"] = new
    (run / "manifest.json").write_text(json.dumps(m))
    (run / old).rename(run / results.safe_name(new))
    st_path = run / results.safe_name(new) / "status.json"
    st = json.loads(st_path.read_text())
    st["log_excerpt"]["lines"].append(f"ValueError: {XSS}")
    st_path.write_text(json.dumps(st))
    parity_path = run / "on-r2" / "parity.json"
    parity = json.loads(parity_path.read_text())
    c = parity["comparisons"][0]
    c.update(kind="divergence", token_equal=False, first_divergence=1)
    parity_path.write_text(json.dumps(parity))
    q_path = run / "on-r2" / "quality.jsonl"
    rows = [json.loads(line) for line in q_path.read_text().splitlines()]
    for r in rows:
        if (r["task"], r["length_target"], r["index"], r["seed"], r["ask"]) == (
            c["task"],
            c["length_target"],
            c["index"],
            c["seed"],
            c["ask"],
        ) and r["arm_role"] == "on":
            r["text"] = f"the answer is {XSS}"
    q_path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return run


def test_outside_text_is_escaped(golden_run, tmp_path):
    run = _poison(golden_run("healthy"))
    report = write_report(run, tmp_path / "reports")
    html = report.read_text()
    assert "<script" not in html.lower()
    assert f'id="description">{XSS_ESCAPED}' in html  # the YAML string
    assert f"ValueError: {XSS_ESCAPED}" in html  # the log line
    assert f"<td>on{XSS_ESCAPED}</td>" in html  # the variant name
    assert f"the answer is {XSS_ESCAPED}" in html  # the model output (worst samples)
    if CHROMIUM is not None:
        dom = chromium(["--dump-dom", report.resolve().as_uri()], tmp_path)
        assert "<script" not in dom.stdout.lower() and "alert(1)" in dom.stdout


def test_report_cli_bad_input(tmp_path, capsys):
    from argparse import Namespace

    from harness.report.html import cli_main

    assert cli_main(Namespace(run=str(tmp_path / "missing"), reports_dir=str(tmp_path))) == 2
    assert "missing" in capsys.readouterr().err


@pytest.mark.parametrize("kind", ["fifo", "device", "link", "folder", "linked folder"])
def test_the_report_is_written_only_to_a_regular_file(golden_run, tmp_path, capsys, kind):
    """The report's own target, checked as --junit and --markdown are: its index.html (or the
    run's report folder) a FIFO, /dev/null, a link or a folder was replaced by a regular file
    without a word (a FIFO one, or a link to a file elsewhere, became a copy beside it). Now one
    line naming it, exit 2, nothing written or followed."""
    from argparse import Namespace

    from harness.report.html import cli_main, report_dir_of
    from harness.store import results as R

    run = golden_run("healthy")
    reports = tmp_path / "reports"
    folder = report_dir_of(R.read_json(run / "manifest.json")["scenario"]["name"], run, reports)
    folder.parent.mkdir(parents=True)
    elsewhere = tmp_path / "elsewhere.html"
    elsewhere.write_text("keep me")
    if kind == "linked folder":
        (tmp_path / "other").mkdir()
        folder.symlink_to(tmp_path / "other")
        bad = folder
    else:
        folder.mkdir()
        bad = folder / "index.html"
        if kind == "fifo":
            os.mkfifo(bad)
        elif kind == "device":
            bad.symlink_to("/dev/null")
        elif kind == "link":
            bad.symlink_to(elsewhere)
        else:
            bad.mkdir()
    assert cli_main(Namespace(run=str(run), reports_dir=str(reports))) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"harness report: report {bad}: ") and "not a " in err[0], err
    assert elsewhere.read_text() == "keep me"
    assert not (tmp_path / "other" / "index.html").exists()
    assert os.path.islink(bad) or not bad.is_file()  # left as it was
    if kind == "fifo":
        assert stat.S_ISFIFO(os.lstat(bad).st_mode)


def test_report_shows_a_comparison(golden_run, tmp_path):
    run = golden_run("healthy")
    shutil.copy(GOLDEN_EXPECTED / "healthy_vs_healthy.comparison.json", run / "comparison.json")
    comparison = json.loads((run / "comparison.json").read_text())
    html = write_report(run, tmp_path / "reports").read_text()
    assert "No comparison yet" not in html
    section = html[html.index('<section id="comparison"') :]
    shown = [m for m in comparison["metrics"] if m["state"] != "unchanged"]
    rows = re.findall(r'<tr><td class="label">[^<]*</td><td class="label">[^<]*/[^<]*</td>', section)
    assert len(rows) == len(shown) and (shown or "all compared metrics unchanged" in section)


def banner_of(html: str) -> tuple[str, list[str]]:
    """(the banner's run verdict, its reason lines) as the page states them."""
    outcome = re.search(r'id="run-verdict">([A-Z_]+)<', html).group(1)
    ul = re.search(r'<ul id="verdict-reasons">(.*?)</ul>', html, re.DOTALL)
    reasons = re.findall(r"<li>(.*?)</li>", ul.group(1)) if ul else []
    return outcome, [
        r.replace("&lt;", "<").replace("&gt;", ">").replace("&#39;", "'").replace("&amp;", "&") for r in reasons
    ]


def judged(run: Path) -> tuple[str, list[str]]:
    v = judge_run(run)
    return v.outcome.value, [r.line() for r in v.reasons]


@pytest.mark.parametrize("name", ["healthy", "regressed", "interrupted"])
def test_the_banner_states_judge_runs_verdict(golden_run, tmp_path, name):
    run = golden_run(name)
    if name == "regressed":
        shutil.copy(GOLDEN_EXPECTED / "regressed_vs_healthy.comparison.json", run / "comparison.json")
    html = write_report(run, tmp_path / "reports").read_text()
    assert banner_of(html) == judged(run)
    # each variant's outcome; an expected failure neutral, never red
    for v in judge_run(run).variants:
        css = {"EXPECTED_FAILURE": "EXPECTED"}.get(v.outcome.value, v.outcome.value)
        assert re.search(rf'<span class="verdict small {css}"[^>]*>{v.outcome.value}</span> {v.variant}', html), v


def test_the_comparison_verdict_is_shown_beside_the_run_verdict(golden_run, tmp_path):
    run = golden_run("regressed")
    shutil.copy(GOLDEN_EXPECTED / "regressed_vs_healthy.comparison.json", run / "comparison.json")
    stored = json.loads((run / "comparison.json").read_text())["verdict"]
    html = write_report(run, tmp_path / "reports").read_text()
    # the run's own verdict (within-run rules) stays judge_run's; the comparison's is labelled as such
    assert banner_of(html) == judged(run)
    assert re.search(rf'id="comparison-verdict">{stored}</span> <b>comparison verdict</b> against healthy', html)


@pytest.mark.parametrize(
    "verdict, css",
    [
        ("regression", "FAIL"),
        ("FAIL", "FAIL"),
        ("pass", "PASS"),
        ("PASS", "PASS"),
        ("INCONCLUSIVE", "INCONCLUSIVE"),
        ("no_baseline", "EXPECTED"),
    ],
)
def test_a_comparison_verdict_is_coloured_by_what_it_says(golden_run, tmp_path, verdict, css):
    run = golden_run("regressed")
    comparison = json.loads((GOLDEN_EXPECTED / "regressed_vs_healthy.comparison.json").read_text())
    comparison.update(verdict=verdict, reasons=[f"on-r2: reason {i}" for i in range(7)])
    (run / "comparison.json").write_text(json.dumps(comparison))
    html = write_report(run, tmp_path / "reports").read_text()
    assert banner_of(html) == judged(run) == ("PASS", [])
    assert f'<span class="verdict small {css}" id="comparison-verdict">{verdict}</span>' in html
    # folded under a line that counts them (open when the comparison FAILed): the first screen leads
    folded = re.search(
        r'<details class="muted" id="comparison-reasons"( open)?><summary>(.*?)</summary><ul>(.*?)</ul>', html
    )
    assert folded.group(2) == "the comparison's reasons (7)" and bool(folded.group(1)) == (css == "FAIL")
    listed = folded.group(3)
    assert re.findall(r"<li>(.*?)</li>", listed) == [f"comparison: on-r2: reason {i}" for i in range(5)] + [
        "comparison: (+2 more)"
    ]


def test_interrupted_run_reports_what_it_has(golden_run, tmp_path):
    run = golden_run("interrupted")
    html = write_report(run, tmp_path / "reports").read_text()
    assert banner_of(html) == (
        "INTERRUPTED",
        ["on-r2: stopped by a signal", "on-200gb: not reached: the run was interrupted"],
    )
    # on-r2 stopped mid-workload: a failure in every HiCache cell, its samples until it stopped
    assert '<td class="fail">interrupted</td>' in html
    assert "samples until it stopped" in html
    assert '<td class="fail">not_run: not reached: the run was interrupted</td>' in html


def test_a_run_still_being_written_is_incomplete_not_pass(golden_run, tmp_path):
    """A report drawn while the run is live (no COMPLETE, its .lock held) said PASS plus a note."""
    run = golden_run("healthy")
    (run / "COMPLETE").unlink()
    fd = os.open(run / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        os.write(fd, b"pid 4242 on box since 2026-12-01T23:00:00Z\n")
        fcntl.flock(fd, fcntl.LOCK_EX)  # as the running harness holds it
        live = write_report(run, tmp_path / "live").read_text()
    finally:
        os.close(fd)
    assert banner_of(live) == (
        "INCOMPLETE",
        [
            "still running (pid 4242 on box since 2026-12-01T23:00:00Z holds its .lock): this page shows what it "
            "has written so far"
        ],
    )
    assert "(exit 0)" not in live and "(not finished)" in live
    # nobody holds the lock now: killed, or stopped without a marker
    (dead,) = banner_of(write_report(run, tmp_path / "dead").read_text())[1]
    assert dead.startswith("did not finish: no COMPLETE marker and no process holds its .lock")
    assert f"harness run --resume {run}" in dead


def test_a_stored_verdict_that_disagrees_is_named(golden_run, tmp_path):
    run = golden_run("healthy")
    (run / "verdict.json").write_text(json.dumps({"schema_version": 1, "outcome": "FAIL", "reasons": []}))
    html = write_report(run, tmp_path / "reports").read_text()
    assert banner_of(html) == ("PASS", [])
    assert "verdict.json, written by the run, states FAIL; the rules of this harness give PASS" in html
    (run / "verdict.json").write_text(json.dumps({"schema_version": 1, "outcome": "PASS", "reasons": []}))
    assert "verdict.json, written by the run" not in write_report(run, tmp_path / "reports").read_text()


# -- quality: the control next to ON ----------------------------------------------------------

FLOOR_FAIL = {
    "test": "paired sign test (exact binomial, one-sided): ON-vs-OFF vs OFF-vs-OFF per (sample, ask)",
    "alpha": 0.01,
    "min_keys": 7,
    "keys": 20,
    "on_worse": 14,
    "control_worse": 1,
    "ties": 5,
    "p_value": 0.000488,
    "significant": True,
    "worse_keys": [],
    "on": {
        "pairs": 20,
        "differing": 15,
        "token_equal": 5,
        "tie_flips": 1,
        "divergences": 14,
        "outside_topk": 11,
        "first_divergence_median": 2,
        "first_divergence_min": 0,
        "dlogprob_median": 0.41,
        "dlogprob_max": 3.7,
    },
    "control": {
        "pairs": 20,
        "differing": 2,
        "token_equal": 18,
        "tie_flips": 2,
        "divergences": 0,
        "outside_topk": 0,
        "first_divergence_median": 17,
        "first_divergence_min": 9,
        "dlogprob_median": 0.0,
        "dlogprob_max": 0.02,
    },
}
FAIL_REASON = (
    "paired sign test over 20 (sample, ask) keys: ON further from OFF in 14, control further in 1, "
    "tied 5; p=0.000488 (alpha 0.01); differing pairs ON 15/20 vs control 2/20"
)


def _set_parity(run: Path, verdict: str, reason: str, floor: dict | None, group_verdict: str | None = None) -> None:
    """Rewrite on-r2's summary parity as the run's parity step would have stored it."""
    path = run / "on-r2" / "summary.json"
    s = json.loads(path.read_text())
    p = s["quality"]["parity"]
    p.update(verdict=verdict, reason=reason, floor=floor, alpha=0.01)
    for i, g in enumerate(p["groups"]):
        g.update(
            verdict=group_verdict or verdict,
            pairs=10,
            token_equal=10 - 7 - i,
            control_pairs=10,
            control_differing=1 + i,
            control_worst="tie_flip",
            on_worse=7 - i,
            control_worse=i,
            p_value=0.0078 + i,
        )
    path.write_text(json.dumps(s))


def test_a_parity_fail_fails_the_banner_and_shows_the_control_next_to_on(golden_run, tmp_path):
    run = golden_run("healthy")
    _set_parity(run, "FAIL", FAIL_REASON, FLOOR_FAIL)
    html = write_report(run, tmp_path / "reports").read_text()
    outcome, reasons = banner_of(html)
    assert (outcome, reasons) == judged(run) and outcome == "FAIL"
    assert reasons == [f"on-r2: quality parity FAIL: {FAIL_REASON}"]
    q = html[html.index('<section id="quality"') : html.index('<section id="failures"')]
    assert '<span class="bad parity-verdict">FAIL</span>' in q
    # the spreads side by side: (label, ON vs OFF, OFF vs OFF)
    rows = {
        label: (on, ctl)
        for label, on, ctl in re.findall(r'<tr><td class="label">([^<]+)</td><td>([^<]+)</td><td>([^<]+)</td></tr>', q)
    }
    assert "<th>ON vs OFF</th><th>OFF vs OFF (control)</th>" in q
    assert rows["pairs that differ"] == ("15", "2") and rows["divergences"] == ("14", "0")
    assert rows["first divergence, median"] == ("2", "17") and rows["|Δlogprob|, max"] == ("3.7", "0.02")
    # the test: its name, n per arm, p against alpha
    assert "<b>test:</b> paired sign test (exact binomial, one-sided)" in q
    assert "n ON 20, control 20" in q and "<b>p = 0.000488</b> (alpha 0.01): significant" in q
    assert "ON further from OFF in 14, control further in 1, tied 5" in q
    # per group: ON-vs-OFF differing next to the control's, keys each way, the group's p, its reason
    assert re.search(
        r'<td class="bad">FAIL</td><td>7 / 10</td><td>1 / 10</td><td>tie_flip</td><td>7 / 0</td>'
        r"<td>0.0078</td>",
        q,
    )
    assert "token-equal" in q  # the group's reason, read from parity.json (the summary does not keep it)
    # the HiCache table's parity cell is red
    assert '<td class="bad">FAIL</td>' in html[html.index('<section id="hicache"') : html.index('<section id="memory"')]


@pytest.mark.parametrize("verdict", ["INCONCLUSIVE", "NOT_EXERCISED"])
def test_a_parity_that_cannot_tell_is_neither_green_nor_red(golden_run, tmp_path, verdict):
    run = golden_run("healthy")
    floor = {
        **FLOOR_FAIL,
        "keys": 4,
        "on_worse": 2,
        "control_worse": 1,
        "ties": 1,
        "p_value": 0.5,
        "significant": False,
    }
    _set_parity(run, verdict, "fewer than 7 paired host-hit keys", floor)
    html = write_report(run, tmp_path / "reports").read_text()
    assert banner_of(html) == judged(run)
    assert banner_of(html)[0] == "INCONCLUSIVE"
    q = html[html.index('<section id="quality"') : html.index('<section id="failures"')]
    assert f'<span class="unknown parity-verdict">{verdict}</span> <span class="muted">(cannot tell)</span>' in q
    assert f'<td class="unknown">{verdict}</td>' in q
    hicache = html[html.index('<section id="hicache"') : html.index('<section id="memory"')]
    assert f'<td class="unknown">{verdict}<br><span class="sub">cannot tell</span></td>' in hicache
    assert "good" not in re.search(r'<tr><td class="label">quality parity</td>.*?</tr>', hicache).group(0)


def test_a_parity_without_control_figures_says_so(golden_run, tmp_path):
    """The golden runs' summaries predate the control's figures: the page says they are absent."""
    html = write_report(golden_run("healthy"), tmp_path / "reports").read_text()
    assert "This run's parity has no control figures" in html


# -- deltas: coloured only when significant, n shown ------------------------------------------


def test_delta_test_picks_its_test_by_n():
    rng = __import__("numpy").random.default_rng(1)
    a, b = rng.normal(10, 1, 8), rng.normal(20, 1, 8)
    t = delta_test(a, b)
    assert (t.test, t.n_base, t.n, t.significant) == ("mann_whitney", 8, 8, True) and t.p_value < 0.01
    t = delta_test(a, rng.normal(10, 1, 8))
    assert t.test == "mann_whitney" and t.significant is False
    t = delta_test([10, 11, 12], [20, 21, 22, 23])  # 3-5 a side: bootstrap CI of the median difference
    assert t.test == "bootstrap" and t.significant is True and t.ci[0] > 0
    t = delta_test([10, 20, 30], [11, 21, 31])
    assert t.test == "bootstrap" and t.significant is False and t.ci[0] < 0 < t.ci[1]
    assert delta_test([1, 2], [5, 6, 7]).significant is None  # too few: no test
    assert delta_test([5.0] * 7, [5.0] * 7).significant is False
    assert delta_test([1, 2, float("nan")], [5, 6, 7]).n_base == 2  # NaN is not a value
    # the colour follows the test
    assert delta(12.0, 10.0, True, True) == ("+20.0%", "good")
    assert delta(12.0, 10.0, True, False) == ("+20.0%", "ns")
    assert delta(12.0, 10.0, True, None) == ("+20.0%", "")
    assert delta(10.05, 10.0, True, True) == ("+0.5%", "")  # under 1 %


def test_mann_whitney_without_scipy_is_scipys_normal_approximation(monkeypatch):
    """A report-only install (no [stats] extra) runs the same test, approximated as scipy does."""
    import sys

    import numpy as np
    from scipy.stats import mannwhitneyu

    from harness.report.tables import mann_whitney_p

    rng = np.random.default_rng(3)
    cases = [(np.round(rng.normal(10, 2, 9), 1), np.round(rng.normal(11, 2, 14), 1)) for _ in range(5)]
    cases.append((np.arange(8.0), np.arange(8.0) + 20))
    want = [float(mannwhitneyu(c, b, alternative="two-sided", method="asymptotic").pvalue) for b, c in cases]
    monkeypatch.setitem(sys.modules, "scipy.stats", None)  # import scipy.stats raises ImportError
    got = [mann_whitney_p(b, c) for b, c in cases]
    assert got == pytest.approx(want, rel=1e-9) and got[-1] < 0.01


def _cell_html(html: str, label: str, variant_index: int) -> str:
    row = re.search(rf'<tr><td class="label">{re.escape(label)}</td>(.*?)</tr>', html, re.DOTALL).group(1)
    return re.findall(r"<td[^>]*>.*?</td>", row, re.DOTALL)[1 + variant_index]


def test_a_non_significant_delta_is_grey_and_says_n(golden_run, tmp_path):
    """healthy: on-r2's short TTFT alone is +112 % (the old rule coloured it red), but 9 vs 9
    requests do not differ significantly."""
    run = golden_run("healthy")
    cell = next(c for c in hicache_table(load_view(run))[0] if c.label == "short TTFT alone").cells[1]
    assert cell.delta.startswith("+") and abs(float(cell.delta[:-1])) > 50
    assert cell.css == "ns" and cell.sub == "n=9/9 · n.s." and "Mann-Whitney U" in cell.title
    html = write_report(run, tmp_path / "reports").read_text()
    td = _cell_html(html, "short TTFT alone", 1)
    assert td.startswith('<td class="ns" title="not significant: Mann-Whitney U, two-sided p=')
    assert "n off=9 reqs, on-r2=9 reqs" in td or "n off=9 req, on-r2=9 req" in td
    assert '<span class="sub">n=9/9 · n.s.</span>' in td


def test_a_significant_delta_is_coloured_and_says_n(golden_run, tmp_path):
    """regressed: on-r2's pass 2 wall is 60 % shorter than off's, 3 passes against 3, none overlapping."""
    run = golden_run("regressed")
    html = write_report(run, tmp_path / "reports").read_text()
    td = _cell_html(html, "parallel prefixes pass 2 wall", 1)
    assert td.startswith('<td class="good" title="significant: bootstrap 95% CI of the median difference')
    assert "n off=3 groups, on-r2=3 groups" in td and '<span class="sub">n=3/3</span>' in td
    # a derived figure is tested on its repeats: the golden summaries predate derived_by_repeat,
    # and the figures (harness.analysis.figures) recompute them from the records, as compare does
    td = _cell_html(html, "second-pass speedup", 1)
    assert (
        td.startswith('<td class="ns" title="not significant: bootstrap') and "n off=3 repeats, on-r2=3 repeats" in td
    )


def test_a_figure_with_one_value_per_run_is_never_coloured_and_says_so(golden_run, tmp_path):
    run = golden_run("regressed")
    _set_repeats(run, "off", "parallel_prefixes", "second_pass_speedup", [1.0])
    _set_repeats(run, "on-r2", "parallel_prefixes", "second_pass_speedup", [2.6])
    html = write_report(run, tmp_path / "reports").read_text()
    td = _cell_html(html, "second-pass speedup", 1)
    assert td.startswith('<td class="" title="not tested: no test: 1 vs 1 values') and "n=1/1 · no test" in td
    # ... and what would test it: more repeats, or a gate
    assert "n=1/1 · no test (--repeats 3)" in td and "more repeats would test it (--repeats 3" in td
    assert "or a gate on the figure (an expectations check)" in td


def _set_repeats(run: Path, name: str, workload: str, figure: str, values: list[float]) -> None:
    path = run / name / "summary.json"
    s = json.loads(path.read_text())
    s["workloads"][workload]["derived_by_repeat"] = {figure: values}
    s["workloads"][workload]["derived"][figure] = sorted(values)[len(values) // 2]
    path.write_text(json.dumps(s))


@pytest.mark.parametrize(
    "off, on, css",
    [
        ([1.0, 1.1, 0.9], [4.0, 4.2, 3.9], "good"),
        ([1.0, 1.1, 0.9], [0.5, 0.4, 0.45], "bad"),
        ([1.0, 4.1, 0.9], [4.0, 1.2, 3.9], "ns"),
        ([1.0, 1.1], [4.0, 4.2], ""),
    ],
)
def test_a_derived_figure_is_judged_on_its_repeats(golden_run, off, on, css):
    run = golden_run("healthy")
    wl = "parallel_prefixes"
    _set_repeats(run, "off", wl, "second_pass_speedup", off)
    _set_repeats(run, "on-r2", wl, "second_pass_speedup", on)
    cell = next(r for r in hicache_table(load_view(run))[0] if r.label == "second-pass speedup").cells[1]
    assert cell.css == css and cell.sub.startswith(f"n={len(off)}/{len(on)}")
    assert f"{len(on)} repeats" in cell.title


def test_the_baseline_of_a_host_tier_figure_is_labelled_no_hicache(golden_run):
    rows = {r.label: r for r in hicache_table(load_view(golden_run("healthy")))[0]}
    for label in ("second-pass speedup", "parallel prefixes pass 2 wall", "repeat speedup, host hit"):
        off = rows[label].cells[0]
        assert off.sub.endswith("no HiCache: baseline") and "no-cache baseline" in off.title, label
    for label in ("repeat speedup, device hit", "parallel prefixes pass 1 wall", "short TTFT alone"):
        assert rows[label].cells[0].sub.endswith(" · baseline"), label


def test_an_expected_failure_is_neutral_in_the_tables(golden_run, tmp_path):
    html = write_report(golden_run("healthy"), tmp_path / "reports").read_text()
    hicache = html[html.index('<section id="hicache"') : html.index('<section id="memory"')]
    assert '<td class="expected" title="failed as the scenario declared">startup_failed: host_memory</td>' in hicache
    assert '<td class="fail">startup_failed' not in hicache


@pytest.mark.usefixtures("real_figures")  # the GPU panel is drawn for real
def test_the_gpu_memory_series_names_the_gpus_sampled(golden_run, tmp_path):
    run = golden_run("healthy")
    how = "CUDA_VISIBLE_DEVICES=2,3 → NVML [2, 3]"
    lines = (run / "off" / "samples.jsonl").read_text().splitlines()
    out = []
    for i, line in enumerate(lines):
        d = json.loads(line)
        d["gpus"] = [{"index": 2, "mem_used_mib": 1000.0 + i}, {"index": 3, "mem_used_mib": 900.0}]
        out.append(json.dumps(d))
    (run / "off" / "samples.jsonl").write_text("\n".join(out) + "\n")
    s = json.loads((run / "off" / "summary.json").read_text())
    for ph in s["sampling"]["phases"].values():
        ph.update(
            gpus_sampled=["2", "3"],
            gpu_selection={"indices": [2, 3], "method": "cuda_visible_devices", "how": how},
            peak_gpu_mem_used_mib={"2": 1100.0, "3": 900.0},
        )
    (run / "off" / "summary.json").write_text(json.dumps(s))
    html = write_report(run, tmp_path / "reports").read_text()
    assert f'<p class="muted gpu-label">GPU memory used (sum of GPUs 2, 3): {how}</p>' in html
    assert "all GPUs" not in html
    assert f'title="{how}">GPU2: 1.1, GPU3: 0.9</td>' in html


# -- damaged files -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "rel, text",
    [
        ("manifest.json", "[1,2]"),
        ("on-r2/status.json", "[]"),
        ("on-r2/summary.json", '"hello"'),
        ("expectations.json", "[]"),
        ("manifest.json", '{"schema_version": 1, "variants": []}'),
        ("on-r2/summary.json", '{"workloads": [1]}'),
        ("on-r2/summary.json", '{"quality": {"parity": "PASS"}}'),
    ],
)
def test_a_damaged_file_exits_2_naming_it(golden_run, tmp_path, capsys, rel, text):
    from argparse import Namespace

    from harness.report.html import cli_main

    run = golden_run("healthy")
    (run / rel).write_text(text)
    assert cli_main(Namespace(run=str(run), reports_dir=str(tmp_path / "reports"))) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(run / rel) in err and "Traceback" not in err
    assert not (tmp_path / "reports").exists()


def test_a_missing_variant_folder_is_missing_never_a_pass(golden_run, tmp_path):
    run = golden_run("healthy")
    shutil.rmtree(run / "on-r2")
    html = write_report(run, tmp_path / "reports").read_text()
    assert banner_of(html) == judged(run) == ("FAIL", ["on-r2: did not run (state missing)"])
    assert re.search(r'<span class="verdict small FAIL"[^>]*>FAIL</span> on-r2', html)
    hicache = html[html.index('<section id="hicache"') : html.index('<section id="memory"')]
    assert hicache.count('<td class="fail">missing: no variant folder</td>') == len(hicache_table(load_view(run))[0])
    assert '<h3>on-r2: <span class="fail">missing (no variant folder) — UNEXPECTED</span></h3>' in html


def test_merged_run_has_the_table_of_a_single_run(golden_run):
    healthy, merged = load_view(golden_run("healthy")), load_view(golden_run("merged"))
    labels = lambda view: [r.label for r in hicache_table(view)[0]]
    assert labels(merged) == labels(healthy)
    assert hicache_table(merged)[1] == "off"


def test_hicache_table_rows_are_the_declared_rows_of_each_workload(golden_run):
    run = golden_run("healthy")
    view = load_view(run)
    assert set(view.workload_kinds.values()) == {
        "cold_prefill",
        "repeat_prefill",
        "parallel_prefixes",
        "short_ttft",
        "decode",
        "multi_turn",
    }
    assert not kinds()["multi_turn"].report_rows  # a kind that declares none adds none
    rows, base = hicache_table(view)
    assert base == "off"
    workload_rows = declared_labels(run)
    assert len(workload_rows) == sum(
        len(k.report_rows) for k in kinds().values() if k.name in view.workload_kinds.values()
    )
    # a row no variant has a number for is dropped: here repeat_prefill's storage rows (the golden
    # run's config has no storage phases) and the roofline rows (its summaries predate rooflines);
    # every other declared row is shown, in declared order
    shown = [r.label for r in rows]
    assert set(workload_rows) - set(shown) == {
        "repeat speedup, storage hit",
        "TTFT, storage hit",
        "storage-hit fraction",
        "host hit / roofline floor",
        "storage hit / roofline floor",
        "pass 2 / roofline floor",
    }
    assert shown == [label for label in workload_rows if label in shown] + TRAILING_ROWS
    by_label = {r.label: r for r in rows}
    assert by_label["cold prefill (cold_prefill)"].unit == "tok/s"
    assert by_label["short TTFT alone"].note == "short_ttft, p50"
    for r in rows:
        cells = dict(zip(view.names, r.cells))
        assert cells["on-200gb"].text == "startup_failed: host_memory" and cells["on-200gb"].value is None
        assert cells["on-r2"].value is not None, r.label
        if r.label in workload_rows:
            assert isinstance(cells["off"].value, float) and cells["off"].delta == "", r.label  # the baseline
            assert isinstance(cells["on-r2"].value, float) and cells["on-r2"].delta.endswith("%"), r.label


def test_a_kind_without_report_rows_adds_none(golden_run, monkeypatch):
    view = load_view(golden_run("healthy"))
    before = [r.label for r in hicache_table(view)[0]]
    declared = dict(kinds())
    dropped = [r.label for r in declared["parallel_prefixes"].report_rows]
    declared["parallel_prefixes"] = dataclasses.replace(declared["parallel_prefixes"], report_rows=())
    monkeypatch.setattr(harness.workloads, "kinds", lambda: declared)
    after = [r.label for r in hicache_table(view)[0]]
    assert dropped and after == [label for label in before if label not in dropped]


def test_an_unparseable_scenario_names_workloads_by_kind(golden_run):
    run = golden_run("healthy")
    parsed = sorted(r.label for r in hicache_table(load_view(run))[0])
    m = json.loads((run / "manifest.json").read_text())
    m["scenario"]["text"] = "workloads: [unclosed"
    (run / "manifest.json").write_text(json.dumps(m))
    view = load_view(run)
    assert view.workload_kinds == {} and view.description == ""
    # the golden workloads are unnamed (named after their kind), so the rows are the same
    assert sorted(r.label for r in hicache_table(view)[0]) == parsed


def test_header_never_shows_a_missing_memtotal_as_zero():
    def host_rows(host: dict) -> dict:
        manifest = Manifest.from_json(
            Path("manifest.json"), {"schema_version": 1, "scenario": {"name": "s"}, "host": host}
        )
        view = RunView(Path("r"), manifest, [], True, False, {}, None, None)
        return dict(header(view)["host"])

    assert host_rows({"hostname": "h", "mem_total_kib": None})["MemTotal"] == "not recorded"
    assert host_rows({})["MemTotal"] == "not recorded"
    assert host_rows({"mem_total_kib": 32 * 1024 * 1024})["MemTotal"] == "32.0 GiB"


def _effect(html: str) -> str:
    m = re.search(r'<div class="headline" id="hicache-effect">(.*?)\n</div>', html, re.S)
    assert m, "no HiCache effect box"
    return m.group(1)


def test_the_headline_box_leads_with_the_verdict_and_the_hicache_effect(golden_run, tmp_path):
    run = golden_run("healthy")
    html = write_report(run, tmp_path / "reports").read_text()
    box = _effect(html)
    # on the first screen: before the verdict's details, the run metadata and every section
    assert html.index('id="hicache-effect"') < html.index('id="verdict"') < html.index('<section id="hicache"')
    s = json.loads((run / "on-r2" / "summary.json").read_text())
    off = json.loads((run / "off" / "summary.json").read_text())
    from harness.report.formatting import fmt_num

    speedup = s["workloads"]["parallel_prefixes"]["derived"]["second_pass_speedup"]
    off_speedup = off["workloads"]["parallel_prefixes"]["derived"]["second_pass_speedup"]
    assert f'<div class="big">{fmt_num(speedup)}×</div>' in box and f"(off: {fmt_num(off_speedup)}×)" in box
    host = s["workloads"]["repeat_prefill"]["phases"]["repeat_after_evict"]["metrics"]["ttft_ms"]["p50"]
    assert f'<div class="big">{fmt_num(host)} ms</div>' in box
    assert re.search(r'<div class="big">[0-9.]+ %</div><div class="sub">of prompt tokens from the host tier', box)
    assert f'<span class="verdict PASS">{s["quality"]["parity"]["verdict"]}</span>' in box
    assert '<span class="verdict big PASS">PASS</span> <b>HiCache effect</b> <span class="muted">of on-r2' in box
    assert "harness compare" in box  # no baseline yet: how to get one


def test_the_headline_box_says_what_would_test_a_change(golden_run, tmp_path):
    from harness.compare.comparison import MetricRow

    run = golden_run("healthy")

    def row(workload, phase, metric, change, state):
        return MetricRow(
            "on-r2",
            workload,
            phase,
            metric,
            "x",
            True,
            1.0,
            1.0 + change,
            1,
            1,
            change,
            0.05,
            "default",
            "none",
            None,
            state,
        ).to_dict()

    rows = [
        row("parallel_prefixes", "*", "second_pass_speedup", 0.031, "inconclusive"),
        row("repeat_prefill", "repeat_after_evict", "ttft_ms", 0.4, "regression"),
    ]
    comparison = json.loads((GOLDEN_EXPECTED / "healthy_vs_healthy.comparison.json").read_text())
    comparison.update(metrics=rows, verdict="INCONCLUSIVE")
    results.write_json_atomic(run / "comparison.json", comparison)
    box = _effect(write_report(run, tmp_path / "reports").read_text())
    assert '<div class="chg inconclusive">+3.1 % vs baseline · no test yet: more repeats' in box
    assert '<div class="chg regression">+40.0 % vs baseline · regression</div>' in box
    assert "harness compare" not in box


def test_without_a_hicache_variant_there_is_no_effect_box(golden_run, tmp_path):
    run = golden_run("healthy")
    m = json.loads((run / "manifest.json").read_text())
    m["variants"] = [v for v in m["variants"] if v["name"] == "off"]
    (run / "manifest.json").write_text(json.dumps(m))
    html = write_report(run, tmp_path / "reports").read_text()
    assert 'id="hicache-effect"' not in html


def test_the_banner_says_what_the_console_says(golden_run, tmp_path):
    """An INCONCLUSIVE comparison's one line on what would decide it is on the report's banner,
    word for word as comparison.json (and so the console, Markdown and JUnit) give it."""
    run = golden_run("regressed")
    comparison = json.loads((GOLDEN_EXPECTED / "regressed_vs_healthy.comparison.json").read_text())
    assert comparison["verdict"] == "INCONCLUSIVE"
    comparison["advice"] = "to decide, add: repeats: 7 (or repeats: auto) — on-r2 w.p.ttft_ms needs 7 requests a side"
    (run / "comparison.json").write_text(json.dumps(comparison))
    html = write_report(run, tmp_path / "reports").read_text()
    assert '<p id="comparison-advice"><b>to decide, add: repeats: 7 (or repeats: auto)' in html

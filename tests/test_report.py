"""The HTML report of the committed golden runs, rendered in headless Chromium, and its escaping.

The report reads run folders only, so these tests read the golden runs (`golden_run` in
conftest: tests/golden/runs/{healthy,regressed,merged,interrupted}, simulated runs with every
workload kind) instead of starting servers. The Chromium tests skip with a reason when no
chromium binary is installed (`.ci/run` installs Debian's `chromium`).
"""

from __future__ import annotations

import base64
import dataclasses
import io
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

import harness.workloads
from harness import results
from harness.report.header import header
from harness.report.html import SECTIONS, write_report
from harness.report.tables import hicache_table
from harness.report.view import RunView, load_view
from harness.workloads import kinds

GOLDEN_EXPECTED = Path(__file__).parent / "golden" / "expected"
XSS = "<script>alert(1)</script>"
XSS_ESCAPED = "&lt;script&gt;alert(1)&lt;/script&gt;"
CHROMIUM = next((shutil.which(b) for b in ("chromium", "chromium-browser", "google-chrome") if shutil.which(b)), None)
TRAILING_ROWS = ["quality parity"]  # after the workloads' rows; load-back needs a probe (golden runs have none)


@pytest.fixture
def healthy_report(golden_run, tmp_path) -> Path:
    return write_report(golden_run("healthy"), tmp_path / "reports")


def chromium(args: list[str], tmp: Path) -> subprocess.CompletedProcess:
    base = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            f"--user-data-dir={tmp / 'profile'}"]
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
    assert '<span class="verdict PASS">PASS</span>' in html
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
                c["task"], c["length_target"], c["index"], c["seed"], c["ask"]) and r["arm_role"] == "on":
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


def test_report_shows_a_comparison(golden_run, tmp_path):
    run = golden_run("healthy")
    shutil.copy(GOLDEN_EXPECTED / "healthy_vs_healthy.comparison.json", run / "comparison.json")
    html = write_report(run, tmp_path / "reports").read_text()
    assert "all compared metrics unchanged" in html and "No comparison yet" not in html


def test_regressed_run_fails_on_its_comparison(golden_run, tmp_path):
    run = golden_run("regressed")
    shutil.copy(GOLDEN_EXPECTED / "regressed_vs_healthy.comparison.json", run / "comparison.json")
    html = write_report(run, tmp_path / "reports").read_text()
    assert '<span class="verdict FAIL">FAIL</span>' in html
    assert "regression against the baseline run (see Comparison)" in html
    assert '<td class="fail">regression</td>' in html


def test_interrupted_run_reports_what_it_has(golden_run, tmp_path):
    html = write_report(golden_run("interrupted"), tmp_path / "reports").read_text()
    assert '<span class="verdict INTERRUPTED">INTERRUPTED</span>' in html
    assert "the run did not finish" in html
    # on-r2 stopped mid-workload: a failure in every HiCache cell, its samples until it stopped
    assert '<td class="fail">interrupted</td>' in html
    assert "samples until it stopped" in html


def test_merged_run_has_the_table_of_a_single_run(golden_run):
    healthy, merged = load_view(golden_run("healthy")), load_view(golden_run("merged"))
    labels = lambda view: [r.label for r in hicache_table(view)[0]]
    assert labels(merged) == labels(healthy)
    assert hicache_table(merged)[1] == "off"


def test_hicache_table_rows_are_the_declared_rows_of_each_workload(golden_run):
    run = golden_run("healthy")
    view = load_view(run)
    assert set(view.workload_kinds.values()) == {"cold_prefill", "repeat_prefill", "parallel_prefixes",
                                                  "short_ttft", "decode", "multi_turn"}
    assert not kinds()["multi_turn"].report_rows  # a kind that declares none adds none
    rows, base = hicache_table(view)
    assert base == "off"
    workload_rows = declared_labels(run)
    assert len(workload_rows) == sum(len(k.report_rows) for k in kinds().values()
                                     if k.name in view.workload_kinds.values())
    assert [r.label for r in rows] == workload_rows + TRAILING_ROWS
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
        view = RunView(Path("r"), {"host": host}, [], True, False, {}, None, None)
        return dict(header(view)["host"])

    assert host_rows({"hostname": "h", "mem_total_kib": None})["MemTotal"] == "not recorded"
    assert host_rows({})["MemTotal"] == "not recorded"
    assert host_rows({"mem_total_kib": 32 * 1024 * 1024})["MemTotal"] == "32.0 GiB"

"""The HTML report of a real simulator run, rendered in headless Chromium, and its escaping.

One simulator run (`harness run scenarios/sim_smoke.yaml`, ~20 s) is shared by the module.
The Chromium tests skip with a reason when no chromium binary is installed (`.ci/run` installs
Debian's `chromium`).
"""

from __future__ import annotations

import base64
import io
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from harness import results
from harness.report.html import SECTIONS, write_report

ROOT = Path(__file__).resolve().parents[1]
XSS = "<script>alert(1)</script>"
XSS_ESCAPED = "&lt;script&gt;alert(1)&lt;/script&gt;"
CHROMIUM = next((shutil.which(b) for b in ("chromium", "chromium-browser", "google-chrome") if shutil.which(b)), None)


@pytest.fixture(scope="session")
def sim_run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("sim_results")
    proc = subprocess.run([sys.executable, "-m", "harness", "run", "scenarios/sim_smoke.yaml",
                           "--results-dir", str(out), "--no-report"], cwd=ROOT, capture_output=True,
                          text=True, timeout=180)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (run,) = (out / "sim_smoke").iterdir()
    return run


@pytest.fixture(scope="session")
def sim_report(sim_run, tmp_path_factory) -> Path:
    return write_report(sim_run, tmp_path_factory.mktemp("reports"))


def chromium(args: list[str], tmp: Path) -> subprocess.CompletedProcess:
    base = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            f"--user-data-dir={tmp / 'profile'}"]
    return subprocess.run(base + args, capture_output=True, text=True, timeout=90)


def inline_pngs(html: str) -> list[bytes]:
    return [base64.b64decode(m) for m in re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', html)]


def non_blank(png: bytes) -> tuple[tuple[int, int], float]:
    from PIL import Image

    im = Image.open(io.BytesIO(png)).convert("L")
    hist = im.histogram()
    return im.size, 1 - hist[255] / (im.size[0] * im.size[1])  # share of pixels that are not white


def test_report_layout_and_sections(sim_run, sim_report):
    assert sim_report.name == "index.html"
    assert sim_report.parent.name == sim_run.name and sim_report.parent.parent.name == "sim_smoke"
    html = sim_report.read_text()
    for s in SECTIONS:
        assert f'<section id="{s}"' in html, s
    assert 'id="simulated-banner"' in html
    # self-contained: nothing fetched (links to summary.csv are navigation, not loads)
    assert not re.search(r'(src|href)="(https?:)?//', html)
    assert "<script" not in html.lower()
    assert "summary.csv" in html
    # the failed variants appear as failures, never as numbers
    assert "startup_failed: host_memory" in html and "startup_failed: assertion" in html
    assert "AssertionError: Unsupported layout: layer_first" in html
    pngs = inline_pngs(html)
    assert len(pngs) >= 8
    for png in pngs:
        (w, h), ink = non_blank(png)
        assert w > 300 and h > 150 and ink > 0.02


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install chromium)")
def test_report_renders_in_chromium(sim_report, tmp_path):
    url = sim_report.resolve().as_uri()
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


def _poisoned_copy(run: Path, tmp: Path) -> Path:
    """The sim run with outside text set to a script tag: a YAML string (description), a log
    line, a variant name (by hand: the scenario loader forbids '<' in names) and a model output."""
    dst = tmp / "sim_smoke" / run.name
    shutil.copytree(run, dst)
    m = json.loads((dst / "manifest.json").read_text())
    text = m["scenario"]["text"]
    m["scenario"]["text"] = re.sub(r"description: >-\n(  .*\n)+", f'description: "{XSS}"\n', text, count=1)
    old, new = "on-200gb", f"on{XSS}"
    for v in m["variants"]:
        if v["name"] == old:
            v["name"] = new
    (dst / "manifest.json").write_text(json.dumps(m))
    (dst / old).rename(dst / results.safe_name(new))
    st_path = dst / results.safe_name(new) / "status.json"
    st = json.loads(st_path.read_text())
    st["log_excerpt"]["lines"].append(f"ValueError: {XSS}")
    st_path.write_text(json.dumps(st))
    parity_path = dst / "on-r2" / "parity.json"
    parity = json.loads(parity_path.read_text())
    c = parity["comparisons"][0]
    c.update(kind="divergence", token_equal=False, first_divergence=1)
    parity_path.write_text(json.dumps(parity))
    q_path = dst / "on-r2" / "quality.jsonl"
    rows = [json.loads(line) for line in q_path.read_text().splitlines()]
    for r in rows:
        if (r["task"], r["length_target"], r["index"], r["seed"], r["ask"]) == (
                c["task"], c["length_target"], c["index"], c["seed"], c["ask"]) and r["arm_role"] == "on":
            r["text"] = f"the answer is {XSS}"
    q_path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return dst


def test_outside_text_is_escaped(sim_run, tmp_path):
    run = _poisoned_copy(sim_run, tmp_path / "results")
    html = write_report(run, tmp_path / "reports").read_text()
    assert "<script" not in html.lower()
    assert f'id="description">{XSS_ESCAPED}' in html  # the YAML string
    assert f"ValueError: {XSS_ESCAPED}" in html  # the log line
    assert f"<td>on{XSS_ESCAPED}</td>" in html  # the variant name
    assert f"the answer is {XSS_ESCAPED}" in html  # the model output
    if CHROMIUM is not None:
        dom = chromium(["--dump-dom", (tmp_path / "reports").resolve().as_uri() + f"/sim_smoke/{run.name}/index.html"],
                       tmp_path)
        assert "<script" not in dom.stdout.lower() and "alert(1)" in dom.stdout


def test_report_cli_bad_input(tmp_path, capsys):
    from argparse import Namespace

    from harness.report.html import cli_main

    assert cli_main(Namespace(run=str(tmp_path / "missing"), reports_dir=str(tmp_path))) == 2
    assert "missing" in capsys.readouterr().err


def test_report_shows_a_comparison(sim_run, tmp_path):
    from argparse import Namespace

    from harness import compare

    dst = tmp_path / "sim_smoke" / sim_run.name
    shutil.copytree(sim_run, dst)
    assert compare.cli_main(Namespace(run=str(dst), baseline=str(dst), results_dir=str(tmp_path),
                                      junit=None, markdown=None)) == 0
    html = write_report(dst, tmp_path / "reports").read_text()
    assert "all compared metrics unchanged" in html and "No comparison yet" not in html


def test_header_never_shows_a_missing_memtotal_as_zero():
    from harness.report import data as D

    def host_rows(host: dict) -> dict:
        view = D.RunView(Path("r"), {"host": host}, [], True, False, {}, "", None, None)
        return dict(D.header(view)["host"])

    assert host_rows({"hostname": "h", "mem_total_kib": None})["MemTotal"] == "not recorded"
    assert host_rows({})["MemTotal"] == "not recorded"
    assert host_rows({"mem_total_kib": 32 * 1024 * 1024})["MemTotal"] == "32.0 GiB"

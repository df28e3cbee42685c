"""A soak run on the simulator, end to end: a leaking server LEAKs (exit 1), a healthy one is
STABLE, and a soak too short to judge is INCONCLUSIVE (exit 4); the console and verdict.json say
which series, with its slope and interval."""

from __future__ import annotations

import base64
import io
import json
import re
from pathlib import Path

from harness.cli import main
from tests.conftest import write_scenario

SCENARIO = """\
name: soaks
server:
  backend: sim
  model_path: models/llama-tiny
  args: {--max-total-tokens: 4096, --enable-metrics: true}
  startup_timeout_s: 30
  request_timeout_s: 10
  liveness_idle_s: 0.1
  sim: {time_scale: 0.02, startup_s: 0}
variants:
{variants}
workloads:
  - kind: soak
    duration_s: {duration}
    slice_s: 0.75
    settle_slices: 1
    series: [server_rss]            # the host pool fills with never-seen prompts all along: growth by design
    tolerance_per_h: {server_rss_mib: 8192}
    mix:
      - {kind: cold_prefill, n: 2, prompt_tokens: 256, warmup: 0}
      - {kind: decode, batch: 2, prompt_tokens: 64, output_tokens: 4}
sampling: {enabled: true, interval_s: 0.1, idle_window_s: 0.2, gpu: false, cooldown_timeout_s: 2}
"""
HEALTHY = "  - name: healthy\n    hicache: {ratio: 2}"
LEAKING = "  - name: leaking\n    hicache: {ratio: 2}\n    sim_faults: [leak_per_request=8192]"


def _run(tmp_path: Path, variants: str, duration: float, capsys) -> tuple[int, str, dict, dict, Path]:
    text = SCENARIO.replace("{variants}", variants).replace("{duration}", str(duration))
    scenario = write_scenario(tmp_path, text)
    rc = main(["run", str(scenario), "--results-dir", str(tmp_path / "r"), "--no-report"])
    out = capsys.readouterr().out
    (run,) = (tmp_path / "r" / "soaks").iterdir()
    series = {
        v.name: json.loads((v / "summary.json").read_text())["workloads"]["soak"]["from_samples"]["series"]
        for v in run.iterdir()
        if (v / "summary.json").exists()
    }
    return rc, out, json.loads((run / "verdict.json").read_text()), series, run


def test_a_leaking_server_leaks_and_fails_the_run_while_a_healthy_one_is_stable(tmp_path, capsys):
    rc, out, verdict, series, run = _run(tmp_path, HEALTHY + "\n" + LEAKING, 6, capsys)
    assert rc == 1 and verdict["outcome"] == "FAIL"
    by_name = {v["variant"]: v for v in verdict["variants"]}
    assert by_name["healthy"]["outcome"] == "PASS"
    assert series["healthy"]["server_rss"]["verdict"] == "STABLE"
    leak = series["leaking"]["server_rss"]
    assert leak["verdict"] == "LEAK" and leak["lo_per_h"] > 8192 and leak["n_points"] >= 6
    (reason,) = by_name["leaking"]["reasons"]
    assert reason["code"] == "soak_leak" and "server_rss LEAK" in reason["text"] and "MiB/h" in reason["text"]
    assert "verdict: FAIL (exit 1)" in out and "server_rss LEAK" in out
    assert set(series["healthy"]) == {"server_rss"}  # only the series asked for

    # the report: a table row and a plot per series, the verdict on each
    assert main(["report", str(run), "--reports-dir", str(tmp_path / "reports")]) == 0
    (page,) = (tmp_path / "reports").rglob("index.html")
    html = page.read_text()
    section = html[html.index('<section id="slopes">') : html.index('<section id="timeseries">')]
    rows = re.findall(r"<h3>(\S+) · soak.*?</table>", section, re.S)
    assert rows == ["healthy", "leaking"]
    assert "<b>STABLE</b>" in section.split("leaking · soak")[0] and "<b>LEAK</b>" in section.split("leaking · soak")[1]
    from PIL import Image

    for variant in ("healthy", "leaking"):
        (png,) = re.findall(rf'alt="soak server_rss of {variant}" src="data:image/png;base64,([^"]+)"', section)
        im = Image.open(io.BytesIO(base64.b64decode(png))).convert("L")
        assert im.size[0] > 300 and sum(im.histogram()[:200]) > 500  # points and a line drawn


def test_a_soak_too_short_to_judge_is_inconclusive(tmp_path, capsys):
    rc, out, verdict, series, _ = _run(tmp_path, HEALTHY, 1.5, capsys)  # 2 slices, 1 after settling
    assert rc == 4 and verdict["outcome"] == "INCONCLUSIVE"
    assert series["healthy"]["server_rss"]["verdict"] == "INCONCLUSIVE"
    assert "too short a soak" in out and "verdict: INCONCLUSIVE (exit 4)" in out

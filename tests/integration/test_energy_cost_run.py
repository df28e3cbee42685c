"""Energy per token and cost per million tokens on the simulator, end to end: its simulated energy
counter gives joules per phase (labelled simulated), and with prices the cheapest variant that met
the SLO is named on the console, in cost.json and in the report's headline."""

from __future__ import annotations

import json

import pytest

from harness.cli import main
from harness.report.formatting import fmt_num
from tests.conftest import write_scenario

SCENARIO = """\
name: priced
server:
  backend: sim
  model_path: models/llama-tiny
  args: {--max-total-tokens: 4096, --enable-metrics: true}
  startup_timeout_s: 30
  request_timeout_s: 10
  liveness_idle_s: 0.1
  sim: {time_scale: 0.02, startup_s: 0}
variants:
  - name: off
  - name: on-r2
    hicache: {ratio: 2}
workloads:
  - kind: cold_prefill
    n: 3
    prompt_tokens: 256
    warmup: 0
  - kind: open_loop
    arrivals: constant
    rate: [5]
    duration_s: 2
    warmup_s: 0
    cooldown_s: 0
    prompt_tokens: 64
    output_tokens: 8
    slo: {ttft_ms: 2000}
sampling: {enabled: true, interval_s: 0.1, idle_window_s: 0.2, gpu: false, cooldown_timeout_s: 2}
cost: {gpu_hour_usd: 3.5, host_ram_gb_hour_usd: 1.0, storage_tb_month_usd: 20}
"""


def test_simulated_energy_per_token_and_the_cheapest_variant_meeting_the_slo(tmp_path, capsys):
    scenario = write_scenario(tmp_path, SCENARIO)
    rc = main(["run", str(scenario), "--results-dir", str(tmp_path / "r"), "--reports-dir", str(tmp_path / "rep")])
    out = capsys.readouterr().out
    assert rc == 0, out[-3000:]
    (run,) = (tmp_path / "r" / "priced").iterdir()
    for v in ("off", "on-r2"):
        energy = json.loads((run / v / "summary.json").read_text())["energy"]
        assert energy["source"] == "simulated"
        cold = energy["phases"]["cold_prefill/cold"]
        assert cold["joules"] > 0 and cold["computed_prompt_tokens"] == 3 * 256
        assert cold["j_per_prompt_token"] == pytest.approx(cold["joules"] / (3 * 256), rel=1e-3)  # prefill: 1 token out
        assert energy["total"]["j_per_token"] > 0
    cost = json.loads((run / "cost.json").read_text())
    off, on = cost["variants"]["off"], cost["variants"]["on-r2"]
    assert off["meets_slo"] and on["meets_slo"] and off["slo_workload"] == "open_loop"
    assert off["host_usd_per_hour"] == 0 and on["host_usd_per_hour"] > 0  # the host pool is priced
    assert off["usd_per_mtok"] == pytest.approx(off["usd_per_hour"] / (off["goodput_tok_s"] * 3600 / 1e6))
    cheapest = min(cost["variants"], key=lambda v: cost["variants"][v]["usd_per_mtok"])
    assert cost["cheapest"] == cheapest and cheapest in cost["text"]
    assert "$/Mtok" in out and "J/tok" in out and f"cheapest meeting the SLO: {cheapest}" in out
    assert "energy: SIMULATED" in out
    (page,) = (tmp_path / "rep").rglob("index.html")
    html = page.read_text()
    head = html[: html.index('<section id="hicache">')]
    assert f"cheapest meeting the SLO: {cheapest}" in head and "simulated" in head.lower()
    assert "no prices given" not in head

    # without prices the box says what GPU time alone says, and the one line of what to add
    (run / "cost.json").unlink()
    assert main(["report", str(run), "--reports-dir", str(tmp_path / "unpriced")]) == 0
    (page,) = (tmp_path / "unpriced").rglob("index.html")
    html = page.read_text()
    box = html[html.index('id="cost-headline"') : html.index("</div>", html.index('id="cost-headline"'))]
    work = {
        v: json.loads((run / v / "status.json").read_text())["timing"]["gpu_minutes"]["work"] for v in ("off", "on-r2")
    }
    ratio = work["on-r2"] / work["off"]
    assert f"no prices given: GPU time for the same workloads against off: on-r2 {ratio:.2f}×" in box
    assert "add `cost: {gpu_hour_usd: …}` to the scenario" in box
    assert "<th>$/h</th>" not in box and "<th>GPU-h/Mtok</th>" in box and "<th>work GPU-s</th>" in box
    gpu_h = 1 / (off["goodput_tok_s"] * 3600 / 1e6)  # one GPU, at the SLO goodput cost.json had
    assert f"<td>{fmt_num(gpu_h)}</td>" in box, box

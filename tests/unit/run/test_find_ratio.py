"""--find-ratio: the points it plans from the boundary (each limit and a step above, with the
expectation each must meet), the judgement of each side from status.json and the samples, and on
the simulator's simulated host both cliffs confirmed, and a wrong prediction caught (exit 1)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.cli import main
from harness.report.ratio_view import find_ratio_context
from harness.run import find_ratio as fr
from harness.scenario import load_scenario

MODEL = Path(__file__).resolve().parents[3] / "scenarios" / "models" / "llama-tiny"
GIB_KIB = 1024**2


def _scenario(tmp_path, host="{mem_total_gib: 32, page_cache_gib: 6, swap_gib: 8, reserve_gib: 2}", preflight=""):
    p = tmp_path / "find.yaml"
    p.write_text(
        f"""
name: find
server:
  backend: sim
  model_path: {MODEL}
  args: {{--max-total-tokens: 8192, --skip-tokenizer-init: true, --enable-metrics: true}}
  startup_timeout_s: 60
  startup_retries: 0
  sim: {{time_scale: 0.02, mem_available_gib: 16, startup_s: 0.05, host: {host}}}
sampling: {{interval_s: 0.1, idle_window_s: 0.5, cooldown_mem_tolerance_gib: 0.1, cooldown_timeout_s: 5}}
preflight: {{boundary_step: 1{preflight}}}
variants:
  - name: off
  - name: on
    hicache: {{size_gb: 4, mem_layout: page_first}}
workloads:
  - kind: cold_prefill
    n: 1
    prompt_tokens: 500
"""
    )
    return p


def test_plan_runs_each_limit_and_a_step_above(tmp_path):
    scenario = load_scenario(_scenario(tmp_path))
    plan = fr.plan(scenario)  # the first HiCache variant
    got = [(p.name, p.value, p.expect) for p in plan.points]
    # free 10 GiB before the page cache (16 - 6): 10 GB keeps it, 11 GB does not;
    # (16 GiB - 2 GiB reserve) = 15.03 GB: 15 starts, 16 is refused
    assert got == [
        ("on-gb10", 10, fr.KEEPS),
        ("on-gb11", 11, fr.LOSES),
        ("on-gb15", 15, fr.STARTS),
        ("on-gb16", 16, fr.REFUSED),
    ]
    run = fr.prepare(scenario, plan)
    assert run.name == "find-find-ratio" and run.gate == [] and not run.quality.enabled
    vs = {v.name: v for v in run.expand_variants()}
    assert vs["on-gb16"].expect == "startup_failed" and vs["on-gb16"].expect_cause == "host_memory"
    assert vs["on-gb11"].expect == "ok" and vs["on-gb11"].hicache.size_gb == 11
    assert scenario.name == "find" and [v.name for v in scenario.expand_variants()] == ["off", "on"]


def test_a_container_limit_expects_an_oom_kill(tmp_path):
    host = "{mem_total_gib: 32, page_cache_gib: 1, swap_gib: 8, reserve_gib: 2, cgroup_limit_gib: 8}"
    scenario = load_scenario(_scenario(tmp_path, host=host))
    plan = fr.plan(scenario, ["on"])
    assert plan.boundary["starts"]["binding"] == "cgroup"
    run = fr.prepare(scenario, plan)
    refused = [v for v in run.expand_variants() if v.expect == "startup_failed"]
    assert [v.expect_cause for v in refused] == ["out_of_memory"]


def _sample(phase, cached_gib, pswpin=0.0, swap_free_gib=8.0):
    return {
        "phase": phase,
        "cached_kib": int(cached_gib * GIB_KIB),
        "pswpin_kib_s": pswpin,
        "swap_total_kib": 8 * GIB_KIB,
        "swap_free_kib": int(swap_free_gib * GIB_KIB),
    }


def test_page_cache_figures_see_loss_swap_in_and_swap_use_past_noise():
    tol = int(0.1 * GIB_KIB)
    kept = [_sample("startup", 6), _sample("idle", 5.95), _sample("cold/cold", 6)]
    assert fr.page_cache_figures(kept, tol)["lost"] is False
    assert fr.page_cache_figures([_sample("startup", 6), _sample("idle", 5.5)], tol)["lost"] is True
    assert fr.page_cache_figures([_sample("startup", 6), _sample("idle", 6, pswpin=12.0)], tol)["lost"] is True
    assert fr.page_cache_figures([_sample("startup", 6), _sample("idle", 6, swap_free_gib=7)], tol)["lost"] is True
    # the pool arriving during startup is not judged: only samples once the server was ready
    assert (
        fr.page_cache_figures([_sample("startup", 6), _sample("startup", 1), _sample("idle", 6)], tol)["lost"] is False
    )


def _fake_run(tmp_path, plan, states: dict, samples: dict):
    run = tmp_path / "run"
    for p in plan.points:
        d = run / p.name
        d.mkdir(parents=True)
        state, cause = states[p.name]
        (d / "status.json").write_text(json.dumps({"state": state, "cause": cause}))
        (d / "samples.jsonl").write_text("".join(json.dumps(s) + "\n" for s in samples.get(p.name, [])))
    return run


def test_judge_confirms_both_cliffs_and_catches_a_contradiction(tmp_path):
    scenario = load_scenario(_scenario(tmp_path))
    plan = fr.plan(scenario)
    ok = [_sample("startup", 6), _sample("idle", 6)]
    lost = [_sample("startup", 6), _sample("idle", 5)]
    states = {
        "on-gb10": ("ok", None),
        "on-gb11": ("ok", None),
        "on-gb15": ("ok", None),
        "on-gb16": ("startup_failed", "host_memory"),
    }  # noqa: E501
    run = _fake_run(tmp_path, plan, states, {"on-gb10": ok, "on-gb11": lost, "on-gb15": lost})
    res = fr.judge(run, plan, 0.1)
    assert res["confirmed"] and res["start_cliff"] == "between size_gb 15 and 16"
    assert res["page_cache_cliff"] == "between size_gb 10 and 11"
    assert json.loads((run / fr.RESULT_FILE).read_text())["confirmed"] is True
    shown = find_ratio_context(run)  # what the report's memory section shows of it
    assert shown["confirmed"] and shown["start_cliff"] == "between size_gb 15 and 16"
    assert [(p["name"], p["expect"], p["agrees"]) for p in shown["points"]][-1] == ("on-gb16", "refused", True)
    assert find_ratio_context(tmp_path / "nowhere") is None  # not a find-ratio run: no block

    states["on-gb16"] = ("ok", None)  # the step above the start limit started after all
    run2 = tmp_path / "second"
    run2.mkdir()
    res = fr.judge(
        _fake_run(run2, plan, states, {"on-gb10": ok, "on-gb11": ok, "on-gb15": ok, "on-gb16": ok}), plan, 0.1
    )
    assert not res["confirmed"] and res["start_cliff"] is None and res["page_cache_cliff"] is None
    bad = [r["name"] for r in res["points"] if not r["agrees"]]
    assert bad == ["on-gb11", "on-gb16"]
    assert "CONTRADICTED" in fr.result_lines(res)[-1]

    states["on-gb16"] = ("startup_failed", "cuda_fault")  # failed, but not for want of memory
    run3 = tmp_path / "third"
    run3.mkdir()
    res = fr.judge(_fake_run(run3, plan, states, {"on-gb10": ok, "on-gb11": lost, "on-gb15": ok}), plan, 0.1)
    assert [r["name"] for r in res["points"] if not r["agrees"]] == ["on-gb16"]


@pytest.mark.slow
def test_on_the_simulated_host_both_cliffs_hold_and_a_wrong_prediction_fails(tmp_path, capsys):
    results = tmp_path / "results"
    base = ["run", "--find-ratio", "--no-report", "--results-dir", str(results)]
    assert (
        main(
            [*base[:2], "--results-dir", str(results), "--reports-dir", str(tmp_path / "rep"), str(_scenario(tmp_path))]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "start cliff is between size_gb 15 and 16" in out and "page-cache cliff is between size_gb 10 and 11" in out
    (page,) = (tmp_path / "rep").rglob("index.html")  # the report shows ratio_boundary.json: judged before it is drawn
    memory = page.read_text().split('<section id="memory">')[1].split("</section>")[0]
    assert "confirmed on both sides" in memory and "the start cliff is between size_gb 15 and 16" in memory
    assert "the page-cache cliff is between size_gb 10 and 11" in memory and "on-gb16" in memory
    # the prediction assumes sglang's 10 GiB reserve; the simulated build reserves 2: the "refused" point starts
    wrong = tmp_path / "wrong"
    wrong.mkdir()
    assert main([*base, str(_scenario(wrong, preflight=", reserve_gib: 10"))]) == 1
    assert "CONTRADICTED" in capsys.readouterr().out

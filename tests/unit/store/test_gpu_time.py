"""GPU-minutes: the clock's buckets add up to the wall time, a run's status files carry them, the
dry run estimates them, the console and history show them (harness.store.gpu_time)."""

from __future__ import annotations

import pytest

from harness.compare import history
from harness.run.estimate import estimate_run
from harness.scenario import load_scenario
from harness.store import gpu_time, results
from tests.conftest import REPO, run_in_process, tiny_scenario, write_scenario


class FakeClock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_clock_charges_each_stretch_to_the_bucket_that_was_current():
    t = FakeClock()
    c = gpu_time.PhaseClock(2, clock=t)
    t.t += 1.0  # idle (preflight)
    c.enter(gpu_time.STARTUP)
    t.t += 80.0
    c.enter(gpu_time.WORK)
    t.t += 60.0
    c.enter(gpu_time.QUALITY)
    t.t += 30.0
    c.enter(gpu_time.COOLDOWN)
    t.t += 9.0
    c.stop()
    t.t += 1000.0  # after the stop nothing is charged
    c.enter(gpu_time.WORK)
    j = c.to_json()
    assert j["seconds"] == {"startup": 80.0, "work": 60.0, "quality": 30.0, "cooldown": 9.0, "idle": 1.0}
    assert j["wall_s"] == 180.0 == c.wall_s()
    assert j["gpus"] == 2
    assert j["gpu_minutes"]["startup"] == pytest.approx(80 * 2 / 60, abs=1e-4)
    assert j["gpu_minutes_total"] == pytest.approx(6.0)


def test_clock_refuses_an_unknown_bucket_and_reads_an_open_stretch():
    t = FakeClock()
    c = gpu_time.PhaseClock(1, clock=t)
    with pytest.raises(ValueError):
        c.enter("lunch")
    c.enter(gpu_time.WORK)
    t.t += 5.0
    assert c.to_json()["seconds"]["work"] == 5.0  # still running: the open stretch counts


def test_variant_gpus_from_its_gpu_set_else_its_tp_size():
    class V:
        tp_size = 4

    assert gpu_time.variant_gpus(V()) == 4
    assert gpu_time.variant_gpus(V(), ["2", "3"]) == 2


def test_run_gpu_time_adds_variants_and_says_what_share_was_measured():
    a = {"timing": gpu_time.timing_json({"startup": 60, "work": 30, "quality": 30}, 1)}
    b = {"timing": gpu_time.timing_json({"startup": 120, "work": 60}, 2)}
    out = gpu_time.run_gpu_time({"a": a["timing"], "b": b["timing"], "c": None}, run_wall_s=300)
    assert out["gpu_minutes"]["startup"] == pytest.approx(1 + 4)
    assert out["gpu_minutes"]["work"] == pytest.approx(0.5 + 2)
    assert out["gpu_minutes_total"] == pytest.approx(1 + 0.5 + 0.5 + 4 + 2)
    assert out["measured_fraction"] == pytest.approx(3.0 / 8.0)
    assert out["variants"]["c"] is None
    lines = gpu_time.table_lines(out)
    assert lines[0].startswith("GPU-minutes")
    assert any(line.startswith("total") and line.rstrip().endswith("8.00") for line in lines)
    assert "38 % of them measured" in lines[-1] and "5.0 min" in lines[-1]


def test_a_run_records_each_variants_gpu_time(tmp_path, capsys):
    path = write_scenario(tmp_path, tiny_scenario(n_on=1, quality=True))
    outcome, run = run_in_process(path, tmp_path)
    assert outcome.exit_code == 0
    for v in run.variants:
        t = v.status.timing
        assert t["gpus"] == 1
        assert sum(t["seconds"].values()) == pytest.approx(t["wall_s"], abs=0.01)
        assert t["seconds"]["startup"] > 0 and t["seconds"]["work"] > 0 and t["seconds"]["quality"] > 0
        assert t["seconds"]["cooldown"] > 0  # the stop is in it
        waits = t["waits_s"]  # the harness's own waits, named inside their buckets
        assert set(waits) >= {"idle_window", "final_liveness", "stop", "cooldown_wait"}
        assert waits["stop"] + waits["cooldown_wait"] == pytest.approx(t["seconds"]["cooldown"], abs=0.01)
        assert waits.get("quality_churn", 0.0) < t["seconds"]["quality"]
    # the OFF baseline has no lower tier: its re-asks follow a /flush_cache, not churn (nothing sent);
    # ON still churns its samples out of the GPU pool into the host pool
    reasks = {v.name: [q for q in results.read_jsonl(v.paths.quality) if q["ask"] > 0] for v in run.variants}
    assert reasks["off"] and all(q["churn"]["flushed"] is True and q["churn"]["requests"] == 0 for q in reasks["off"])
    assert reasks["off"][0]["cached_tokens"] == 0  # a cold prefill, as after churn
    assert all(not q["churn"].get("flushed") and q["churn"]["accepted"] > 0 for q in reasks["on-r2"])
    assert run.variants[0].status.timing["waits_s"].get("quality_churn", 0.0) == 0.0
    total = gpu_time.run_folder_gpu_time(run.paths)
    assert set(total["variants"]) == {"off", "on-r2"}
    assert total["wall_s"] is not None
    err = capsys.readouterr().err
    assert "GPU-minutes by where they went" in err and "of them the harness's own waits: idle_window" in err
    assert total["waits_gpu_minutes"]["final_liveness"] > 0
    # history shows them over nights, lower is better
    values = gpu_time.history_values(run.variants[0].status.timing)
    assert values["gpu_time.gpu_minutes_total"] == run.variants[0].status.timing["gpu_minutes_total"]
    assert history.metric_direction("gpu_time.startup_gpu_minutes") == (False, "GPU-min")
    h = history.collect(tmp_path / "results", "tiny")
    assert "gpu_time.work_gpu_minutes" in h.series


def test_dry_run_estimates_gpu_minutes_per_bucket(monkeypatch):
    monkeypatch.setenv("MODEL_PATH", "/nonexistent")
    est = estimate_run(load_scenario(REPO / "scenarios" / "wsl_tp2.yaml"))
    v = est.variants[0]
    secs = v.bucket_seconds()
    assert secs["startup"] == est.startup_s and secs["work"] > 0 and secs["quality"] > 0
    assert v.gpus == 2  # tp_size 2
    assert sum(v.gpu_minutes.values()) == pytest.approx(v.expected_seconds * 2 / 60)
    text = "\n".join(est.to_lines())
    assert "GPU-min" in text and "expected GPU-minutes: startup" in text
    assert est.to_dict()["gpu_minutes"]["work"] == pytest.approx(sum(x.gpu_minutes["work"] for x in est.variants))

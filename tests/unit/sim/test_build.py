"""The simulated build: the slow_host_load fault (host-tier load-back N times slower) and
$HARNESS_SIM_BUILD, the --sim-* flags that stand for the code under test (not the scenario's
configuration), which benchmarks/verdict_power.py uses for its degraded nights."""

import re

import httpx

from harness.sim.args import SOURCE_ENV
from harness.sim.cli import BUILD_ENV, build_flags, source_build_flags
from harness.sim.testing import SimProcess, generate, run_sim

POOL = 2048


def prompt(n, seed):
    return [(seed * 7919 + i * 31) % 30000 + 300 for i in range(n)]


def counter(text: str, name: str) -> float:
    return sum(float(m.group(1)) for m in re.finditer(rf"^{re.escape(name)}(?:{{[^}}]*}})? (\S+)$", text, re.MULTILINE))


def load_back_seconds_per_byte(extra=()) -> float:
    """Modelled load-back seconds per byte of one host hit (an 800-token prompt pushed to the host
    tier by two others, then asked again), from the simulator's own /metrics."""
    with SimProcess(
        [
            "--enable-hierarchical-cache",
            "--max-total-tokens",
            str(POOL),
            "--sim-mem-available-gib",
            "64",
            "--enable-metrics",
            *extra,
        ]
    ) as sim:
        p = prompt(800, 7)
        generate(sim.url, p, 1)
        for k in range(2):
            generate(sim.url, prompt(800, 100 + k), 1)
        hit = generate(sim.url, p, 1)
        assert hit["meta_info"]["cached_tokens_details"]["host"] > 0
        m = httpx.get(sim.url + "/metrics", timeout=10).text
    return counter(m, "sglang:load_back_duration_seconds_sum") / counter(m, "sglang:load_back_bytes_total")


def test_slow_host_load_makes_the_load_back_n_times_slower():
    healthy = load_back_seconds_per_byte()
    assert healthy > 0
    assert load_back_seconds_per_byte(["--sim-fault", "slow_host_load=2"]) == healthy * 2


def test_the_build_variable_adds_sim_flags_after_the_command_line(monkeypatch):
    assert build_flags({}) == []
    monkeypatch.setenv(BUILD_ENV, "--sim-time-scale 0.03 --sim-fault slow_host_load=3")
    with SimProcess([]) as sim:  # the command line says --sim-time-scale 0.02
        info = httpx.get(sim.url + "/get_server_info", timeout=10).json()["sim"]
    assert info["time_scale"] == 0.03 and {"name": "slow_host_load", "arg": 3} in info["faults"]


def test_the_build_variable_takes_only_sim_flags(monkeypatch):
    monkeypatch.setenv(BUILD_ENV, "--sim-time-scale 2 --max-total-tokens 10")
    p = run_sim([])
    assert p.returncode == 2 and f"{BUILD_ENV} may hold only --sim-* flags, got --max-total-tokens" in p.stdout


def test_a_source_checkout_declares_its_simulated_build(tmp_path, monkeypatch):
    """A sim build's ``sglang_source`` is the code under test: the flags its sglang/__init__.py
    assigns to HARNESS_SIM_BUILD (read, never imported) reach the server, before the variable's."""
    pkg = tmp_path / "python"
    (pkg / "sglang").mkdir(parents=True)
    init = pkg / "sglang" / "__init__.py"
    assert source_build_flags({SOURCE_ENV: str(pkg)}) == []  # no file: nothing
    init.write_text('raise SystemExit("never imported")\nHARNESS_SIM_BUILD = "--sim-fault slow_prefill=3"\n')
    assert source_build_flags({}) == []  # not a sim build's source: nothing read
    assert source_build_flags({SOURCE_ENV: str(pkg)}) == ["--sim-fault", "slow_prefill=3"]
    monkeypatch.setenv(SOURCE_ENV, str(pkg))
    monkeypatch.setenv(BUILD_ENV, "--sim-fault slow_decode=2")
    with SimProcess([]) as sim:
        faults = httpx.get(sim.url + "/get_server_info", timeout=10).json()["sim"]["faults"]
    assert {"name": "slow_prefill", "arg": 3} in faults and {"name": "slow_decode", "arg": 2} in faults
    init.write_text('HARNESS_SIM_BUILD = "--max-total-tokens 10"\n')
    p = run_sim([])
    assert p.returncode == 2 and "may hold only --sim-* flags" in p.stdout

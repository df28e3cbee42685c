"""Start-up behaviour of the simulated server: flags, host-memory rule, layer_first assertion."""

from pathlib import Path

import pytest

from harness.sim.cli import parse_args
from harness.sim.faults import Fault
from harness.sim.hostmem import HostBudget, HostMemoryError, not_enough_message
from harness.sim.testing import SimProcess, run_sim

GIB = 1024**3


def test_unknown_flag_is_argparse_error_exit_2():
    p = run_sim(["--no-such-flag", "1"])
    assert p.returncode == 2
    assert "unrecognized arguments: --no-such-flag" in p.stdout


def test_bad_choice_and_bad_fault_exit_2():
    assert run_sim(["--hicache-mem-layout", "diagonal"]).returncode == 2
    p = run_sim(["--sim-fault", "explode"])
    assert p.returncode == 2 and "unknown fault" in p.stdout


def test_misspelt_fault_exits_2_with_did_you_mean():
    p = run_sim(["--sim-fault", "crash_at_reqest=3"])
    assert p.returncode == 2
    assert "unknown fault 'crash_at_reqest', did you mean 'crash_at_request'?" in p.stdout


def test_flag_aliases_and_faults_parse():
    a = parse_args(
        [
            "--model-path",
            "m",
            "--tp",
            "2",
            "--enable-hicache",
            "--sim-fault",
            "crash_at_request=3",
            "--sim-fault",
            "ignore_sigterm",
        ]
    )
    assert a.tp_size == 2 and a.enable_hierarchical_cache
    assert a.faults == {Fault.crash_at_request: 3, Fault.ignore_sigterm: None}
    with pytest.raises(SystemExit):
        parse_args(["--model-path", "m", "--sim-fault", "crash_at_request"])  # needs =N


def test_a_fault_given_twice_keeps_the_first():
    a = parse_args(["--model-path", "m", "--sim-fault", "crash_at_request=3", "--sim-fault", "crash_at_request=5"])
    assert a.faults == {Fault.crash_at_request: 3}


def test_refusal_text_is_sglangs():
    msg = not_enough_message(2_550_000_000, 590_000_000)
    assert msg == (
        "Not enough host memory available. Requesting 2.55 GB but only have 0.59 GB free. "
        "Please reduce the size of the hierarchical cache."
    )
    b = HostBudget(mem_available_bytes=12 * GIB, ranks=2)
    with pytest.raises(HostMemoryError):
        b.claim(2 * GIB)  # (12 - 10) / 2 = 1 GiB per rank
    b.claim(GIB // 2)
    assert b.available_per_rank() == GIB - GIB // 2


def test_host_memory_refusal_traceback_then_sigkill_like_real_sglang():
    p = run_sim(["--enable-hierarchical-cache", "--hicache-ratio", "2", "--sim-mem-available-gib", "10.5"])
    assert p.returncode == -9, p.stdout  # killed by its own kill_process_tree, like 0.5.17
    assert "ValueError: Not enough host memory available. Requesting 0.67 GB but only have" in p.stdout
    assert "Please reduce the size of the hierarchical cache." in p.stdout
    assert "fired up" not in p.stdout


def test_seed_000_kv_succeeds_then_mamba_fails():
    # 27B hybrid, TP2, int2 KV, ratio 2 of 210000 device tokens = 420001 host tokens (2.58 GB);
    # MemAvailable chosen so 0.59 GB per rank is left for the 2.55 GB mamba pool.
    avail = 2 * (2_580_486_144 + 590_000_000) + 10 * GIB
    p = run_sim(
        [
            "--tp-size",
            "2",
            "--kv-cache-dtype",
            "int2",
            "--max-total-tokens",
            "210000",
            "--enable-hierarchical-cache",
            "--hicache-ratio",
            "2",
            "--max-mamba-cache-size",
            "32",
            "--sim-mem-available-gib",
            repr(avail / GIB),
        ],
        model="hybrid-gdn-27b",
    )
    assert p.returncode == -9, p.stdout
    assert "Allocating kv hierarchical KV host pool: 420001 tokens, 2.58 GB host memory." in p.stdout
    assert "Requesting 2.55 GB but only have 0.59 GB free." in p.stdout
    assert p.stdout.index("420001 tokens") < p.stdout.index("Not enough host memory")


def test_layer_first_with_mamba_model_asserts():
    p = run_sim(
        ["--enable-hierarchical-cache", "--hicache-mem-layout", "layer_first", "--sim-mem-available-gib", "64"],
        model="qwen3next-tiny",
    )
    assert p.returncode == -9
    assert "AssertionError: Unsupported layout: layer_first" in p.stdout
    assert "fired up" not in p.stdout


def test_layer_first_with_dense_model_starts():
    with SimProcess(
        ["--enable-hierarchical-cache", "--hicache-mem-layout", "layer_first", "--sim-mem-available-gib", "64"]
    ) as sim:
        assert "The server is fired up and ready to roll!" in sim.output()


def test_missing_model_config_fails_cleanly(tmp_path):
    p = run_sim(["--model-path", str(tmp_path)])
    assert p.returncode == 1 and "no such file" in p.stdout


def test_sim_process_removes_its_log_file_and_keeps_the_text():
    """SimProcess must not leave a sim-*.log in the temp folder per test (hundreds per suite)."""
    with SimProcess(["--sim-fault", "exit_before_ready=0"], wait_ready=False) as sim:
        sim.wait_exit(20)
        path = Path(sim.log.name)
        assert path.exists()
    assert not path.exists()
    assert "exit_before_ready" in sim.output()

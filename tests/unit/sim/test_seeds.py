"""The simulator's parts that the seed scenarios need: seed 004's host-size split (sglang 0.5.17's
proportional split, and kvcached's elastic KV pool starving the mamba host pool), and seed 003's
server flag that the simulator accepts without modelling it, saying so."""

import httpx

from harness.core.model_config import load_model_shape
from harness.server import logscan
from harness.sim.cli import UNMODELLED_FLAGS, parse_args, unmodelled_flags
from harness.sim.testing import MODELS, SimProcess, run_sim

# seed 004: Qwen3.5-4B, --hicache-size 14; 176,256 device tokens and 100 mamba slots give native
# sglang's split (KV 7.40 GB, 129 mamba slots); kvcached's KV pool counted 5x gives 42 slots.
SEED_004 = [
    "--enable-hierarchical-cache",
    "--hicache-size",
    "14",
    "--max-total-tokens",
    "176256",
    "--max-mamba-cache-size",
    "100",
    "--sim-host-split",
    "proportional",
    "--sim-mem-available-gib",
    "64",
]


def _pools(extra):
    with SimProcess([*SEED_004, *extra], model="qwen3.5-4b-shape") as sim:
        text = sim.output()
    bps = load_model_shape(MODELS / "qwen3.5-4b-shape").mamba_bytes_per_slot(1)
    return text, logscan.parse_pools(text, mamba_bytes_per_slot=bps)


def test_elastic_kv_pool_starves_the_mamba_host_pool():
    text, native = _pools([])
    assert "Allocating 6.64 GB host memory for hierarchical Mamba cache" in text
    assert (native.mamba_host_slots, {p.kind: p.gb for p in native.host_pools}["kv"]) == (129, 7.40)
    text, elastic = _pools(["--sim-fault", "elastic_kv_pool=5"])
    assert "Allocating 2.16 GB host memory for hierarchical Mamba cache" in text
    assert elastic.mamba_host_slots == 42  # seed 004: "the Mamba host pool gets 42 slots (2.16 GB)"


def test_host_split_each_is_the_default():
    args = parse_args(["--model-path", "m"])
    assert args.host_split == "each" and args.unmodelled == {}


def test_unmodelled_flag_is_accepted_and_said():
    assert "--ple-offload-backend" in UNMODELLED_FLAGS
    args = parse_args(["--model-path", "m", "--ple-offload-backend=file"])
    assert args.unmodelled == {"--ple-offload-backend": "file"}
    assert "ple_offload_backend" not in str(args.sglang)  # not an sglang setting the simulator uses
    with SimProcess(["--ple-offload-backend", "file"]) as sim:
        info = httpx.get(sim.url + "/get_server_info", timeout=5).json()
        text = sim.output()
    assert info["sim"]["unmodelled_flags"] == {"--ple-offload-backend": "file"}
    assert "SIMULATED: --ple-offload-backend file accepted but not modelled" in text
    assert unmodelled_flags(["python", "-m", "harness.sim", "--ple-offload-backend", "file"]) == {
        "--ple-offload-backend": "file"
    }


def test_an_undeclared_flag_is_still_refused():
    proc = run_sim(["--ple-offload-backnd", "file"])
    assert proc.returncode == 2 and "unrecognized arguments" in proc.stdout


def test_host_register_fails_at_chunk_rolls_back_and_is_classified():
    """seed 002: a 5.24 GB pool (40,001 tokens x 131,072 B) in 1 GiB chunks; the third fails."""
    flags = ["--enable-hierarchical-cache", "--max-total-tokens", "20000", "--sim-mem-available-gib", "64"]
    flags += ["--sim-fault", "host_register_fails_at_chunk=3"]
    env = {"SGLANG_HICACHE_HOST_REGISTER_CHUNK_GB": "1"}
    proc = run_sim(flags, model="llama3-8b", env=env)
    assert proc.returncode != 0
    found = logscan.classify_failure(proc.stdout)
    assert found.cause == logscan.HOST_REGISTER and found.detail["error"] == "invalid argument"
    assert (found.detail["chunk_limit"], found.detail["chunks_rolled_back"]) == (1024**3, 2)
    # a pool of fewer chunks than N registers fine (256 GiB default: one chunk)
    with SimProcess(flags[:-2] + ["--sim-fault", "host_register_fails_at_chunk=2"], model="llama3-8b"):
        pass

"""The log parser reads sglang's real lines (fixtures copied from sglang-facts.md, the seeds and
sglang's source) and classifies startup failures; bare "oom" is never out-of-memory."""

from harness.server import logscan

REAL_HOST_MEMORY = """\
[2026-09-21 10:00:01 TP0] Load weight begin. avail mem=11.20 GB
[2026-09-21 10:00:40 TP0] hierarchical KV host pool: 420001 tokens, 2.58 GB
Traceback (most recent call last):
  File ".../pool_host/mamba.py", line 120, in __init__
    raise ValueError(
ValueError: Not enough host memory available. Requesting 2.55 GB but only have 0.59 GB free. Please reduce the size of the hierarchical cache.
"""

REAL_CUDA_FAULT = """\
[TP0] Prefill batch. #new-seq: 1, #new-token: 8192, #cached-token: 0
  File ".../pool_host/mha.py", line 1274, in _transfer_int2_scales_zeros
    h[h_idx] = d[d_idx].to("cpu")
torch.AcceleratorError: CUDA error: an illegal memory access was encountered
CUDA kernel errors might be asynchronously reported at some other API call,
so the stacktrace below might be incorrect.
AssertionError: follow-on assertion after the fault
"""

LAYER_FIRST_ASSERT = """\
Traceback (most recent call last):
  File ".../pool_host/mamba.py", line 60, in __init__
    assert self.layout != "layer_first"
AssertionError: layer_first layout is not supported for mamba host pool
"""

BOOTSTRAP_NOISE = """\
[TP0] Receive: obj=GenerateReqInput(rid='a', bootstrap_host=None, bootstrap_room=None)
ValueError: something else broke
"""


def test_host_memory_cause_with_parsed_gb():
    found = logscan.classify_failure(REAL_HOST_MEMORY)
    assert found.cause == logscan.HOST_MEMORY
    assert found.detail == {"requested_gb": 2.55, "free_gb": 0.59}
    assert found.line_number == 6


def test_cuda_fault_wins_over_follow_on_assertion():
    found = logscan.classify_failure(REAL_CUDA_FAULT)
    assert found.cause == logscan.CUDA_FAULT
    assert "illegal memory access" in found.line
    assert logscan.CUDA_FAULT not in logscan.TRANSIENT_CAUSES


def test_assertion_message():
    found = logscan.classify_failure(LAYER_FIRST_ASSERT)
    assert found.cause == logscan.ASSERTION
    assert "layer_first" in found.detail["message"]


def test_bare_oom_substring_is_not_out_of_memory():
    found = logscan.classify_failure(BOOTSTRAP_NOISE)
    assert found.cause == logscan.UNKNOWN
    assert found.detail["error"] == "ValueError"
    assert logscan.classify_failure("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate").cause == (
        logscan.OUT_OF_MEMORY
    )
    assert logscan.classify_failure("kernel: oom-kill:constraint=CONSTRAINT_NONE").cause == logscan.OUT_OF_MEMORY


def test_clean_log_has_no_cause():
    assert logscan.classify_failure("[TP0] Load weight end.\nThe server is fired up and ready to roll!\n") is None


def test_pools_newer_format_and_max_total():
    text = (
        "[TP0] max_total_num_tokens=20480, chunked_prefill_size=8192, max_prefill_tokens=16384, "
        "max_running_requests=2048, context_len=16384\n"
        "[TP0] Allocating kv hierarchical KV host pool: 40961 tokens, 0.67 GB host memory.\n"
        "[TP1] Allocating kv hierarchical KV host pool: 40961 tokens, 0.67 GB host memory.\n"
    )
    pools = logscan.parse_pools(text)
    assert pools.max_total_num_tokens == 20480
    assert pools.host_pool_tokens == 40961
    assert pools.host_pool_gb == 0.67  # one rank's pools, not summed across ranks


def test_pools_seed000_fork_and_older_format():
    pools = logscan.parse_pools("hierarchical KV host pool: 420001 tokens, 2.58 GB\n")
    assert pools.host_pool_tokens == 420001 and pools.host_pool_gb == 2.58
    old = logscan.parse_pools("Allocating 1.34 GB host memory for hierarchical KV cache.\n")
    assert old.host_pool_gb == 1.34 and old.host_pool_tokens is None


def test_excerpt_around_match():
    ex = logscan.excerpt("\n".join(f"l{i}" for i in range(1, 101)), 50, context=2)
    assert ex["first_line"] == 48 and ex["lines"] == ["l48", "l49", "l50", "l51", "l52"]


def test_pools_hybrid_kv_and_mamba_lines():
    text = (
        "[TP0] Allocating kv hierarchical KV host pool: 420001 tokens, 2.58 GB host memory.\n"
        "[TP0] Allocating 2.55 GB host memory for hierarchical Mamba cache (layout=page_first).\n"
    )
    pools = logscan.parse_pools(text)
    assert pools.host_pool_tokens == 420001
    assert {p.kind: p.gb for p in pools.host_pools} == {"kv": 2.58, "mamba": 2.55}
    assert pools.host_pool_gb == 5.13

"""What two faults do that is no scheduling: a numerically different kernel's logprob noise on a
cached prefix (``near_tie_flips``: `kernel_noise`) and sglang's asynchronous CUDA fault, printed
before the process dies at once (``crash_at_request``: `crash_with_illegal_access`).
"""

from __future__ import annotations

import os
import random
import sys
import time

from harness.sim.tokens import Candidates

# near_tie_flips: standard deviation of the logprob noise a cached prefix gets without
# --enable-deterministic-inference. A near-tie (gap < 0.01) flips about half the time, a 0.15 gap
# about 4% of the time, a 0.3 gap almost never: a real server's flips, mostly near-ties, a few not.
NEAR_TIE_NOISE_SD = 0.06


def kernel_noise(cand: Candidates, rng: random.Random, sd: float = NEAR_TIE_NOISE_SD) -> Candidates:
    """near_tie_flips: the candidates as a numerically different kernel sees them -- every
    logprob moved by N(0, sd), best first again. Greedy takes the new best; the reported
    logprobs move too (|Δ logprob| against a cold prefill)."""
    lps = [lp + rng.gauss(0.0, sd) for lp in cand.logprobs]
    order = sorted(range(len(lps)), key=lambda i: -lps[i])
    return Candidates(tuple(cand.tokens[i] for i in order), tuple(round(lps[i], 6) for i in order))


ILLEGAL_ACCESS_TRACEBACK = """Scheduler hit an exception: Traceback (most recent call last):
  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/managers/scheduler.py", line 2946, in run_scheduler_process
    scheduler.event_loop_overlap()
  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/managers/scheduler.py", line 1012, in event_loop_overlap
    self.process_batch_result(tmp_batch, tmp_result)
  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/managers/scheduler_output_processor_mixin.py", line 82, in process_batch_result_prefill
    next_token_ids = next_token_ids.tolist()
torch.AcceleratorError: CUDA error: an illegal memory access was encountered
CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.
For debugging consider passing CUDA_LAUNCH_BLOCKING=1
Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.
"""


def crash_with_illegal_access(where: str) -> None:
    """Print sglang's asynchronous CUDA fault and die at once (no cleanup, like a real crash)."""
    sys.stdout.flush()
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    sys.stderr.write(f"[{stamp} TP0] {ILLEGAL_ACCESS_TRACEBACK}\n")
    sys.stderr.write(
        f"[{stamp}] Received sigquit from a child process. It usually means the child failed. ({where}, simulated)\n"
    )
    sys.stderr.flush()
    os._exit(1)

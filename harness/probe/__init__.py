"""Platform probes (`harness probe`): what this host's GPU can do with host memory.

- `run.py`: run every probe, each in its own worker process, and assemble one JSON result
  (`run_probes`).
- `worker.py`: the GPU-side body of each probe (torch/cupy/CUDA); `python -m harness.probe.worker
  NAME` runs one of them alone in a fresh process.
- `cli.py`: the `harness probe` / `python -m harness.probe` command and its printed summary.

Nothing is imported here, so starting a worker process stays cheap.
"""

"""What a run ran on: host and GPU fingerprint, the environment allowlist, sglang's identity.

Every run's manifest carries these (reliability.md P14) so a number can always be traced back to
the machine, driver, sglang build and environment that produced it. Secrets never reach a file:
the recorded environment goes through the run's :class:`harness.store.secrets.Redactor`.
"""

from __future__ import annotations

import fnmatch
import os
import platform
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from harness.host import nvml, procfs
from harness.store.secrets import REDACTED, Redactor, is_secret_name

# Environment variables worth recording: sglang/HiCache knobs, CUDA/NCCL placement, threading.
ENV_ALLOWLIST = (
    "SGLANG_*",
    "SGL_*",
    "CUDA_*",
    "NCCL_*",
    "NVSHMEM_*",
    "TORCH_*",
    "PYTORCH_*",
    "HF_*",
    "TRANSFORMERS_*",
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "PYTHONPATH",
    "LD_LIBRARY_PATH",
    "KVCACHED_*",
    "HARNESS_*",
    "MODEL_PATH",
    "SGLANG_PYTHON",
)


def allowlisted_env(
    env: Mapping[str, str], extra: Mapping[str, str] | None = None, redactor: Redactor | None = None
) -> dict[str, str]:
    """The allowlisted part of ``env`` plus every key of ``extra`` (what the scenario set), with
    credential-named values and the run's known secret values (``redactor``) replaced."""
    r = redactor or Redactor()
    keep = {k: v for k, v in env.items() if any(fnmatch.fnmatchcase(k, pat) for pat in ENV_ALLOWLIST)}
    out = r.env(keep)
    out.update(r.scenario_env(dict(extra or {})))  # what the scenario set: harmless tuning only
    return dict(sorted(out.items()))


def scrub_json(redactor: Redactor, node: Any) -> Any:
    """A JSON-ready tree for a results file: the run's secret values replaced in every string, and
    a string under a credential name (``api_key``) replaced whole. Keys, numbers and booleans are
    never touched, so figures named like credentials (``kv_bytes_per_token``) survive."""
    if isinstance(node, Mapping):
        return {
            k: (REDACTED if isinstance(v, str) and v and is_secret_name(str(k)) else scrub_json(redactor, v))
            for k, v in node.items()
        }
    if isinstance(node, (list, tuple)):
        return [scrub_json(redactor, x) for x in node]
    if isinstance(node, str):
        return redactor.text(node)
    return node


def is_wsl(release: str | None) -> bool:
    """WSL kernels say "microsoft" in their release string (the check sglang's fork uses)."""
    return "microsoft" in (release or "").lower()


def host_fingerprint() -> dict:
    u = platform.uname()
    return {
        "hostname": u.node,
        "kernel": u.release,
        "os": f"{u.system} {u.version}",
        "machine": u.machine,
        "wsl": is_wsl(u.release),
        "cpu": procfs.read_cpu_model() or platform.processor() or None,
        "cpu_count": os.cpu_count(),
        "mem_total_kib": procfs.read_meminfo_field("MemTotal"),
        "python": platform.python_version(),
        "gpus": nvml.gpu_inventory(),
    }


def git_state(path: Path) -> dict | None:
    """Commit, branch and dirty state of the git checkout holding ``path`` (None if not one)."""

    def git(*args: str) -> str | None:
        try:
            r = subprocess.run(["git", "-C", str(path), *args], capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return r.stdout.strip() if r.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    if commit is None:
        return None
    return {
        "path": str(path),
        "commit": commit,
        "branch": git("rev-parse", "--abbrev-ref", "HEAD"),
        "dirty": bool(git("status", "--porcelain", "--untracked-files=no")),
    }


def sglang_version(python: str, env: Mapping[str, str] | None = None, timeout_s: float = 60.0) -> dict:
    """``sglang.__version__`` and its location as seen by the server's own interpreter."""
    code = "import sglang, os; print(sglang.__version__); print(os.path.dirname(sglang.__file__))"
    try:
        r = subprocess.run(
            [python, "-c", code],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            env=dict(env) if env is not None else None,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"version": None, "error": str(exc)}
    if r.returncode != 0:
        return {"version": None, "error": (r.stderr.strip().splitlines() or ["import failed"])[-1]}
    lines = r.stdout.strip().splitlines()
    out = {"version": lines[0] if lines else None, "location": lines[1] if len(lines) > 1 else None}
    if out["location"]:
        out["git"] = git_state(Path(out["location"]))
    return out

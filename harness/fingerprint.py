"""What a run ran on: host and GPU fingerprint, the environment allowlist, sglang's identity.

Every run's manifest carries these (reliability.md P14) so a number can always be traced back to
the machine, driver, sglang build and environment that produced it. Secrets never reach a file:
environment values whose names look like credentials are redacted wherever they are written.
"""

from __future__ import annotations

import fnmatch
import os
import platform
import re
import subprocess
from collections.abc import Mapping
from pathlib import Path

from harness import nvml, procfs

REDACTED = "***"

# Environment variables worth recording: sglang/HiCache knobs, CUDA/NCCL placement, threading.
ENV_ALLOWLIST = (
    "SGLANG_*", "SGL_*", "CUDA_*", "NCCL_*", "NVSHMEM_*", "TORCH_*", "PYTORCH_*", "HF_*",
    "TRANSFORMERS_*", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "PYTHONPATH", "LD_LIBRARY_PATH",
    "KVCACHED_*", "HARNESS_*", "MODEL_PATH", "SGLANG_PYTHON",
)
_SECRET = re.compile(r"(_TOKEN$|_KEY$|SECRET|PASSWORD|PASSWD|CREDENTIAL|^TOKEN$|^KEY$)", re.IGNORECASE)


def is_secret(name: str) -> bool:
    return bool(_SECRET.search(name))


def redact_env(env: Mapping[str, str]) -> dict[str, str]:
    """All of ``env`` with credential-looking values replaced by ``***``."""
    return {k: (REDACTED if is_secret(k) else str(v)) for k, v in env.items()}


def allowlisted_env(env: Mapping[str, str], extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The allowlisted part of ``env`` plus every key of ``extra`` (what the scenario set), redacted."""
    keep = {k: v for k, v in env.items() if any(fnmatch.fnmatchcase(k, pat) for pat in ENV_ALLOWLIST)}
    keep.update(extra or {})
    return redact_env(dict(sorted(keep.items())))


_KEY_VALUE = re.compile(
    r"(?P<key>[A-Za-z0-9_.-]+)(?P<sep>[ \t]*[:=][ \t]*)(?P<value>[^,{}\[\]\s#][^,}\n#]*?)(?=[ \t]*(?:#|,|}|$))",
    re.MULTILINE,
)


def redact_text(text: str) -> str:
    """Scenario YAML (or any ``key: value`` text) with credential-looking values replaced."""
    def repl(m: re.Match) -> str:
        name = m.group("key").lstrip("-").replace("-", "_")
        if is_secret(name):
            return f"{m.group('key')}{m.group('sep')}{REDACTED}"
        return m.group(0)

    return _KEY_VALUE.sub(repl, text)


def redact_argv(argv: list[str]) -> list[str]:
    """Hide values of flags such as ``--api-key`` in a command line."""
    out = list(argv)
    for i, arg in enumerate(out):
        name = arg.lstrip("-").replace("-", "_")
        if "=" in arg and arg.startswith("--"):
            flag, _, _value = arg.partition("=")
            if is_secret(flag.lstrip("-").replace("-", "_")):
                out[i] = f"{flag}={REDACTED}"
        elif arg.startswith("--") and is_secret(name) and i + 1 < len(out):
            out[i + 1] = REDACTED
    return out


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
        r = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=timeout_s,
                           env=dict(env) if env is not None else None)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"version": None, "error": str(exc)}
    if r.returncode != 0:
        return {"version": None, "error": (r.stderr.strip().splitlines() or ["import failed"])[-1]}
    lines = r.stdout.strip().splitlines()
    out = {"version": lines[0] if lines else None, "location": lines[1] if len(lines) > 1 else None}
    if out["location"]:
        out["git"] = git_state(Path(out["location"]))
    return out

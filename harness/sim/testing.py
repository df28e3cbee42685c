"""Test helper: run ``python -m harness.sim`` as a subprocess on a free port, and always reap it.

One job: give tests (the simulator's own and the lifecycle/workload tests) a started simulated
server and the guarantee that its whole process group is gone afterwards, even when the test
fails -- a leaked server would hold the port and memory for the rest of the suite.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Mapping, Sequence

import httpx

REPO = Path(__file__).resolve().parents[2]
MODELS = REPO / "scenarios" / "models"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class SimProcess:
    """``with SimProcess(["--enable-hierarchical-cache"]) as sim: httpx.post(sim.url + ...)``."""

    def __init__(
        self,
        extra: Sequence[str] = (),
        model: str = "llama-tiny",
        wait_ready: bool = True,
        time_scale: float = 0.02,
        startup_s: float = 0.05,
        ready_timeout: float = 20.0,
    ) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.argv = [
            sys.executable,
            "-m",
            "harness.sim",
            "--model-path",
            str(MODELS / model),
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--sim-time-scale",
            str(time_scale),
            "--sim-startup-s",
            str(startup_s),
            "--sim-host-mem-scale",
            "0.01",
            *extra,
        ]
        self.wait_ready = wait_ready
        self.ready_timeout = ready_timeout
        self.log = tempfile.NamedTemporaryFile(prefix="sim-", suffix=".log", delete=False)
        self._final_output: str | None = None  # the log's text once kill() removed the file
        self.proc: subprocess.Popen | None = None

    def __enter__(self) -> "SimProcess":
        env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
        self.proc = subprocess.Popen(
            self.argv, stdout=self.log, stderr=subprocess.STDOUT, cwd=REPO, env=env, start_new_session=True
        )
        if self.wait_ready:
            try:
                self.wait_until_ready(self.ready_timeout)
            except BaseException:
                self.kill()
                raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.kill()

    @property
    def pgid(self) -> int:
        assert self.proc is not None
        return self.proc.pid  # start_new_session: the leader's pid is the group id

    def wait_until_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"sim exited with {self.proc.returncode}:\n{self.output()}")
            try:
                if httpx.get(self.url + "/health_generate", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        raise TimeoutError(f"sim not ready in {timeout} s:\n{self.output()}")

    def output(self) -> str:
        if self._final_output is not None:
            return self._final_output
        return Path(self.log.name).read_text(errors="replace")

    def wait_exit(self, timeout: float) -> int:
        assert self.proc is not None
        return self.proc.wait(timeout=timeout)

    def kill(self) -> None:
        """SIGKILL the whole process group (children included), reap the leader and remove the
        log file (its text stays readable through ``output()``)."""
        if self.proc is None:
            return
        try:
            os.killpg(self.pgid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        self.log.close()
        if self._final_output is None:
            self._final_output = self.output()
            Path(self.log.name).unlink(missing_ok=True)


def run_sim(
    extra: Sequence[str], model: str = "llama-tiny", timeout: float = 20.0, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess:
    """Run the sim to completion (for start-up failures); stdout+stderr merged in ``.stdout``;
    ``env``: more environment variables for it."""
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""), **(env or {}))
    argv = [
        sys.executable,
        "-m",
        "harness.sim",
        "--model-path",
        str(MODELS / model),
        "--port",
        str(free_port()),
        "--sim-startup-s",
        "0.01",
        "--sim-host-mem-scale",
        "0.001",
        *extra,
    ]
    return subprocess.run(
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=REPO,
        env=env,
        timeout=timeout,
        start_new_session=True,
    )


def generate(url: str, ids: list[int], max_new_tokens: int = 1, **extra: object) -> dict:
    """One non-streaming /generate with greedy sampling."""
    body = {"input_ids": ids, "sampling_params": {"max_new_tokens": max_new_tokens, "temperature": 0.0}, **extra}
    r = httpx.post(url + "/generate", json=body, timeout=30)
    r.raise_for_status()
    return r.json()

"""The simulator's leak fault: every request keeps memory that is never freed, so the server's
RSS grows by the fault's argument per request (what a soak must call a LEAK)."""

from __future__ import annotations

import httpx
import psutil

from harness.sim.testing import SimProcess


def _rss_growth_mib(extra: list[str], requests: int = 8) -> float:
    with SimProcess(["--max-total-tokens", "4096", "--skip-tokenizer-init", *extra]) as sim:
        proc = psutil.Process(sim.proc.pid)
        body = {"input_ids": list(range(1, 65)), "sampling_params": {"max_new_tokens": 1}}
        httpx.post(sim.url + "/generate", json=body, timeout=10).raise_for_status()  # the server's own warm-up
        before = proc.memory_info().rss
        for i in range(requests):
            body["input_ids"] = list(range(1000 * (i + 1), 1000 * (i + 1) + 64))
            httpx.post(sim.url + "/generate", json=body, timeout=10).raise_for_status()
        return (proc.memory_info().rss - before) / (1 << 20)


def test_leak_per_request_grows_the_servers_rss_by_its_argument_per_request():
    assert _rss_growth_mib(["--sim-fault", "leak_per_request=4096"]) >= 8 * 4 * 0.9  # 4 MiB a request, kept
    assert _rss_growth_mib([]) < 8  # healthy: no such growth

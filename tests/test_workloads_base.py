"""run_workloads bookkeeping with a stand-in client (no server process)."""

from __future__ import annotations

import asyncio

from harness.scenario import Workload
from harness.workloads import WorkloadContext, run_workloads
from pydantic import TypeAdapter

_wl = TypeAdapter(Workload)


class _DyingClient:
    """A client whose /flush_cache fails because the server dies meanwhile."""

    def __init__(self, state: dict) -> None:
        self.state = state

    async def flush_cache(self) -> bool:
        self.state["alive"] = False
        return False


def test_server_death_during_flush_before_is_reported():
    """The server dies while a workload's flush_before runs: that workload is listed as failed
    (server_died), not silently dropped from the outcome; the next one is skipped."""
    state = {"alive": True}

    async def go():
        ctx = WorkloadContext(base_url="http://x", client=_DyingClient(state), variant="v", repeat=0,
                              pool_tokens=4096, vocab_size=32000, seed=0, record=lambda r: None,
                              alive=lambda: state["alive"], death_grace_s=0.2)
        return await run_workloads(ctx, [
            _wl.validate_python(dict(kind="cold_prefill", n=1, prompt_tokens=64, flush_before=True)),
            _wl.validate_python(dict(kind="cold_prefill", name="second", n=1, prompt_tokens=64)),
        ])

    out = asyncio.run(go())
    assert out.server_died and not out.ok
    assert out.failed == {"cold_prefill": "server_died"}
    assert out.skipped == ["second"]

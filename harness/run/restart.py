"""A planned restart inside a serving window (the ``storage_restart`` workload): stop the server,
keep its storage directory, start it again on the same port -- with another model or flags when
asked -- and wait until it is ready. While it restarts, the server counts as alive (the death
watchdog must not abort the workload) and the hang watch is held; afterwards the sampler follows
the new process tree. The server log gets both lives, one after the other."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping

from harness.core.errors import Broken
from harness.run.launch import launch_spec

if TYPE_CHECKING:
    from harness.scenario.models import Scenario

log = logging.getLogger(__name__)


class RestartFailed(Broken, RuntimeError):
    """The server did not come back ready after a planned restart."""


class Restarter:
    """``await restarter(change)`` restarts ``server``; ``restarting`` is true meanwhile."""

    def __init__(
        self, scenario: Scenario, variant, server, sampler, on_phase: Callable[[str], None], hold, resume
    ) -> None:
        self.scenario, self.variant, self.server, self.sampler = scenario, variant, server, sampler
        self.on_phase, self.hold, self.resume = on_phase, hold, resume
        self.restarting = False

    def alive(self) -> bool:
        return self.restarting or self.server.alive()

    def changed_variant(self, change: Mapping[str, Any] | None):
        v = self.variant
        if not change:
            return v
        update: dict[str, Any] = {"args": {**v.args, **(change.get("args") or {})}}
        if change.get("model_path"):
            path = Path(change["model_path"])
            if not path.is_absolute() and self.scenario.base_dir is not None:
                path = Path(self.scenario.base_dir) / path
            update.update(model_path=str(path), model_path_spec=str(change["model_path"]))
        return v.model_copy(update=update)

    def _restart_blocking(self, change: Mapping[str, Any] | None):
        server = self.server
        server.stop()
        v = self.changed_variant(change)
        new = launch_spec(self.scenario, v, server.spec.port)
        server.spec = dataclasses.replace(new, env_overrides={**server.spec.env_overrides, **new.env_overrides})
        server.start()
        ready = server.wait_ready(v.startup_timeout_s)
        if self.sampler is not None and server.pid is not None:
            self.sampler.follow(server.pid)
        return ready

    async def __call__(self, change: Mapping[str, Any] | None = None) -> None:
        self.restarting = True
        self.hold()
        self.on_phase("restart")
        try:
            ready = await asyncio.to_thread(self._restart_blocking, change)
        finally:
            self.restarting = False
            self.resume()
        if not ready.ready:
            raise RestartFailed(f"the server did not come back after the restart: {ready.cause} {ready.detail or ''}")
        log.info("restarted %s (%s) in %.1f s", self.variant.name, "changed" if change else "unchanged", ready.seconds)

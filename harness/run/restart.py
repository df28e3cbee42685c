"""A planned restart inside a serving window (the ``storage_restart`` workload): stop the server,
keep its storage directory, start it again on the same port -- with another model or flags when
asked -- and wait until it is ready. While it restarts, the server counts as alive (the death
watchdog must not abort the workload) and the hang watch is held; afterwards the sampler follows
the new process tree. The server log gets both lives, one after the other."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from contextlib import nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping

from harness.core.errors import Broken
from harness.run import lanes
from harness.server.process import build_launch_spec

if TYPE_CHECKING:
    from harness.run.sampler import Sampler
    from harness.scenario.models import Variant
    from harness.server.process import ServerProcess

log = logging.getLogger(__name__)


class RestartFailed(Broken, RuntimeError):
    """The server did not come back ready after a planned restart."""


class Restarter:
    """``await restarter(change)`` restarts ``server``; ``restarting`` is true meanwhile. It
    launches as the first launch did (``enable_metrics``); a changed model's relative path is
    taken from ``scenario_dir``."""

    def __init__(
        self,
        variant: Variant,
        server: ServerProcess,
        sampler: Sampler | None,
        on_phase: Callable[[str], None],
        hold: Callable[[], None],
        resume: Callable[[], None],
        *,
        scenario_dir: Path | None,
        enable_metrics: bool,
    ) -> None:
        self.variant, self.server, self.sampler = variant, server, sampler
        self.on_phase, self.hold, self.resume = on_phase, hold, resume
        self.scenario_dir, self.enable_metrics = scenario_dir, enable_metrics
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
            if not path.is_absolute() and self.scenario_dir is not None:
                path = Path(self.scenario_dir) / path
            update.update(model_path=str(path), model_path_spec=str(change["model_path"]))
        return v.model_copy(update=update)

    def _restart_blocking(self, change: Mapping[str, Any] | None, spawn_guard):
        server = self.server
        server.stop()
        v = self.changed_variant(change)
        new = build_launch_spec(v, server.spec.port, enable_metrics=self.enable_metrics)
        server.spec = dataclasses.replace(new, env_overrides={**server.spec.env_overrides, **new.env_overrides})
        with spawn_guard or nullcontext():  # a side-by-side run's interrupt: no server after it
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
            # this thread's spawn guard, taken here: the worker thread that starts the server has none
            ready = await asyncio.to_thread(self._restart_blocking, change, lanes.current_spawn_guard())
        finally:
            self.restarting = False
            self.resume()
        if not ready.ready:
            raise RestartFailed(f"the server did not come back after the restart: {ready.cause} {ready.detail or ''}")
        log.info("restarted %s (%s) in %.1f s", self.variant.name, "changed" if change else "unchanged", ready.seconds)

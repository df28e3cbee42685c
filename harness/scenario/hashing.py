"""Hashes that say whether two runs measured the same thing, and the JSON Schema of the format."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from harness.scenario.models import Scenario, Variant

# The simulator's start-up timings (harness.server.startup_phases) change how long a start takes, never
# what a variant measures: a scenario that sets them keeps its variants' hashes (and baselines).
STARTUP_ONLY_SIM_KNOBS = frozenset({"capture_s", "register_s_per_gb", "warmup_s"})


def _canonical(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def variant_config_hash(scenario: Scenario, variant: Variant) -> str:
    """sha256 over what shapes the server: backend, python, command prefix, sglang_source (the
    variant's build's, as written; a build's env and args are in the merged ones), model path
    (as written, after ${VAR} expansion, so checkouts in other folders hash alike), TP size,
    merged args (in order) and env, HiCache block and simulator options (with faults).
    Names, descriptions, expectations, timeouts and workloads are not part of it. An external
    server (``backend: external``) is its URL: its own arguments are recorded per run in the
    manifest (``variants[].server``), since they are only known once it is asked."""
    if variant.backend == "external":
        return hashlib.sha256(_canonical({"backend": "external", "url": variant.url}).encode("utf-8")).hexdigest()
    s = scenario.server
    sim = variant.backend == "sim"
    build = scenario.builds.get(variant.build)  # None: the server block's own build
    python = build.python if build is not None and build.python is not None else s.python
    source = build.sglang_source if build is not None else s.sglang_source
    payload = {
        "backend": variant.backend,
        "python": None if sim else python,
        "command_prefix": list(s.command_prefix),
        # the simulator's own build ignored its server.sglang_source; a named build's counts
        "sglang_source": source if not sim or build is not None else None,
        "model_path": variant.model_path_spec,
        "tp_size": variant.tp_size,
        "args": [[k, v] for k, v in variant.args.items()],
        "env": dict(sorted(variant.env.items())),
        "hicache": variant.hicache.model_dump() if variant.hicache is not None else None,
        "sim": (
            {
                # a simulated host, when there is none, adds nothing: earlier runs keep their hashes
                **variant.sim.model_dump(
                    exclude=STARTUP_ONLY_SIM_KNOBS
                    | ({"host"} if variant.sim.host is None else set())
                    | (set() if variant.sim.storage_persist else {"storage_persist"})
                ),
                "faults": variant.all_sim_faults(),
            }
            if sim and variant.sim is not None
            else None
        ),
    }
    return hashlib.sha256(_canonical(payload).encode("utf-8")).hexdigest()


def scenario_hash(text: str | bytes) -> str:
    """sha256 of the scenario file's text."""
    if isinstance(text, str):
        text = text.encode("utf-8")
    return hashlib.sha256(text).hexdigest()


def json_schema() -> dict:
    """JSON Schema of the scenario format (``harness schema``)."""
    schema = Scenario.model_json_schema(mode="validation")
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "HiCache harness scenario"
    schema["required"] = [r for r in schema.get("required", []) if r != "name"]
    return schema

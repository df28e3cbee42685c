"""Test helper (not a test module): typed scenarios and variants for the preflight's tests, loaded
as a scenario file is (`harness.scenario.loading.load_scenario_text`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from harness.scenario.loading import load_scenario_text
from harness.scenario.models import Scenario, Variant

MODELS = Path(__file__).resolve().parents[3] / "scenarios" / "models"


def _load(server: dict[str, Any], preflight: dict[str, Any], variants: list[dict[str, Any]]) -> Scenario:
    text = {
        "name": "t",
        "server": server,
        "preflight": preflight,
        "variants": variants,
        "workloads": [{"kind": "decode"}],
    }
    return load_scenario_text(json.dumps(text))


def scenario(
    backend: str = "sglang",
    model: str = "llama-tiny",
    tp: int = 1,
    args: dict[str, Any] | None = None,
    sim: dict[str, Any] | None = None,
    **preflight: Any,
) -> Scenario:
    """A scenario of ``backend`` serving scenarios/models/``model``; ``sim``: its ``server.sim``
    block (backend sim); ``preflight``: its ``preflight`` block (mode warn and reserve 10 GiB given)."""
    server = {"backend": backend, "model_path": str(MODELS / model), "tp_size": tp, "args": args or {}}
    if sim is not None:
        server["sim"] = sim
    return _load(server, {"mode": "warn", "reserve_gib": 10, **preflight}, [{"name": "v"}])


def variant(sc: Scenario, name: str, hicache: dict[str, Any] | None, args: dict[str, Any] | None = None) -> Variant:
    """Variant ``name`` of ``sc``'s server with ``hicache`` (None: off) and its own ``args``."""
    server = sc.server.model_dump(mode="json", exclude_unset=True)
    entry: dict[str, Any] = {"name": name, "args": args or {}}
    if hicache is not None:
        entry["hicache"] = hicache
    return _load(server, sc.preflight.model_dump(mode="json", exclude_unset=True), [entry]).expand_variants()[0]

"""The memory section's "--find-ratio" block: the run's ``ratio_boundary.json``
(`harness.run.find_ratio.judge`) as the page shows it -- per point the knob's value, what was
expected and seen, whether they agree; the start and page-cache cliffs; confirmed or contradicted.
Nothing recomputed; None for a run that was not a find-ratio run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.run.find_ratio import RESULT_FILE
from harness.store import results


def find_ratio_context(root: Path) -> dict[str, Any] | None:
    """{file, variant, knob, step, points: [{name, value, expect, seen, agrees}], start_cliff,
    page_cache_cliff, confirmed} from ``root/ratio_boundary.json``, or None without one."""
    path = root / RESULT_FILE
    if not path.exists():
        return None
    res = results.read_json_object(path)
    points = [
        {
            "name": p.get("name"),
            "value": p.get("value"),
            "expect": str(p.get("expect") or "").replace("_", " "),
            "seen": p.get("seen"),
            "agrees": bool(p.get("agrees")),
        }
        for p in res.get("points") or []
    ]
    return {
        "file": RESULT_FILE,
        "variant": res.get("variant"),
        "knob": res.get("knob"),
        "step": res.get("step"),
        "points": points,
        "start_cliff": res.get("start_cliff"),
        "page_cache_cliff": res.get("page_cache_cliff"),
        "confirmed": bool(res.get("confirmed")),
    }

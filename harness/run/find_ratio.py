"""``harness run SCENARIO --find-ratio``: the safe-ratio boundary confirmed on both sides.

The boundary (`harness.run.ratio_boundary`) predicts, for one HiCache variant, the highest ratio
(or ``size_gb``) that starts and the highest that keeps the page cache. This runs the variant at
each limit and one ``preflight.boundary_step`` above it:

- at the start limit: must start;
- a step above it: must be refused or fail to start (declared ``expect: startup_failed``, with
  ``host_memory`` where sglang's rule binds and ``out_of_memory`` where the container's limit does);
- at the page-cache limit (when it is below the start limit): must start and keep the page cache;
- a step above it: must start and show, in the sampler's figures after ready, the page cache lost
  (Cached below its reading before the pool by more than ``sampling.cooldown_mem_tolerance_gib``),
  swap-in, or swap used.

The run is a normal run of those variants (its own scenario name, ``<name>-find-ratio``, so it never
becomes a nightly baseline; no gate, checks or quality arm) and ``ratio_boundary.json`` in its
folder says, per point, what was expected, what was seen and whether they agree, and where each
cliff is. A point that disagrees is a FAIL (exit 1) whatever the run's own verdict.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.core.errors import BadInput
from harness.run import ratio_boundary
from harness.run.hostpool import preflight_variant
from harness.server import logscan
from harness.store import results

if TYPE_CHECKING:
    from harness.scenario.models import Scenario

RESULT_FILE = "ratio_boundary.json"
MEMORY_CAUSES = (logscan.HOST_MEMORY, logscan.OUT_OF_MEMORY, "preflight")
STARTS, REFUSED, KEEPS, LOSES = "starts", "refused", "keeps_page_cache", "loses_page_cache"


@dataclass(frozen=True)
class Point:
    name: str
    value: float
    expect: str  # STARTS | REFUSED | KEEPS | LOSES


@dataclass
class Plan:
    variant: str
    knob: str
    step: float
    boundary: dict[str, Any]
    points: list[Point] = field(default_factory=list)

    def lines(self) -> list[str]:
        out = [ratio_boundary.boundary_line(self.variant, self.boundary) or ""]
        out += [
            f"find-ratio: {p.name}: {self.knob} {p.value:g}, expected to {p.expect.replace('_', ' ')}"
            for p in self.points
        ]
        return out


def _base_variant(scenario: Scenario, only: list[str] | None):
    hicache = [v for v in scenario.expand_variants() if v.hicache is not None and v.backend != "external"]
    if only:
        hicache = [v for v in hicache if v.name in only]
    if len(hicache) != 1 and not (hicache and not only):
        named = ", ".join(only or [])
        raise BadInput(
            f"--find-ratio: name one HiCache variant with --only (got {named or 'none'}; HiCache variants: "
            + ", ".join(v.name for v in scenario.expand_variants() if v.hicache is not None)
            + ")"
        )
    return hicache[0]


def plan(scenario: Scenario, only: list[str] | None = None) -> Plan:
    """The points to run for the variant ``only`` names (or the scenario's first HiCache variant)."""
    base = _base_variant(scenario, only)
    record = preflight_variant(scenario, base)
    b = ratio_boundary.for_record(scenario, base, record)
    if b is None:
        reason = (record or {}).get("reason") or "preflight is off"
        raise BadInput(f"--find-ratio: {base.name}: the boundary cannot be predicted before launch: {reason}")
    knob, step = b["knob"], float(b["step"])
    starts, keeps = b["starts"], b["keeps_page_cache"]
    if starts["value"] is None:
        raise BadInput(f"--find-ratio: {base.name}: no {knob} of step {step:g} starts: {starts['reason']}")
    out = Plan(variant=base.name, knob=knob, step=step, boundary=b)
    tag = "r" if knob == "ratio" else "gb"

    def point(value: float, expect: str) -> None:
        out.points.append(Point(f"{base.name}-{tag}{value:g}", round(value, 6), expect))

    if keeps["value"] is not None and keeps["value"] < starts["value"]:
        point(keeps["value"], KEEPS)
        point(keeps["next_value"], LOSES)
    if not out.points or out.points[-1].value != starts["value"]:
        point(starts["value"], STARTS)
    point(starts["next_value"], REFUSED)
    return out


def prepare(scenario: Scenario, p: Plan):
    """The scenario to run: the plan's points as its variants, under ``<name>-find-ratio``, with no
    gate, checks or quality arm (a run of the boundary, never a night's baseline)."""
    base = scenario.variant(p.variant)
    starts_binding = p.boundary["starts"]["binding"]
    variants = []
    for pt in p.points:
        hicache = base.hicache.model_copy(
            update={"ratio": pt.value, "size_gb": None} if p.knob == "ratio" else {"size_gb": pt.value}
        )
        refused = pt.expect == REFUSED
        cause = (logscan.OUT_OF_MEMORY if starts_binding == "cgroup" else logscan.HOST_MEMORY) if refused else None
        variants.append(
            base.model_copy(
                update={
                    "name": pt.name,
                    "hicache": hicache,
                    "expect": "startup_failed" if refused else "ok",
                    "expect_cause": cause,
                    "startup_retries": 0,
                    "description": f"--find-ratio: {p.knob} {pt.value:g}, expected to {pt.expect.replace('_', ' ')}",
                }
            )
        )
    run = scenario.model_copy(deep=True)
    run.name = f"{scenario.name}-find-ratio"
    run.gate = []
    run.expectations = type(scenario.expectations)()
    run.quality.enabled = False
    run._variants = variants
    for attr in ("_path", "_text", "_hash", "_base_dir", "_overrides", "_repeats_auto"):
        setattr(run, attr, getattr(scenario, attr))
    return run


# ----------------------------------------------------------------------------- judging


def _samples(path: Path) -> list[dict]:
    rows = []
    if path.is_file():
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                rows.append(json.loads(line))
            except ValueError:
                continue
    return rows


def page_cache_figures(samples: list[dict], tolerance_kib: int) -> dict[str, Any]:
    """What the samples say of the page cache and swap once the server was ready (every sample
    after the ``startup`` phase) against the first reading (before the pool): the page cache lost,
    the peak swap-in rate, swap used; ``lost`` when any of them is past noise."""
    first = next((s for s in samples if s.get("cached_kib") is not None), None)
    after = [s for s in samples if s.get("phase") not in ("startup", None)]
    cached = [s["cached_kib"] for s in after if s.get("cached_kib") is not None]
    swapin = [s["pswpin_kib_s"] for s in after if s.get("pswpin_kib_s") is not None]

    def used(s: dict) -> int | None:
        if s.get("swap_total_kib") is None or s.get("swap_free_kib") is None:
            return None
        return s["swap_total_kib"] - s["swap_free_kib"]

    swap_before = used(first) if first else None
    swap_after = [u for s in after if (u := used(s)) is not None]
    lost_kib = (first["cached_kib"] - min(cached)) if first and cached else None
    swap_grew = (max(swap_after) - swap_before) if swap_after and swap_before is not None else None
    peak_in = max(swapin) if swapin else None
    lost = bool(
        (lost_kib is not None and lost_kib > tolerance_kib)
        or (peak_in is not None and peak_in > 0)
        or (swap_grew is not None and swap_grew > tolerance_kib)
    )
    return {
        "page_cache_before_kib": first["cached_kib"] if first else None,
        "page_cache_min_after_ready_kib": min(cached) if cached else None,
        "page_cache_lost_kib": lost_kib,
        "swap_in_peak_kib_s": peak_in,
        "swap_used_grew_kib": swap_grew,
        "samples_after_ready": len(after),
        "lost": lost,
    }


def judge(run_dir: Path, p: Plan, tolerance_gib: float) -> dict[str, Any]:
    """Each point's expectation against its status and samples; ``ratio_boundary.json`` written."""
    tolerance_kib = int(tolerance_gib * 1024**2)
    rows = []
    for pt in p.points:
        vdir = run_dir / results.safe_name(pt.name)
        try:
            status = json.loads((vdir / "status.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            status = {}
        state, cause = status.get("state"), status.get("cause")
        started = state in ("ok", "partial", "failed")
        figures = page_cache_figures(_samples(vdir / "samples.jsonl"), tolerance_kib) if started else None
        if pt.expect == REFUSED:
            # refused for want of memory: sglang's rule, the OOM killer, or a strict preflight
            agrees = state in ("startup_failed", "refused") and cause in MEMORY_CAUSES
            seen = f"{state} ({cause})" if state else "not run"
        elif not started:
            agrees, seen = False, f"did not start: {state} ({cause})"
        elif figures is None or figures["samples_after_ready"] == 0:
            agrees, seen = False, "started, but no samples after ready to judge the page cache"
        else:
            lost = figures["lost"]
            agrees = lost if pt.expect == LOSES else (not lost if pt.expect == KEEPS else True)
            seen = "started, " + (
                f"page cache lost {(figures['page_cache_lost_kib'] or 0) / 1024**2:.2f} GiB, swap-in peak "
                f"{figures['swap_in_peak_kib_s'] or 0:g} KiB/s"
                if lost
                else "page cache kept, no swap-in"
            )
        rows.append({**asdict(pt), "state": state, "cause": cause, "seen": seen, "agrees": agrees, "figures": figures})
    by = {r["expect"]: r for r in rows}

    def cliff(low: str, high: str) -> str | None:
        if low in by and high in by and by[low]["agrees"] and by[high]["agrees"]:
            return f"between {p.knob} {by[low]['value']:g} and {by[high]['value']:g}"
        return None

    out = {
        "variant": p.variant,
        "knob": p.knob,
        "step": p.step,
        "prediction": p.boundary,
        "points": rows,
        "start_cliff": cliff(STARTS, REFUSED) or (cliff(KEEPS, REFUSED) if STARTS not in by else None),
        "page_cache_cliff": cliff(KEEPS, LOSES),
        "confirmed": all(r["agrees"] for r in rows),
    }
    results.write_json_atomic(run_dir / RESULT_FILE, out)
    return out


def result_lines(res: dict[str, Any]) -> list[str]:
    lines = [
        f"find-ratio: {r['name']}: expected to {r['expect'].replace('_', ' ')}: {r['seen']}"
        + ("" if r["agrees"] else "  <-- contradicts the prediction")
        for r in res["points"]
    ]
    if res["start_cliff"]:
        lines.append(f"find-ratio: the start cliff is {res['start_cliff']}")
    if res["page_cache_cliff"]:
        lines.append(f"find-ratio: the page-cache cliff is {res['page_cache_cliff']}")
    lines.append(
        "find-ratio: the boundary is " + ("confirmed on both sides" if res["confirmed"] else "CONTRADICTED (FAIL)")
    )
    return lines

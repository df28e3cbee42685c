"""Pure: what differs between two nights' runs, ranked — the first place to look when compare or
history flags a change.

`night_changes(base, cand)` reads two runs' manifests and their variants' status.json (pools)
and lists every difference, most likely cause first:

  1 build          each variant's sglang version, commit, branch, dirty state, source, import path
                   (manifest ``variants[].build``; the run-level ``sglang``)
  2 server args    each variant's server argv (``--port``/``--host`` values left out: they move)
  3 env            each variant's environment and the run's allowlisted env
  4 driver         the GPUs' driver (``host.gpus[].driver``) and the GPU models
  5 kernel         the host's kernel, OS, Python, CPU count, memory
  6 probe          the probed bandwidths (``probe.bandwidth_gbs``, ``probe.disk``) moved by more
                   than ``PROBE_TOLERANCE``, or probed in one night only
  7 pools          each variant's pool sizes (status.json ``pools``: device, host, Mamba slots)
  8 design warnings what the harness warned before each night's run (``design_warnings``)
  9 harness        the harness version, the scenario text
Nothing here judges: a night with no difference says so (then the change is the server's, the
machine's load, or noise).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from harness.store.manifest import Manifest, ManifestVariant
from harness.store.probe_result import ProbeResult
from harness.store.status_view import Pools
from harness.store.variant_status import VariantStatus

PROBE_TOLERANCE = 0.10  # a probed bandwidth that moved less than this is the probe's own noise
_MOVING_FLAGS = ("--port", "--host")
_POOL_KEYS = ("max_total_num_tokens", "host_pool_tokens", "host_pool_gb", "mamba_device_slots", "mamba_host_slots")
RANKS = {
    "build": 1,
    "server args": 2,
    "env": 3,
    "driver": 4,
    "kernel": 5,
    "probe": 6,
    "pools": 7,
    "design warnings": 8,
    "harness": 9,
}


@dataclass(frozen=True)
class Change:
    """One difference: its category (ranked), the variant it belongs to (None: the run's), what, before, after."""

    category: str
    what: str
    before: Any
    after: Any
    variant: str | None = None

    @property
    def rank(self) -> int:
        return RANKS[self.category]

    @property
    def text(self) -> str:
        where = f"{self.variant}: " if self.variant else ""
        return f"{self.category}: {where}{self.what}: {_show(self.before)} → {_show(self.after)}"

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "rank": self.rank, "text": self.text}


def _show(v: Any) -> str:
    if v is None:
        return "(none)"
    if isinstance(v, float):
        return f"{v:,.3g}"
    if isinstance(v, (list, tuple)):
        return " ".join(map(str, v)) if v else "(none)"
    return str(v)


def _dict_changes(
    category: str, before: Mapping | None, after: Mapping | None, variant=None, prefix=""
) -> list[Change]:
    b, a = dict(before or {}), dict(after or {})
    return [
        Change(category, f"{prefix}{k}", b.get(k), a.get(k), variant)
        for k in sorted({*b, *a}, key=str)
        if b.get(k) != a.get(k)
    ]


def _args(argv: Sequence[str] | None) -> dict[str, str]:
    """A server argv as {flag: value} ("" for a bare flag; positional words under their index);
    the first word (the interpreter) and the moving flags left out."""
    out: dict[str, str] = {}
    words = list(argv or [])[1:]
    i = 0
    while i < len(words):
        w = words[i]
        if w.startswith("--"):
            flag, eq, val = w.partition("=")
            if not eq and i + 1 < len(words) and not words[i + 1].startswith("--"):
                val, i = words[i + 1], i + 1
            if flag not in _MOVING_FLAGS:
                out[flag] = val
        else:
            out[f"#{i}"] = w
        i += 1
    return out


_BUILD_KEYS = ("version", "imported version", "commit", "branch", "dirty", "source", "imported from", "python")


def _build(entry: ManifestVariant) -> dict[str, Any]:
    b = entry.build
    if b is None:
        return dict.fromkeys(_BUILD_KEYS)
    values = (b.version, b.imported_version, b.commit, b.branch, b.dirty, b.sglang_source, b.imported_file, b.python)
    return dict(zip(_BUILD_KEYS, values))


def _probe(probe: ProbeResult | None) -> dict[str, float | None]:
    if probe is None:
        return {"disk read GB/s": None, "disk write GB/s": None}
    out = {f"{k} GB/s": v for k, v in probe.bandwidth_gbs.items()}
    out.update({"disk read GB/s": probe.disk_read_gbs, "disk write GB/s": probe.disk_write_gbs})
    return out


def _num(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        return None
    return float(v)


def _probe_changes(before: ProbeResult | None, after: ProbeResult | None) -> list[Change]:
    b, a = _probe(before), _probe(after)
    out = []
    for k in sorted({*b, *a}):
        x, y = _num(b.get(k)), _num(a.get(k))
        if x is None and y is None:
            continue
        if x is None or y is None or (x > 0 and abs(y - x) / x > PROBE_TOLERANCE) or (x == 0 and y != 0):
            what = k if x is None or y is None or x == 0 else f"{k} ({(y - x) / x:+.0%})"
            out.append(Change("probe", what, x, y))
    return out


def _host(m: Manifest) -> dict[str, Any]:
    h = m.host
    return {k: h.get(k) for k in ("kernel", "os", "python", "cpu_count", "mem_total_kib", "hostname")}


def _gpus(m: Manifest) -> dict[str, Any]:
    gpus = m.host.get("gpus") or []
    return {
        "driver": sorted({str(g.get("driver")) for g in gpus if g.get("driver")}) or None,
        "GPUs": [str(g.get("name")) for g in gpus] or None,
    }


def _pools(statuses: Mapping[str, VariantStatus] | None, name: str) -> dict[str, Any]:
    """The pool figures a night's status of ``name`` records (each None without them)."""
    st = (statuses or {}).get(name)
    pools = Pools.from_json(st.pools) if st is not None else None
    return {k: pools.value(k) if pools is not None else None for k in _POOL_KEYS}


def night_changes(
    base: Manifest,
    cand: Manifest,
    base_status: Mapping[str, VariantStatus] | None = None,
    cand_status: Mapping[str, VariantStatus] | None = None,
) -> list[Change]:
    """Every difference between two runs' manifests (and their variants' pools), ranked (see the
    module docstring); within a rank in variant order."""
    out: list[Change] = []
    bv = {e.name: e for e in base.variants}
    cv = {e.name: e for e in cand.variants}
    names = [n for n in dict.fromkeys([*cv, *bv]) if n in bv and n in cv]
    out += _dict_changes("build", base.sglang or None, cand.sglang or None, prefix="sglang ")
    for n in names:
        out += _dict_changes("build", _build(bv[n]), _build(cv[n]), n)
        out += _dict_changes("server args", _args(bv[n].raw.get("argv")), _args(cv[n].raw.get("argv")), n)
        out += _dict_changes("env", bv[n].raw.get("env"), cv[n].raw.get("env"), n)
    out += _dict_changes("env", base.env or None, cand.env or None)
    out += _dict_changes("driver", _gpus(base), _gpus(cand))
    out += _dict_changes("kernel", _host(base), _host(cand))
    out += _probe_changes(base.platform, cand.platform)
    for n in names:
        bp, cp = _pools(base_status, n), _pools(cand_status, n)
        out += _dict_changes("pools", bp, cp, n)
    bw, cw = base.design_warnings, cand.design_warnings
    for n in dict.fromkeys([*cw, *bw]):
        gone = [w for w in bw.get(n, ()) if w not in cw.get(n, ())]
        new = [w for w in cw.get(n, ()) if w not in bw.get(n, ())]
        for w in new:
            out.append(Change("design warnings", "new", None, w, n))
        for w in gone:
            out.append(Change("design warnings", "gone", w, None, n))
    out += _dict_changes("harness", {"version": base.harness_version}, {"version": cand.harness_version})
    bs, cs = base.scenario.hash, cand.scenario.hash
    if bs != cs:
        out.append(Change("harness", "scenario text (hash)", (bs or "")[:12] or None, (cs or "")[:12] or None))
    return sorted(out, key=lambda c: c.rank)

"""Pure: the tier hits a variant's pools should have given its own sends, against what it got.

An LRU model of the pools (`TierPools`: the device pool's tokens, the host pool's, the storage
tier's, the Mamba slots on each, the page size and the hybrid models' 64-token state interval)
replays the variant's requests in the order they were sent (`RequestRecord.sent_ns`) and says, per
request, where a prompt sent before should be found: on the device, the host or the storage tier
(a prompt is recognised by its ``input_hash``, so only exact repeats are predicted: a prompt that
extends an earlier one is predicted to miss, and its hit is no shortfall). A hit is predicted as
the prompt's tokens but its last (sglang computes the last token), aligned down to the page, and
on a hybrid model to the 64-token interval at which sglang 0.5.17 keeps a Mamba state.

Each request inserts its prompt and output into the device pool, evicting the least recently
used prompts until it fits; with HiCache (``write_through``) every insert is written to the host
pool too (LRU, its own capacity), and with a storage tier below it to storage; ``write_back``
writes to the host only what the device evicts. A hit is moved to the front of every tier that
holds it. A hybrid model's device and host pools also hold at most their Mamba slots' worth of
prompts. A workload that flushes the cache first (``flush_before``) empties the model.

`phase_predictions` compares, per workload and phase, the predicted device / host / storage
tokens with the achieved; `shortfalls` names each phase that exists to hit a tier
(`WorkloadKind.hit_tier`) and got more than one page (hit unit) fewer cached tokens than
predicted, with both numbers and, where the model knows it, why (a 64-aligned prompt on a hybrid
model has no Mamba state at its end: seed 004's "16 prompts sent twice never hit").
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from harness.measures import metrics as M
from harness.store.records import RequestRecord

MAMBA_STATE_INTERVAL = 64  # sglang 0.5.17 tracks a hybrid model's Mamba state every 64 tokens
TIERS = ("device", "host", "storage")


@dataclass(frozen=True)
class TierPools:
    """The pools a variant's server reported (status.json ``pools``, the preflight, /get_server_info)."""

    device_tokens: int | None
    host_tokens: int | None = None  # None: no host tier (HiCache off)
    storage_tokens: int | None = None  # None with ``storage``: unbounded / not reported
    storage: bool = False
    page_size: int = 1
    hybrid: bool = False
    mamba_device_slots: int | None = None
    mamba_host_slots: int | None = None
    write_policy: str = "write_through"

    @property
    def unit(self) -> int:
        """The granularity of a hit: the page, on a hybrid model at least the Mamba state interval."""
        return max(self.page_size, MAMBA_STATE_INTERVAL) if self.hybrid else self.page_size

    def hit_tokens(self, prompt_tokens: int) -> int:
        """The tokens of a prompt sent before that can be found cached."""
        return max(0, (prompt_tokens - 1) // self.unit * self.unit)

    def describe(self) -> str:
        parts = [f"device {self.device_tokens:,}" if self.device_tokens else "device ?"]
        if self.host_tokens is not None:
            parts.append(f"host {self.host_tokens:,}")
        if self.storage:
            parts.append(f"storage {self.storage_tokens:,}" if self.storage_tokens else "storage (unbounded)")
        text = ", ".join(parts) + f" tokens, page {self.page_size}"
        if self.hybrid:
            slots = f"{self.mamba_device_slots or '?'} device / {self.mamba_host_slots or '?'} host"
            text += f", hybrid (hits in {self.unit}-token units; Mamba slots {slots})"
        return text

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def pools_for(
    pools: Mapping[str, Any] | None,
    preflight: Mapping[str, Any] | None,
    server_info: Mapping[str, Any] | None,
    tiers: Iterable[str],
    write_policy: str | None = None,
) -> TierPools | None:
    """The model's pools from a variant's stored figures; None without a device pool size."""
    pools, info = pools or {}, server_info or {}
    pred = (preflight or {}).get("prediction") or {}
    have = set(tiers)
    device = pools.get("max_total_num_tokens") or info.get("max_total_num_tokens")
    if not isinstance(device, int) or device <= 0:
        return None
    page = pred.get("page_size") or info.get("page_size") or 1
    host = pools.get("host_pool_tokens") if "host" in have else None
    hybrid = bool(
        pools.get("mamba_device_slots") or pools.get("mamba_host_slots") or (pred.get("mamba_bytes_per_slot") or 0) > 0
    )
    return TierPools(
        device_tokens=device,
        host_tokens=int(host) if isinstance(host, int) and "host" in have else (None if "host" not in have else 0),
        storage_tokens=info.get("storage_pool_tokens") if isinstance(info.get("storage_pool_tokens"), int) else None,
        storage="storage" in have,
        page_size=int(page) if isinstance(page, int) and page > 0 else 1,
        hybrid=hybrid,
        mamba_device_slots=pools.get("mamba_device_slots"),
        mamba_host_slots=pools.get("mamba_host_slots"),
        write_policy=write_policy or "write_through",
    )


class _Lru:
    """Prompts (input hash → tokens held) in least-recently-used order, with a token capacity and
    an optional count capacity (Mamba slots)."""

    def __init__(self, tokens: int | None, count: int | None = None):
        self.tokens, self.count = tokens, count
        self.items: OrderedDict[str, int] = OrderedDict()
        self.used = 0

    def __contains__(self, key: str) -> bool:
        return key in self.items

    def touch(self, key: str) -> None:
        self.items.move_to_end(key)

    def put(self, key: str, size: int) -> list[tuple[str, int, str]]:
        """Insert (or refresh) ``key``; returns what it evicted, each with why (tokens | slots)."""
        if key in self.items:
            self.used -= self.items.pop(key)
        out = []
        while self.items and self.tokens is not None and self.used + size > self.tokens:
            k, s = self.items.popitem(last=False)
            self.used -= s
            out.append((k, s, "tokens"))
        while self.items and self.count is not None and len(self.items) + 1 > self.count:
            k, s = self.items.popitem(last=False)
            self.used -= s
            out.append((k, s, "slots"))
        if self.tokens is None or size <= self.tokens:
            self.items[key] = size
            self.used += size
        return out


@dataclass
class Prediction:
    """Where one request's prompt should have been found, and why it was not where it was sent before."""

    tier: str | None  # device | host | storage | None (a miss)
    tokens: int
    missed_because: str | None = None  # a repeat predicted to miss: "device pool", "host slots", ...


class TierModel:
    """The LRU replay (see the module docstring)."""

    def __init__(self, pools: TierPools):
        self.pools = pools
        self.reset()

    def reset(self) -> None:
        p = self.pools
        self.device = _Lru(p.device_tokens, p.mamba_device_slots if p.hybrid else None)
        self.host = _Lru(p.host_tokens, p.mamba_host_slots if p.hybrid else None) if p.host_tokens is not None else None
        self.storage = _Lru(p.storage_tokens) if p.storage and not p.hybrid else None
        self.seen: dict[str, str] = {}  # every prompt sent since the last flush → why it left (if it did)

    def restart(self, changed: bool) -> None:
        """The server was restarted: its GPU and host pools start empty; the storage tier's files
        stay, unless it came back changed (another model or dtype: none of them may be served)."""
        storage = self.storage
        self.reset()
        if not changed:
            self.storage = storage

    def send(self, key: str, prompt_tokens: int, total_tokens: int) -> Prediction:
        """One request: where its prompt is found now, then its insertion."""
        hit = self.pools.hit_tokens(prompt_tokens)
        tier = None
        for name, lru in (("device", self.device), ("host", self.host), ("storage", self.storage)):
            if lru is not None and key in lru:
                tier = name
                break
        why = None if tier is not None or key not in self.seen else self.seen[key]
        if tier is None or hit == 0:
            pred = Prediction(None, 0, why if tier is None else None)
        else:
            pred = Prediction(tier, hit)
        self.seen[key] = ""
        self._insert(key, total_tokens)
        return pred

    def _insert(self, key: str, size: int) -> None:
        evicted = self.device.put(key, size)
        for k, _, why in evicted:
            self.seen[k] = "device Mamba slots" if why == "slots" else "device pool"
        if self.host is not None:
            to_host = [(key, size)] if self.pools.write_policy != "write_back" else []
            to_host += [(k, s) for k, s, _ in evicted] if self.pools.write_policy == "write_back" else []
            for k, s in to_host:
                for hk, hs, why in self.host.put(k, s):
                    if hk not in self.device:
                        self.seen[hk] = "host Mamba slots" if why == "slots" else "host pool"
                    if self.storage is not None:
                        for sk, _, _ in self.storage.put(hk, hs):
                            self.seen[sk] = "storage"
            if self.storage is not None and self.pools.write_policy != "write_back":
                self.storage.put(key, size)
        # what is cached now is the most recent in every tier that holds it
        for lru in (self.host, self.storage):
            if lru is not None and key in lru:
                lru.touch(key)


def _achieved(r: RequestRecord) -> dict[str, int]:
    return {"device": r.cached_device or 0, "host": r.cached_host or 0, "storage": r.cached_storage or 0}


@dataclass
class PhasePrediction:
    workload: str
    phase: str
    n: int = 0
    predicted: dict[str, int] = field(default_factory=lambda: dict.fromkeys(TIERS, 0))
    achieved: dict[str, int] = field(default_factory=lambda: dict.fromkeys(TIERS, 0))
    achieved_cached: int = 0  # every tier together (cached_tokens), also where tiers are not reported
    tiers_reported: bool = True
    missed_because: dict[str, int] = field(default_factory=dict)  # predicted misses of repeats → count
    aligned_hybrid: int = 0  # requests of a hybrid model whose prompt is a multiple of the state interval

    @property
    def predicted_total(self) -> int:
        return sum(self.predicted.values())

    @property
    def shortfall(self) -> int:
        return self.predicted_total - self.achieved_cached

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "predicted_total": self.predicted_total, "shortfall": self.shortfall}


def phase_predictions(
    records: Iterable[RequestRecord],
    pools: TierPools,
    flush_workloads: Iterable[str] = (),
    restarts: Mapping[tuple[str, str], bool] | None = None,
) -> dict[tuple[str, str], PhasePrediction]:
    """{(workload, phase): predicted and achieved tier tokens} over the measured requests, every
    request (warm-ups and errors too: they were sent) replayed in send order. ``restarts``: the
    (workload, phase) the server was restarted before, and whether it came back changed."""
    model = TierModel(pools)
    flush = set(flush_workloads)
    restarts = restarts or {}
    started: set[tuple[str, int]] = set()
    restarted: set[tuple[str, str, int]] = set()
    out: dict[tuple[str, str], PhasePrediction] = {}
    for r in sorted(records, key=lambda r: (r.sent_ns, r.index)):
        if r.workload in flush and (r.workload, r.repeat) not in started:
            model.reset()
        started.add((r.workload, r.repeat))
        if (r.workload, r.phase) in restarts and (r.workload, r.phase, r.repeat) not in restarted:
            model.restart(restarts[(r.workload, r.phase)])
            restarted.add((r.workload, r.phase, r.repeat))
        n = M.prompt_token_count(r) or r.prompt_len
        pred = model.send(r.input_hash, n, n + (r.completion_tokens or 0))
        if r.warmup or r.error is not None:
            continue
        pp = out.setdefault((r.workload, r.phase), PhasePrediction(r.workload, r.phase))
        pp.n += 1
        if pred.tier is not None:
            pp.predicted[pred.tier] += pred.tokens
        elif pred.missed_because:
            pp.missed_because[pred.missed_because] = pp.missed_because.get(pred.missed_because, 0) + 1
        for t, v in _achieved(r).items():
            pp.achieved[t] += v
        pp.achieved_cached += r.cached_tokens or 0
        pp.tiers_reported &= r.cached_device is not None or r.cached_host is not None
        if pools.hybrid and n % MAMBA_STATE_INTERVAL == 0:
            pp.aligned_hybrid += 1
    return out


@dataclass(frozen=True)
class Shortfall:
    """A phase that got more than one hit unit fewer cached tokens than its pools predict."""

    workload: str
    phase: str
    predicted: dict[str, int]
    achieved: dict[str, int]
    predicted_total: int
    achieved_total: int
    pools: str
    why: str | None

    @property
    def text(self) -> str:
        def split(d: Mapping[str, int]) -> str:
            return ", ".join(f"{t} {d[t]:,}" for t in TIERS if d.get(t))

        pred = split(self.predicted)
        got = split(self.achieved)
        head = (
            f"{self.workload}/{self.phase} got {self.achieved_total:,} cached tokens"
            + (f" ({got})" if got else "")
            + f", {self.predicted_total - self.achieved_total:,} short of the {self.predicted_total:,} ({pred})"
            + f" that its pools ({self.pools}) predict for this run's own sends"
        )
        return head + (f"; {self.why}" if self.why else "")

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "text": self.text}


def shortfalls(
    predictions: Mapping[tuple[str, str], PhasePrediction],
    pools: TierPools,
    hit_phase: Mapping[tuple[str, str], bool],
) -> list[Shortfall]:
    """The phases that exist to hit a tier (``hit_phase``) whose achieved cached tokens fall short
    of the prediction by more than one hit unit (`TierPools.unit`)."""
    out = []
    for key, pp in predictions.items():
        if not hit_phase.get(key) or pp.shortfall <= pools.unit:
            continue
        why = None
        if pp.aligned_hybrid:
            why = (
                f"{pp.aligned_hybrid} of its {pp.n} prompts are a multiple of {MAMBA_STATE_INTERVAL} tokens on a hybrid "
                "model: sglang 0.5.17 keeps no Mamba state at a prompt's end, so a repeat finds no usable prefix "
                "(seed 004); a length off the multiple hits"
            )
        out.append(
            Shortfall(
                pp.workload,
                pp.phase,
                dict(pp.predicted),
                dict(pp.achieved) if pp.tiers_reported else {},
                pp.predicted_total,
                pp.achieved_cached,
                pools.describe(),
                why,
            )
        )
    return out

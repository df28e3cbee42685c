"""The simulated scheduler: one "GPU" shared by all requests, with a simple cost model.

One job: decide when each request's tokens come out.  Like sglang's scheduler, one loop runs
one batch at a time on the single simulated GPU:
- a *prefill* batch whenever requests wait: the current chunked request first, then new
  requests (FCFS) while the ``--chunked-prefill-size`` token budget lasts; a prompt longer than
  the budget is split over several batches, so a short prompt arriving during a long prefill
  waits for the running chunk (interference, as measured by ``short_ttft``);
- otherwise a *decode* batch: every running request gets one token.
The prefill batch emits each finished prompt's first token; ``max_new_tokens=1`` ends there.

Admission matches the prompt in :class:`TwoTierCache`, locks the matched pages, evicts LRU pages
until the uncached tokens, the host pages to load back and ``max_new_tokens`` fit, then loads
host pages back.  A finished request inserts prompt+output (hybrid: up to its last 64-token
mamba checkpoint) into the cache; write-through backups are costed in the next batch.

Clock (``batch_deadline``, docs/simulator.md "Clock and machine load"): batches run on a virtual
timeline of absolute deadlines in loop time, so the server's own work (matching, eviction, HTTP,
the older GC generations: ``harness.sim.collector``) happens *inside* the modelled time, and a late
wake-up is made up by the next batches (never more than ``MAX_LAG_S`` behind).  A finished
request's response goes out before its pages are inserted (before the next batch, as in sglang).

Cost model (seconds, all multiplied by ``--sim-time-scale``):
- prefill batch  = 4 ms + new_tokens / prefill_tok_s, prefill_tok_s = min(80K, 4e14 / (2 P))
  (P = approx. parameters; llama-tiny ~75K tok/s as on the H200, a 27B ~7.4K tok/s);
- + load-back bytes / H2D GB/s (``--sim-h2d-gbs``, default 55 GB/s, for ``kernel``; ``direct``
  0.73x of it; layer_first 0.8x)
  + 0.25 x backup bytes / D2H GB/s (write-through copies mostly overlap compute)
  + storage prefetch bytes / ``--sim-storage-read-gbs`` (default 2 GB/s, an NVMe drive; the
  prefetch finishes before the request runs, as with ``wait_complete``). Storage writes
  (``--sim-storage-write-gbs``, default 1 GB/s) run in the background, as sglang's storage
  thread does: they set the backup bandwidth sglang reports, not the batch time;
- decode step    = max(4 ms, 2 P bytes / 4 TB/s) + k x batch size + KV bytes read / 4 TB/s, with
  k = ``--sim-step-ms-per-request`` (default 0.1 ms): how much each running request slows the
  step, so TPOT (and the TTFT of requests queued behind the steps) grows with concurrency.
Numbers are deliberately round: the simulator must show the *shape* of HiCache effects
(host hit < recompute, interference, write-through overhead), not predict an H200.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections import OrderedDict, deque
from collections.abc import Mapping
from dataclasses import dataclass, replace

from harness.sim.cache import MAMBA_TRACK_INTERVAL, Match, Page, TwoTierCache
from harness.sim.collector import BatchCollector
from harness.sim.cost import PAGE_FIRST_DIRECT_SHARE, CostModel, batch_deadline
from harness.sim.fault_effects import crash_with_illegal_access, kernel_noise
from harness.sim.faults import Fault, FaultArg
from harness.sim.metrics import SimMetrics
from harness.sim.request import ABORT_REASON, RequestError, SimRequest
from harness.sim.tokens import CORRUPT_SALT, Candidates, TokenModel, advance, prompt_state

log = logging.getLogger("sglang.sim.scheduler")

# The simulated GPU's power draw behind ``sglang:simulated_energy_joules_total`` (H200-like: about
# 100 W idle, 500 W busy): SIMULATED, for energy-per-token plumbing, not a measurement.
SIM_IDLE_W = 100.0
SIM_BUSY_W = 500.0

# late_token_flips: the first output position a flip may hit (answers shorter than this never flip)
LATE_FLIP_FROM = 32
STALL_FACTOR = 2.0  # stall_every: how much longer a stalled request's first-token batch takes
_MIX = 0x9E37_79B9_7F4A_7C15  # a 64-bit odd constant: spreads a sequence state over its residues


@dataclass
class EngineConfig:
    max_total_tokens: int
    chunked_prefill_size: int
    max_running_requests: int
    context_len: int
    kv_bytes_per_token: int
    mamba_bytes_per_slot: int
    hybrid: bool
    deterministic: bool
    faults: Mapping[Fault, FaultArg | None]  # the requested faults and their arguments
    random_seed: int
    storage_backend: str | None = None  # --hicache-storage-backend (None: no L3 tier)
    prefetch_threshold: int = 256  # tokens: fewer storage hits are not prefetched (sglang's default)
    layout: str | None = None  # the host pool's layout as resolved (page_first + direct: page_first_direct)
    log_time_stats: bool = False  # --enable-request-time-stats-logging: a ReqTimeStats line per finished request


class Engine:
    """Scheduler loop + request bookkeeping; all methods run on the server's event loop."""

    def __init__(
        self, cfg: EngineConfig, cache: TwoTierCache, cost: CostModel, model: TokenModel, metrics: SimMetrics
    ) -> None:
        self.cfg = cfg
        self.collector: BatchCollector | None = None  # the server's (harness.sim.collector); None: CPython's own
        self.cache = cache
        slow = cfg.faults.get(Fault.slow_host_load)  # a slower host-to-device load-back
        self.cost = cost if not slow else replace(cost, h2d_bytes_s=cost.h2d_bytes_s / slow)
        if Fault.slow_page_first_direct in cfg.faults and cfg.layout == "page_first_direct":
            self.cost = replace(self.cost, h2d_bytes_s=self.cost.platform_h2d_bytes_s * PAGE_FIRST_DIRECT_SHARE)
        self.model = model
        self.metrics = metrics
        if Fault.missing_storage_pages in cfg.faults:
            cache.storage_keeps_writes = False  # writes acknowledged, files never land
        self._storage_written_exported = 0
        self._mamba_states: OrderedDict[int, Page] = OrderedDict()  # mamba_states_at_most: newest last
        self.waiting: deque[SimRequest] = deque()
        self.running: list[SimRequest] = []
        self.chunked: SimRequest | None = None
        self._wake = asyncio.Event()
        self._pending_backup_bytes = 0
        self._request_count = 0
        self._leaked: list[bytes] = []  # leak_per_request: kept for the server's life
        self._born = time.monotonic()  # the simulated energy counter's idle draw counts from here
        self._busy_s = 0.0  # wall seconds batches ran (as paced)
        self._energy_exported = 0.0
        self._decode_steps = 0
        self._hit_tokens = 0
        self._total_tokens = 0
        self.last_response_at: float | None = None
        self.last_gen_throughput = 0.0
        self._seed_rng = random.Random(cfg.random_seed)
        self._timeline: float | None = None  # loop time the last batch ended (modelled); None idle
        self._retiring: list[SimRequest] = []  # finished, answered, pages not inserted yet
        self.deadlocked = False  # hang_at_request fired: the loop never schedules again

    # ------------------------------------------------------------------ API
    @property
    def busy(self) -> bool:
        return bool(self.waiting or self.running or self.chunked)

    def submit(self, req: SimRequest, sent_age_s: float = 0.0) -> None:
        """Validate and queue; raises RequestError for what sglang rejects up front. ``sent_age_s``:
        how long ago the client sent it (`harness.core.wire`): its prefill may start from then."""
        n = len(req.input_ids)
        if n == 0:
            raise RequestError("The input_ids must not be empty.")
        limit = min(self.cfg.context_len, self.cfg.max_total_tokens) - 1
        if n > limit:
            raise RequestError(
                f"Input length ({n} tokens) exceeds the maximum allowed length ({limit} tokens). "
                "Use a shorter input or enable --allow-auto-truncate."
            )
        if n + req.sampling.max_new_tokens > self.cfg.max_total_tokens:
            raise RequestError(
                f"Requested token count exceeds the model's maximum context length of "
                f"{self.cfg.max_total_tokens} tokens. You requested a total of "
                f"{n + req.sampling.max_new_tokens} tokens: {n} tokens from the input messages and "
                f"{req.sampling.max_new_tokens} tokens for the completion."
            )
        if not req.internal:
            self._request_count += 1
            crash_at = self.cfg.faults.get(Fault.crash_at_request)
            if crash_at is not None and self._request_count == crash_at:
                req.crash = True  # dies when the scheduler picks it up: mid-request
            if self.cfg.faults.get(Fault.hang_at_request) == self._request_count:
                req.hang = True  # deadlocks the scheduler when it picks it up
            leak = self.cfg.faults.get(Fault.leak_per_request)
            if leak:  # written, so the pages are resident: RSS grows as it would for a real leak
                self._leaked.append(b"\x01" * int(float(leak) * 1024))
            every = self.cfg.faults.get(Fault.stall_every)
            if every is not None and self._request_count % int(every) == 0:
                req.stall = True
        req.arrived = asyncio.get_running_loop().time() - max(0.0, sent_age_s)
        self.waiting.append(req)
        self._wake.set()

    def abort(self, req: SimRequest) -> None:
        """sglang's ``abort_request`` for a client that went away: a waiting request leaves the
        queue at once; a running (or chunked) one is finished with ``abort`` at its next step, its KV
        kept in the cache as sglang's ``cache_finished_req`` does. Without it a load generator's
        abandoned streams (guidellm ends a benchmark with its in-flight requests cancelled) would
        keep the simulated GPU busy into the next benchmark."""
        if req.done:
            return
        if req in self.waiting:
            self.waiting.remove(req)
            log.debug("Abort queued request. req.rid='%s'", req.rid)
            req.finish_reason = ABORT_REASON
            req.updates.put_nowait(None)
            self.update_gauges()
            return
        req.abort_requested = True

    def flush(self) -> bool:
        """``/flush_cache``: refused while anything runs or waits (sglang returns 400)."""
        if self.busy:
            log.warning(
                "Cache not flushed because there are pending requests. #queue-req: %d, #running-req: %d",
                len(self.waiting),
                len(self.running) + (1 if self.chunked else 0),
            )
            return False
        self._retire()
        self.cache.reset()
        log.info("Cache flushed successfully!")
        self.update_gauges()
        return True

    # ------------------------------------------------------------------ loop
    async def run(self) -> None:
        while True:
            if self.deadlocked:  # a stuck scheduler: alive, HTTP up, nothing ever scheduled again
                log.warning("scheduler deadlocked (fault hang_at_request, simulated)")
                await asyncio.Event().wait()
            if self._retiring:
                await asyncio.sleep(0)  # the finished requests' responses go out first
                self._retire()
            if not self.busy:
                self._timeline = None
                self._wake.clear()
                await self._wake.wait()
                continue
            batch = self._schedule_prefill()
            if self.deadlocked:
                continue
            if batch:
                await self._run_prefill(batch)
            elif self.running:
                await self._run_decode()
            else:
                # a waiting request cannot be admitted though nothing runs: cannot happen
                # after submit's length checks, but never spin
                req = self.waiting.popleft()
                self._fail(req, "not enough KV cache for this request")

    def _fault_factor(self, batch_requests: int) -> float:
        """How much longer any batch takes under the run-wide slowdown faults: slowdown over the
        server's life (``slowdown_per_request``) and ``slow_when_concurrent`` while more than one
        request is in the server (or in this batch)."""
        f = 1.0
        rate = self.cfg.faults.get(Fault.slowdown_per_request)
        if rate:
            f *= 1.0 + float(rate) * self._request_count
        conc = self.cfg.faults.get(Fault.slow_when_concurrent)
        if conc is not None:
            in_server = sum(1 for r in self.waiting if not r.internal) + sum(1 for r in self.running if not r.internal)
            in_server += 1 if self.chunked is not None and not self.chunked.internal else 0
            if max(batch_requests, in_server) > 1:
                f *= float(conc)
        return f

    def _partial_host(self, m: Match, share: float) -> Match:
        """partial_host_hits: only the first ``share`` of the host pages of a match are served
        (hybrid: back to the last mamba checkpoint); no storage pages past a cut host run."""
        keep = int(len(m.host) * share)
        device, host = m.device, m.host[:keep]
        if self.cfg.hybrid:
            path = device + host
            last = max((i for i, page in enumerate(path) if page.ckpt), default=-1)
            path = path[: last + 1]
            device, host = path[: len(device)], path[len(device) :]
        return Match(device=device, host=host, page_size=m.page_size, storage=m.storage if keep == len(m.host) else [])

    async def _pace(self, seconds: float, arrived: float | None = None) -> float:
        """Sleep until the end of a batch whose cost model says ``seconds`` (see `batch_deadline`);
        returns the batch's modelled start (loop time)."""
        clock = asyncio.get_running_loop().time
        now = clock()
        scaled = max(0.0, seconds * self.cost.time_scale)
        self._busy_s += scaled
        self._timeline = end = batch_deadline(now, scaled, self._timeline, arrived)
        if self.collector is not None:  # the older GC generations, inside the batch (harness.sim.collector)
            self.collector.during(end - now)
        await asyncio.sleep(max(0.0, end - clock()))  # late: 0, which still lets responses out
        return end - scaled

    # ------------------------------------------------------------------ prefill
    def _admit(self, req: SimRequest) -> bool:
        if req.crash:
            crash_with_illegal_access(f"request {self._request_count}")
        if req.hang:
            self.deadlocked = True
            return False
        m: Match = self.cache.match(req.input_ids)
        share = self.cfg.faults.get(Fault.partial_host_hits)
        if share is not None and m.host and not req.internal:
            m = self._partial_host(m, float(share))
        declined = 0
        if Fault.declined_host_load in self.cfg.faults and m.host and not req.internal:
            declined = m.host_tokens  # reported as host hits, recomputed (sglang's declined load_back)
            m = Match(device=m.device, host=[], page_size=m.page_size)
        self.cache.lock(m.pages)
        storage_tokens = 0
        if m.storage_tokens >= max(1, self.cfg.prefetch_threshold):
            storage_tokens = len(self.cache.prefetch(m)) * self.cache.page_size  # now host pages of m
        private = len(req.input_ids) - m.tokens + req.sampling.max_new_tokens
        ok, written = self.cache.make_room(private + m.host_tokens)
        self._pending_backup_bytes += written * self.cache.page_size * self.cfg.kv_bytes_per_token
        if not ok:
            self.cache.unlock(m.pages)
            return False
        self.cache.load_back(m.host)
        self.cache.reserved_tokens += private
        req.reserved = private
        req.locked = m.pages
        req.prefilled = m.tokens
        req.cached_device, req.cached_host = m.device_tokens, m.host_tokens - storage_tokens
        req.cached_storage = storage_tokens
        if declined:  # sglang's breakdown: host = host_hit_length, device = max(0, prefix - host)
            req.reported_cached = m.device_tokens
            req.cached_device, req.cached_host = max(0, m.device_tokens - declined), declined
            log.warning(
                "load_back: FAILED to load %d tokens for node %d even after eviction (evictable_size=%d)",
                declined,
                self._request_count,
                self.cache.device_capacity * self.cache.page_size,
            )
        req.storage_bytes = storage_tokens * self.cfg.kv_bytes_per_token
        req.load_bytes = m.host_tokens * self.cfg.kv_bytes_per_token
        if self.cfg.hybrid and m.host_tokens:
            req.load_bytes += self.cfg.mamba_bytes_per_slot
        req.admitted = True
        req.state = prompt_state(req.input_ids)
        if Fault.corrupt_host_load in self.cfg.faults and m.host_tokens > storage_tokens:  # host pages proper
            req.ref_state, req.state = req.state, req.state ^ CORRUPT_SALT
        if Fault.corrupt_storage in self.cfg.faults and storage_tokens > 0 and req.ref_state is None:
            req.ref_state, req.state = req.state, req.state ^ CORRUPT_SALT
        if Fault.near_tie_flips in self.cfg.faults and not self.cfg.deterministic and m.tokens > 0 and not req.internal:
            req.noise = random.Random(self._seed_rng.getrandbits(64))  # reproducible per --random-seed
        if req.sampling.temperature > 0:
            seed = req.sampling.sampling_seed
            req.rng = random.Random(seed if seed is not None else self._seed_rng.getrandbits(64))
        if m.host_tokens and not req.internal:
            self.metrics.inc("load_back_tokens", m.host_tokens)
            self.metrics.inc("load_back_bytes", req.load_bytes)
            self.metrics["load_back_duration"].observe(req.load_bytes / self.cost.h2d_bytes_s * self.cost.time_scale)
        if storage_tokens and not req.internal:
            self.metrics.storage_prefetched(
                storage_tokens,
                storage_tokens // self.cache.page_size,
                req.storage_bytes,
                self.cost.storage_read_s(req.storage_bytes),
            )
        return True

    def _schedule_prefill(self) -> list[tuple[SimRequest, int]]:
        budget = self.cfg.chunked_prefill_size if self.cfg.chunked_prefill_size > 0 else 1 << 62
        batch: list[tuple[SimRequest, int]] = []
        if self.chunked is not None:
            req = self.chunked
            rest = len(req.input_ids) - req.prefilled
            n = min(rest, budget)
            batch.append((req, n))
            budget -= n
            if n == rest:
                self.chunked = None
        while self.waiting and budget > 0 and self.chunked is None:
            if len(self.running) + len(batch) >= self.cfg.max_running_requests:
                break
            req = self.waiting[0]
            if not self._admit(req):
                break
            self.waiting.popleft()
            rest = len(req.input_ids) - req.prefilled
            n = min(rest, budget)
            batch.append((req, n))
            budget -= n
            if n < rest:
                self.chunked = req
        return batch

    async def _run_prefill(self, batch: list[tuple[SimRequest, int]]) -> None:
        new_tokens = sum(n for _, n in batch)
        fresh = [r for r, _ in batch if r.prefilled == r.cached_tokens]  # first chunk of each
        load_bytes = sum(r.load_bytes for r in fresh)
        storage_bytes = sum(r.storage_bytes for r in fresh)
        cached = sum(r.cached_tokens for r in fresh)
        backup, self._pending_backup_bytes = self._pending_backup_bytes, 0
        self._storage_writes()
        self._hit_tokens += cached
        self._total_tokens += cached + new_tokens
        log.info(
            "Prefill batch. #new-seq: %d, #new-token: %d, #cached-token: %d, token usage: %.2f, "
            "#running-req: %d, #queue-req: %d, ",
            len(fresh),
            new_tokens,
            cached,
            self.cache.device_used_tokens / self.cfg.max_total_tokens,
            len(self.running),
            len(self.waiting),
        )
        seconds = self.cost.prefill_s(new_tokens, load_bytes, backup, storage_bytes)
        seconds *= float(self.cfg.faults.get(Fault.slow_prefill) or 1.0) * self._fault_factor(len(batch))
        if any(r.stall and r.prefilled + n >= len(r.input_ids) for r, n in batch):
            seconds *= STALL_FACTOR  # a stalled request's first token comes out of this batch
        start = await self._pace(seconds, max((r.arrived for r in fresh), default=None))
        end = self._timeline
        now = time.perf_counter()
        for req, n in batch:
            if req.forward_entry_at is None:  # sglang's set_forward_entry_time: the first batch it is in
                req.forward_entry_at = start
            req.prefilled += n
            if self.cfg.hybrid:
                # mamba state tracked at 64-token boundaries: one checkpoint per chunk end
                req.ckpts.add(req.prefilled // MAMBA_TRACK_INTERVAL * MAMBA_TRACK_INTERVAL)
            if req.prefilled < len(req.input_ids):
                continue
            if req.abort_requested:  # aborted during its prefill: no first token
                self._finish(req, ABORT_REASON)
                continue
            req.prefill_finished_at = end
            if not req.internal:
                self.metrics.inc("prompt_tokens", len(req.input_ids))
                self.metrics.cached("device", req.cached_device)
                self.metrics.cached("host", req.cached_host)
                self.metrics.cached("storage", req.cached_storage)
            self._emit(req, now)
            if len(req.output_ids) >= req.sampling.max_new_tokens:
                self._finish(req)
            else:
                self.running.append(req)
        self.update_gauges()

    # ------------------------------------------------------------------ decode
    async def _run_decode(self) -> None:
        bs = len(self.running)
        ctx = sum(len(r.input_ids) + len(r.output_ids) for r in self.running)
        backup, self._pending_backup_bytes = self._pending_backup_bytes, 0
        step = self.cost.decode_s(bs, ctx * self.cfg.kv_bytes_per_token, backup)
        step *= float(self.cfg.faults.get(Fault.slow_decode) or 1.0) * self._fault_factor(bs)
        self._storage_writes()
        self._decode_steps += 1
        self.last_gen_throughput = bs / max(step, 1e-9)
        if self._decode_steps % 40 == 0:
            log.info(
                "Decode batch. #running-req: %d, #token: %d, token usage: %.2f, "
                "gen throughput (token/s): %.2f, #queue-req: %d, ",
                bs,
                self.cache.device_used_tokens,
                self.cache.device_used_tokens / self.cfg.max_total_tokens,
                self.last_gen_throughput,
                len(self.waiting),
            )
        await self._pace(step)
        now = time.perf_counter()
        still: list[SimRequest] = []
        for req in self.running:
            if req.abort_requested:
                self._finish(req, ABORT_REASON)
                continue
            self._emit(req, now)
            if len(req.output_ids) >= req.sampling.max_new_tokens:
                self._finish(req)
            else:
                still.append(req)
        self.running = still
        self.update_gauges()

    # ------------------------------------------------------------------ tokens
    def _emit(self, req: SimRequest, now: float) -> None:
        cand: Candidates = self.model.candidates(req.state)
        pos = len(req.output_ids)
        if req.rng is not None:
            tok = self.model.sample(cand, req.sampling.temperature, req.rng)
        else:
            if req.noise is not None:
                cand = kernel_noise(cand, req.noise)  # numerically different kernels: near-ties flip
            tok = cand.tokens[0]
        if pos == 0 and req.ref_state is not None:
            # corrupt KV from host: the first token is not even in the true top-k
            tok = self.model.outside(self.model.candidates(req.ref_state), tok)
        elif pos >= LATE_FLIP_FROM and req.cached_host and self._late_flip(req.state):
            tok = self.model.outside(cand, tok)  # late_token_flips: one token in N, outside the top-k
        lp = dict(zip(cand.tokens, cand.logprobs)).get(tok, cand.logprobs[-1] - 1.0)
        req.output_ids.append(tok)
        req.state = advance(req.state, tok)
        if req.return_logprob:
            req.output_logprobs.append(lp)
            k = max(0, req.top_logprobs_num)
            req.output_top.append(list(zip(cand.logprobs[:k], cand.tokens[:k])))
        if req.first_token_at is None:
            req.first_token_at = now
            if not req.internal:
                self.metrics["ttft"].observe(now - req.created)
        if not req.internal:
            self.metrics.inc("generation_tokens", 1)
        req.updates.put_nowait(None)

    def _late_flip(self, state: int) -> bool:
        """late_token_flips: whether the token after sequence ``state`` flips (about 1 in N)."""
        every = self.cfg.faults.get(Fault.late_token_flips)
        return every is not None and ((state * _MIX) & 0xFFFF_FFFF_FFFF_FFFF) >> 20 < (1 << 44) // int(every)

    def _finish(self, req: SimRequest, reason: dict | None = None) -> None:
        """Answer the request now; its pages go into the cache in `_retire`, before the next batch."""
        req.finish_reason = reason or {"type": "length", "length": req.sampling.max_new_tokens}
        req.finished_at = time.perf_counter()
        if self.cfg.log_time_stats and not req.internal:
            self._log_time_stats(req)
        if not req.internal:
            self.metrics.inc("num_requests", 1)
            self.metrics["e2e"].observe(req.finished_at - req.created)
            self.last_response_at = time.monotonic()
        self._retiring.append(req)
        req.updates.put_nowait(None)

    def _log_time_stats(self, req: SimRequest) -> None:
        """sglang 0.5.17's ``Req.log_time_stats`` line (``--enable-request-time-stats-logging``, the
        scheduler's, at a request's end): queue = first prefill batch - wait queue, forward = that
        batch's start to now, entry_time the wait-queue entry as unix seconds."""
        now = asyncio.get_running_loop().time()
        queue = (req.forward_entry_at - req.arrived) if req.forward_entry_at is not None else 0.0
        forward = (now - req.forward_entry_at) if req.forward_entry_at is not None else 0.0
        log.info(
            "ReqTimeStats(rid=%s, input_len=%d, cached_input_len=%d, output_len=%d, attempts=1, type=unified): "
            "queue_duration=%.2fms, forward_duration=%.2fms, entry_time=%.3f",
            req.rid,
            len(req.input_ids),
            req.cached_tokens,
            len(req.output_ids),
            queue * 1e3,
            forward * 1e3,
            time.time() - (now - req.arrived),
        )

    def _retire(self) -> None:
        """Insert the finished requests' prompt+output into the cache and release their locks."""
        retiring, self._retiring = self._retiring, []
        for req in retiring:
            self._insert_finished(req)
        if retiring:
            self.update_gauges()

    def _keep_mamba_states(self, path: list[Page]) -> None:
        """mamba_states_at_most=N: the newest N prompts keep their Mamba state (the deepest
        checkpoint of each inserted path); an older one's is dropped, so it matches nothing."""
        cap = self.cfg.faults.get(Fault.mamba_states_at_most)
        last = next((p for p in reversed(path) if p.ckpt), None)
        if cap is None or last is None:
            return
        self._mamba_states.pop(id(last), None)
        self._mamba_states[id(last)] = last
        while len(self._mamba_states) > int(cap):
            _, old = self._mamba_states.popitem(last=False)
            old.ckpt = False

    def _insert_finished(self, req: SimRequest) -> None:
        self.cache.reserved_tokens -= req.reserved
        req.reserved = 0
        if not req.internal:
            seq = req.input_ids + req.output_ids[:-1]  # the last token has no KV yet
            if self.cfg.hybrid:
                upto = max((c for c in req.ckpts if c <= len(req.input_ids)), default=0)
            else:
                upto = len(seq)
            path, written = self.cache.insert(seq, upto, req.ckpts if self.cfg.hybrid else None)
            if self.cfg.hybrid:
                self._keep_mamba_states(path)
            nbytes = written * self.cache.page_size * self.cfg.kv_bytes_per_token
            self._pending_backup_bytes += nbytes
            self.metrics.inc("backup_tokens", written * self.cache.page_size)
            self.metrics.inc("backup_bytes", nbytes)
        self.cache.unlock(req.locked)
        req.locked = []

    def _fail(self, req: SimRequest, message: str) -> None:
        req.error = message
        req.updates.put_nowait(None)

    def _storage_writes(self) -> None:
        """Export the storage writes since the last batch as sglang's backup series (background
        I/O: no batch waits for it)."""
        written = self.cache.stats.storage_written_tokens - self._storage_written_exported
        if written <= 0:
            return
        self._storage_written_exported = self.cache.stats.storage_written_tokens
        nbytes = written * self.cfg.kv_bytes_per_token
        self.metrics.storage_backed_up(
            written, written // self.cache.page_size, nbytes, self.cost.storage_write_s(nbytes)
        )

    # ------------------------------------------------------------------ gauges
    def simulated_energy_j(self) -> float:
        """The simulated GPU's energy since start-up: ``SIM_IDLE_W`` all along plus the difference
        to ``SIM_BUSY_W`` while a batch runs (wall seconds, as paced; SIMULATED, no GPU measured)."""
        return SIM_IDLE_W * (time.monotonic() - self._born) + (SIM_BUSY_W - SIM_IDLE_W) * self._busy_s

    def update_gauges(self) -> None:
        m, c = self.metrics, self.cache
        energy = self.simulated_energy_j()
        m["simulated_energy"].inc(max(0.0, energy - self._energy_exported))
        self._energy_exported = max(energy, self._energy_exported)
        m["token_usage"].set(round(c.device_used_tokens / self.cfg.max_total_tokens, 2))
        m["num_used_tokens"].set(c.device_used_tokens)
        m["num_running"].set(len(self.running) + (1 if self.chunked else 0))
        m["num_queue"].set(len(self.waiting))
        m["cache_hit_rate"].set(self._hit_tokens / self._total_tokens if self._total_tokens else 0.0)
        m["gen_throughput"].set(self.last_gen_throughput)
        if c.hicache:
            m["host_used"].set(c.host_used_tokens)
            m["host_total"].set(c.host_capacity_tokens)
        stats = c.stats
        # evictions happen inside the cache; export the delta since the last update
        delta = stats.evicted_tokens - getattr(self, "_evicted_exported", 0)
        if delta > 0:
            m.inc("evicted_tokens", delta)
            self._evicted_exported = stats.evicted_tokens

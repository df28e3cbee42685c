"""Page-granular two-tier prefix cache: the simulated GPU radix cache plus the HiCache host pool.

One job: remember which prompt pages are resident on the device and/or the host and answer
"how much of this prompt is cached, and where" the way sglang's HiRadixCache does.

Model (one node per page of ``page_size`` tokens, keyed by its parent and its token ids):
- Device pool: ``device_tokens`` (``max_total_num_tokens``) shared by cached pages and the
  private (not yet cached) tokens that running requests reserved.  Host pool: ``host_tokens``.
- Matching walks the prompt page by page from the start: device hit, else host hit, else stop
  (hits are contiguous from the first token).  At most ``len(prompt) - 1`` tokens can match, as
  in sglang (the last token must be computed to get logits), then page-aligned.
- Hybrid (mamba) models: a match is only usable where a mamba state was checkpointed.  Like
  sglang 0.5.17's MambaRadixCache with the extra buffer, the state is tracked only at 64-token
  boundaries (``MAMBA_TRACK_INTERVAL``), and a request inserts its prompt only up to its last
  tracked boundary (``mamba_last_track_seqlen``).  So an 8100-token prompt is cached as 8064 and
  a repeat hits 8064, while an 8000-token prompt is cached as exactly 8000 and a repeat of it can
  use at most 7999 tokens: no checkpoint there, no hit at all -- what the H200 run showed.
- Eviction is LRU and leaf-first (a page is evicted from the device only when no page below it
  is on the device; deeper pages of a path are always "more recent" than their parents).
  HiCache off: an evicted page is gone.  ``write_through``: every inserted page is backed up to
  the host at once (costed), so eviction just drops the device copy.  ``write_back``: the page
  is backed up when it is evicted from the device.  ``write_through_selective`` behaves as
  ``write_through`` here (sglang backs up only pages hit at least once; the simulator does not
  model hit counts -- a documented simplification).  When the host pool is full, host-only
  leaves are evicted LRU; a page that cannot get a host slot stays device-only.
- Locked pages (a running request's matched prefix) are never evicted.
Mamba slot pools are not capacity-limited here; their bytes are costed on load-back.

Storage tier (L3, ``--hicache-storage-backend``): below the host pool, ``storage_tokens`` of
capacity, LRU.  A page is keyed there by a hash chained over its whole prefix (like sglang's
page hashes), so it outlives its node in the tree.  As in sglang's HiRadixCache, a page is
written to storage when its host backup lands (``write_through``: at insert; ``write_back``: at
device eviction), so a page evicted from the host is already on storage.  Matching continues
past the device and host pages into storage; :meth:`TwoTierCache.prefetch` brings those pages
into the host pool (as host pages, then loaded back like any host hit).  Hybrid models: no
storage matching (not modelled).
"""

from __future__ import annotations

import heapq
import itertools
from collections import OrderedDict
from dataclasses import dataclass, field

MAMBA_TRACK_INTERVAL = 64


@dataclass(eq=False, slots=True)
class Page:
    """One cached page; identity is the object (dict key lives in the cache)."""

    key: tuple
    parent: "Page | None"
    depth: int  # page index: covers tokens [depth*ps, (depth+1)*ps)
    on_device: bool = True
    on_host: bool = False
    kids: set = field(default_factory=set)
    dev_children: int = 0
    lock: int = 0
    access: int = 0
    ckpt: bool = False  # a mamba state is stored at the end of this page
    alive: bool = True
    chain: int = 0  # hash of the whole prefix up to and including this page (its storage key)


@dataclass
class Match:
    """Result of a prefix lookup: the matched pages, device ones first then host ones."""

    device: list[Page] = field(default_factory=list)
    host: list[Page] = field(default_factory=list)
    page_size: int = 1
    # storage-only pages past the host ones: (page index, chunk, chain hash); not in the tree
    storage: list[tuple[int, object, int]] = field(default_factory=list)

    @property
    def pages(self) -> list[Page]:
        return self.device + self.host

    @property
    def device_tokens(self) -> int:
        return len(self.device) * self.page_size

    @property
    def host_tokens(self) -> int:
        return len(self.host) * self.page_size

    @property
    def tokens(self) -> int:
        return self.device_tokens + self.host_tokens

    @property
    def storage_tokens(self) -> int:
        return len(self.storage) * self.page_size


def chain_hash(parent_chain: int, chunk: object) -> int:
    """A page's storage key: its content chained over every page before it."""
    return hash((parent_chain, chunk))


@dataclass
class CacheStats:
    """Cumulative movements, exported as sglang's counters."""

    evicted_tokens: int = 0  # device evictions
    host_evicted_tokens: int = 0
    backup_tokens: int = 0  # device -> host writes
    load_back_tokens: int = 0  # host -> device loads
    storage_written_tokens: int = 0  # host -> storage writes (sglang's backuped_tokens)
    storage_read_tokens: int = 0  # storage -> host prefetches (sglang's prefetched_tokens)
    storage_evicted_tokens: int = 0


class TwoTierCache:
    """Device + host page pools with sglang's matching and eviction rules."""

    def __init__(
        self,
        device_tokens: int,
        host_tokens: int,
        page_size: int = 1,
        write_policy: str = "write_through",
        hybrid: bool = False,
        enabled: bool = True,
        storage_tokens: int = 0,
    ) -> None:
        self.page_size = page_size
        self.storage_capacity = storage_tokens // page_size if host_tokens > 0 else 0
        # False: storage writes are acknowledged but never land (fault missing_storage_pages)
        self.storage_keeps_writes = True
        self._storage: OrderedDict[int, None] = OrderedDict()  # chain hash -> (), LRU first
        self.files = None  # harness.sim.storage_file.FileStorage: the tier in files that outlive the process
        self.device_capacity = device_tokens // page_size
        self.host_capacity = host_tokens // page_size
        self.hicache = host_tokens > 0
        self.write_policy = write_policy
        self.hybrid = hybrid
        self.enabled = enabled
        self.stats = CacheStats()
        self._seq = itertools.count()
        self.reset()

    # ------------------------------------------------------------------ state
    def reset(self) -> None:
        """Drop every page on the device and host tiers (``/flush_cache``; storage is kept, as
        sglang's file backend keeps its files)."""
        self._pages: dict[tuple, Page] = {}
        self.device_pages = 0
        self.host_pages = 0
        self.reserved_tokens = 0  # private tokens of running requests
        self._dev_heap: list[tuple[int, int, Page]] = []
        self._host_heap: list[tuple[int, int, Page]] = []
        self._clock = 0

    @property
    def device_free_tokens(self) -> int:
        return self.device_capacity * self.page_size - self.device_pages * self.page_size - self.reserved_tokens

    @property
    def device_used_tokens(self) -> int:
        return self.device_pages * self.page_size + self.reserved_tokens

    @property
    def host_used_tokens(self) -> int:
        return self.host_pages * self.page_size

    @property
    def host_capacity_tokens(self) -> int:
        return self.host_capacity * self.page_size

    @property
    def storage_used_tokens(self) -> int:
        return len(self._storage) * self.page_size

    # ------------------------------------------------------------------ storage
    def _store(self, node: Page) -> None:
        """The page's host backup landed: write it to storage (LRU; evicts the oldest page)."""
        if not self.storage_capacity:
            return
        self.stats.storage_written_tokens += self.page_size
        if not self.storage_keeps_writes:
            return
        if node.chain in self._storage:
            self._storage.move_to_end(node.chain)
            return
        while len(self._storage) >= self.storage_capacity:
            gone, _ = self._storage.popitem(last=False)
            self.stats.storage_evicted_tokens += self.page_size
            if self.files is not None:
                self.files.remove(gone)
        self._storage[node.chain] = None
        if self.files is not None:
            self.files.write(node.chain)

    def attach_files(self, files) -> int:
        """Keep the tier in ``files`` (a ``FileStorage``): the pages already there that this server
        would serve join the index (oldest first, within capacity). Returns how many."""
        self.files = files
        if not self.storage_capacity:
            return 0
        for chain in files.existing()[-self.storage_capacity :]:
            self._storage[chain] = None
        return len(self._storage)

    def prefetch(self, m: Match) -> list[Page]:
        """Bring ``m.storage`` pages into the host pool as host pages under the last matched page
        (locked, so nothing evicts them before the caller loads them back); appends them to
        ``m.host`` and stops at the first page that gets no host slot. Returns the new pages."""
        parent = m.pages[-1] if m.pages else None
        new: list[Page] = []
        for depth, chunk, chain in m.storage:
            if not self._host_slot():
                break
            key = (id(parent) if parent is not None else 0, chunk)
            node = Page(key=key, parent=parent, depth=depth, on_device=False, on_host=True, lock=1, chain=chain)
            self._pages[key] = node
            self.host_pages += 1
            if parent is not None:
                parent.kids.add(node)
            self._storage.move_to_end(chain)
            new.append(node)
            parent = node
        self.stats.storage_read_tokens += len(new) * self.page_size
        m.host.extend(new)
        m.storage = []
        return new

    # ------------------------------------------------------------------ lookup
    # Hot loops (a prompt is thousands of pages at page size 1) inline these helpers: the
    # simulator's own CPU time is time the cost model does not account for.
    def _chunks(self, tokens: list[int], n_pages: int) -> list:
        """The token content of each of the first ``n_pages`` pages (a page's key part)."""
        ps = self.page_size
        if ps == 1:
            return tokens[:n_pages]
        return [tuple(tokens[i * ps : (i + 1) * ps]) for i in range(n_pages)]

    def match(self, tokens: list[int]) -> Match:
        """Longest usable cached prefix of ``tokens`` (no state change)."""
        m = Match(page_size=self.page_size)
        if not self.enabled or len(tokens) < 2:
            return m
        max_pages = (len(tokens) - 1) // self.page_size
        get = self._pages.get
        pid = 0
        path: list[Page] = []
        for chunk in self._chunks(tokens, max_pages):
            node = get((pid, chunk))
            if node is None or not (node.on_device or node.on_host):
                break
            path.append(node)
            pid = id(node)
        if self.hybrid:
            last = -1
            for i, node in enumerate(path):
                if node.ckpt:
                    last = i
            path = path[: last + 1]
        for node in path:
            (m.device if node.on_device and not m.host else m.host).append(node)
        if self._storage and not self.hybrid and len(path) < max_pages:
            chain = path[-1].chain if path else 0
            for depth, chunk in enumerate(self._chunks(tokens, max_pages)[len(path) :], start=len(path)):
                chain = chain_hash(chain, chunk)
                if chain not in self._storage:
                    break
                m.storage.append((depth, chunk, chain))
        return m

    # ------------------------------------------------------------------ locking / LRU
    def _touch(self, pages: list[Page]) -> None:
        clock, seq, push = self._clock, self._seq, heapq.heappush
        dev_heap, host_heap = self._dev_heap, self._host_heap
        for node in pages:  # root-to-leaf order: deeper pages end up more recent
            clock += 1
            node.access = clock
            if node.lock == 0:  # _push, inlined
                if node.on_device:
                    if node.dev_children == 0:
                        push(dev_heap, (clock, next(seq), node))
                elif node.on_host and not node.kids:
                    push(host_heap, (clock, next(seq), node))
        self._clock = clock

    def _push(self, node: Page) -> None:
        if node.on_device and node.dev_children == 0 and node.lock == 0:
            heapq.heappush(self._dev_heap, (node.access, next(self._seq), node))
        if node.on_host and not node.on_device and not node.kids and node.lock == 0:
            heapq.heappush(self._host_heap, (node.access, next(self._seq), node))

    def lock(self, pages: list[Page]) -> None:
        for node in pages:
            node.lock += 1
        self._touch(pages)

    def unlock(self, pages: list[Page]) -> None:
        for node in pages:
            if node.lock > 0:
                node.lock -= 1
        self._touch(pages)

    # ------------------------------------------------------------------ eviction
    def _delete(self, node: Page) -> None:
        node.alive = False
        self._pages.pop(node.key, None)
        p = node.parent
        if p is not None:
            p.kids.discard(node)
            self._push(p)

    def _delete_subtree(self, node: Page) -> None:
        # a device page with no host copy but host-only descendants: they become unreachable
        for kid in list(node.kids):
            self._delete_subtree(kid)
        if node.on_host:
            node.on_host = False
            self.host_pages -= 1
            self.stats.host_evicted_tokens += self.page_size
        self._delete(node)

    def _evict_one_host(self) -> bool:
        while self._host_heap:
            access, _, node = heapq.heappop(self._host_heap)
            if (
                node.alive
                and node.access == access
                and node.on_host
                and not node.on_device
                and not node.kids
                and node.lock == 0
            ):
                node.on_host = False
                self.host_pages -= 1
                self.stats.host_evicted_tokens += self.page_size
                self._delete(node)
                return True
        return False

    def _host_slot(self) -> bool:
        """Make room for one page on the host; False when every host page is pinned."""
        if not self.hicache:
            return False
        while self.host_pages >= self.host_capacity:
            if not self._evict_one_host():
                return False
        return True

    def _evict_one_device(self) -> tuple[bool, int]:
        """Evict the LRU device leaf; returns (evicted, pages written to host)."""
        while self._dev_heap:
            access, _, node = heapq.heappop(self._dev_heap)
            if not (
                node.alive and node.access == access and node.on_device and node.dev_children == 0 and node.lock == 0
            ):
                continue
            written = 0
            # write_back backs up on eviction; any policy must keep a page whose host-only
            # descendants would otherwise be cut off from the root
            want_host = self.write_policy == "write_back" or bool(node.kids)
            if self.hicache and not node.on_host and want_host and self._host_slot():
                node.on_host = True
                self.host_pages += 1
                written = 1
                self._store(node)
            node.on_device = False
            self.device_pages -= 1
            self.stats.evicted_tokens += self.page_size
            if node.parent is not None:
                node.parent.dev_children -= 1
                self._push(node.parent)
            if node.on_host:
                self._push(node)
            else:
                self._delete_subtree(node)
            return True, written
        return False, 0

    def make_room(self, tokens: int) -> tuple[bool, int]:
        """Evict until ``tokens`` device tokens are free; returns (ok, pages backed up)."""
        written = 0
        missing = tokens - self.device_free_tokens  # each eviction frees one page
        evict = self._evict_one_device
        while missing > 0:
            ok, w = evict()
            written += w
            if not ok:
                return False, written
            missing -= self.page_size
        return True, written

    # ------------------------------------------------------------------ load / insert
    def load_back(self, pages: list[Page]) -> None:
        """Bring host-only pages back to the device (caller made room and holds locks)."""
        for node in pages:
            if node.on_device:
                continue
            node.on_device = True
            self.device_pages += 1
            if node.parent is not None:
                node.parent.dev_children += 1
        self.stats.load_back_tokens += len(pages) * self.page_size

    def insert(self, tokens: list[int], upto: int, ckpts: set[int] | None = None) -> tuple[list[Page], int]:
        """Cache ``tokens[:upto]`` (full pages only) on the device.

        The caller converts its reservation into these pages (it must release
        ``upto``-worth of reserved tokens first).  Returns (the inserted path, new pages
        written through to the host).
        """
        if not self.enabled:
            return [], 0
        ps = self.page_size
        n_pages = upto // ps
        pages = self._pages
        write_through = self.hicache and self.write_policy != "write_back"
        parent: Page | None = None
        pid = 0
        path: list[Page] = []
        written = 0
        free = self.device_free_tokens
        for i, chunk in enumerate(self._chunks(tokens, n_pages)):
            key = (pid, chunk)
            node = pages.get(key)
            if node is None:
                if free < ps:
                    if not self.make_room(ps)[0]:
                        break
                    free = self.device_free_tokens
                free -= ps
                node = Page(key=key, parent=parent, depth=i, chain=chain_hash(parent.chain if parent else 0, chunk))
                pages[key] = node
                self.device_pages += 1
                if parent is not None:
                    parent.kids.add(node)
                    parent.dev_children += 1
                if write_through and self._host_slot():
                    node.on_host = True
                    self.host_pages += 1
                    written += 1
                    self._store(node)
            elif not node.on_device:
                # host-only page recomputed by this request: it is on the device again
                if free < ps:
                    if not self.make_room(ps)[0]:
                        break
                    free = self.device_free_tokens
                free -= ps
                node.on_device = True
                self.device_pages += 1
                if parent is not None:
                    parent.dev_children += 1
            if ckpts and (i + 1) * ps in ckpts:
                node.ckpt = True
            path.append(node)
            parent, pid = node, id(node)
        self.stats.backup_tokens += written * self.page_size
        self._touch(path)
        return path, written

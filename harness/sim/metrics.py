"""sglang's Prometheus metrics, under sglang's names and labels, on a private registry.

One job: expose what ``/metrics`` of a real server exposes for the quantities the harness
samples.  Names and labels follow sglang's ``metrics_collector.py``: every series carries
``model_name``, ``engine_type``, ``tp_rank``, ``pp_rank``; ``cached_tokens_total`` adds
``cache_source`` (device|host|storage).  Labelled counters only appear after their first
increment, as on a real server (a missing counter reads as 0).  No ``_created`` series:
sglang runs prometheus_client in multiprocess mode, which has none.

With a storage backend, sglang's ``StorageMetricsCollector`` series too, under its own labels
(``storage_backend``, ``tp_rank``, ``dp_rank``): ``sglang:prefetched_tokens_total``,
``sglang:backuped_tokens_total``, the histograms ``sglang:prefetch_pgs`` / ``sglang:backup_pgs``
(pages per operation) and ``sglang:prefetch_bandwidth`` / ``sglang:backup_bandwidth`` (GB/s).
"""

from __future__ import annotations

import prometheus_client
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

prometheus_client.disable_created_metrics()

_TTFT_BUCKETS = (
    0.001,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    15.0,
    20.0,
    25.0,
    30.0,
    40.0,
    60.0,
    120.0,
    300.0,
)
_IO_PAGE_BUCKETS = (1, 5, 10, 50, 100)  # sglang's StorageMetricsCollector bucket_io
_BANDWIDTH_BUCKETS = (0.1, 0.5, 1, 5, 10, 50, 100)  # GB/s, its bucket_bandwidth
_LAT_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0)


class SimMetrics:
    """The collector; ``labels`` are fixed for the life of the server."""

    def __init__(self, model_name: str, storage_backend: str | None = None) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.base = {"model_name": model_name, "engine_type": "unified", "tp_rank": "0", "pp_rank": "0"}
        names = list(self.base)
        r = self.registry

        def counter(name: str, doc: str, extra: tuple[str, ...] = ()) -> Counter:
            return Counter(name, doc, names + list(extra), registry=r)

        def gauge(name: str, doc: str) -> Gauge:
            return Gauge(name, doc, names, registry=r, multiprocess_mode="mostrecent")

        self.prompt_tokens = counter("sglang:prompt_tokens_total", "Number of prefill tokens processed.")
        self.generation_tokens = counter("sglang:generation_tokens_total", "Number of generation tokens processed.")
        self.cached_tokens = counter(
            "sglang:cached_tokens_total",
            "Number of cached prompt tokens by source (device/host/storage).",
            ("cache_source",),
        )
        self.num_requests = counter("sglang:num_requests_total", "Number of requests processed.")
        self.evicted_tokens = counter("sglang:evicted_tokens_total", "Tokens evicted from device to host.")
        self.load_back_tokens = counter("sglang:load_back_tokens_total", "Tokens loaded back from host to device.")
        self.load_back_bytes = counter("sglang:load_back_bytes_total", "Bytes loaded back from host to device.")
        self.backup_tokens = counter("sglang:hicache_backup_tokens_total", "Tokens written from device to host.")
        self.backup_bytes = counter("sglang:hicache_backup_bytes_total", "Bytes written from device to host.")
        self.token_usage = gauge("sglang:token_usage", "The token usage.")
        self.num_used_tokens = gauge("sglang:num_used_tokens", "The number of used tokens.")
        self.cache_hit_rate = gauge("sglang:cache_hit_rate", "The prefix cache hit rate.")
        self.num_running = gauge("sglang:num_running_reqs", "The number of running requests.")
        self.num_queue = gauge("sglang:num_queue_reqs", "The number of requests in the waiting queue.")
        self.host_used = gauge("sglang:hicache_host_used_tokens", "HiCache host pool used tokens.")
        self.host_total = gauge("sglang:hicache_host_total_tokens", "HiCache host pool total tokens.")
        self.simulated_energy = counter(
            "sglang:simulated_energy_joules_total",
            "SIMULATED GPU energy (J): idle and busy power of a pretend GPU, not a measurement.",
        )
        self.gen_throughput = gauge("sglang:gen_throughput", "The generation throughput (token/s).")
        self.ttft = Histogram(
            "sglang:time_to_first_token_seconds",
            "Histogram of time to first token in seconds.",
            names,
            buckets=_TTFT_BUCKETS,
            registry=r,
        )
        self.e2e = Histogram(
            "sglang:e2e_request_latency_seconds",
            "Histogram of End-to-end request latency in seconds",
            names,
            buckets=_TTFT_BUCKETS,
            registry=r,
        )
        self.load_back_duration = Histogram(
            "sglang:load_back_duration_seconds",
            "Time spent loading KV back from host (seconds).",
            names,
            buckets=_LAT_BUCKETS,
            registry=r,
        )

        self.storage_labels = {"storage_backend": storage_backend or "", "tp_rank": "0", "dp_rank": "0"}
        self.storage = storage_backend is not None
        if self.storage:
            snames = list(self.storage_labels)
            self.prefetched_tokens = Counter(
                "sglang:prefetched_tokens_total", "Number of prefetched prompt tokens.", snames, registry=r
            )
            self.backuped_tokens = Counter(
                "sglang:backuped_tokens_total", "Number of backuped tokens.", snames, registry=r
            )
            self.prefetch_pgs = Histogram(
                "sglang:prefetch_pgs", "Number of prefetch pages.", snames, buckets=_IO_PAGE_BUCKETS, registry=r
            )
            self.backup_pgs = Histogram(
                "sglang:backup_pgs", "Number of backup pages.", snames, buckets=_IO_PAGE_BUCKETS, registry=r
            )
            self.prefetch_bandwidth = Histogram(
                "sglang:prefetch_bandwidth",
                "Prefetch bandwidth (GB/s).",
                snames,
                buckets=_BANDWIDTH_BUCKETS,
                registry=r,
            )
            self.backup_bandwidth = Histogram(
                "sglang:backup_bandwidth", "Backup bandwidth (GB/s).", snames, buckets=_BANDWIDTH_BUCKETS, registry=r
            )

    def storage_prefetched(self, tokens: int, pages: int, nbytes: int, seconds: float) -> None:
        """One prefetch from storage: tokens, pages and its bandwidth, as sglang records them."""
        if self.storage:
            self._storage_io(
                self.prefetched_tokens, self.prefetch_pgs, self.prefetch_bandwidth, tokens, pages, nbytes, seconds
            )

    def storage_backed_up(self, tokens: int, pages: int, nbytes: int, seconds: float) -> None:
        """One backup to storage (see ``storage_prefetched``)."""
        if self.storage:
            self._storage_io(
                self.backuped_tokens, self.backup_pgs, self.backup_bandwidth, tokens, pages, nbytes, seconds
            )

    def _storage_io(self, tokens_c, pages_h, bw_h, tokens: int, pages: int, nbytes: int, seconds: float) -> None:
        if tokens <= 0:
            return
        lab = self.storage_labels
        tokens_c.labels(**lab).inc(tokens)
        pages_h.labels(**lab).observe(pages)
        if seconds > 0:
            bw_h.labels(**lab).observe(nbytes / seconds / 1e9)

    def __getitem__(self, name: str):  # small helper: m["prompt_tokens"] -> labelled child
        return getattr(self, name).labels(**self.base)

    def cached(self, source: str, n: int) -> None:
        if n > 0:
            self.cached_tokens.labels(**self.base, cache_source=source).inc(n)

    def inc(self, name: str, n: float) -> None:
        if n > 0:
            self[name].inc(n)

    def render(self) -> bytes:
        return generate_latest(self.registry)

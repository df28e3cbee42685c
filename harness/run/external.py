"""``backend: external``: measuring sglang servers somebody else started (``--url``).

One job: before any request, find out what each variant's URL is — an sglang server (else the
run is refused with one line naming the URL and what was seen), its own arguments and version
(``/get_server_info``), HiCache on or off *as the server says* (never as declared), whether its
``/metrics`` can be sampled, and whether it runs on this machine (host-memory samples are this
machine's; for a remote server they say nothing of the server's host). Parity needs one OFF and at
least one ON server among them. The runner then runs the workloads on each with no lifecycle: no
start or stop, no preflight, no cooldown, no orphan handling (harness/run/external_variant.py).
"""

from __future__ import annotations

import ipaddress
import os
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import httpx
import psutil

from harness.core.errors import BadInput
from harness.scenario.models import Variant
from harness.scenario.server_models import HiCache
from harness.server.identify import NotSglangError, identify_sglang
from harness.server.info import (
    MAX_INFO_BYTES,
    HiCacheSettings,
    ServerAnswerError,
    ServerInfo,
    read_limited,
    request_headers,
    use_api_key,
)
from harness.server.metrics_page import checked_metric_values, parse_metrics_text

if TYPE_CHECKING:
    from harness.scenario.models import Scenario

THIS_MACHINE = "this machine"
SERVER_HOST = "the server's host"
# Per-request state of the server, not its configuration: kept in server_info.json, not the manifest.
_NOT_ARGS = ("internal_states",)


class EndpointRefused(BadInput, ValueError):
    """A variant's URL is not a usable sglang server, or the servers cannot give what the scenario
    asks (parity without an OFF and an ON server). A ValueError: bad input, exit 2."""


@dataclass(frozen=True)
class Endpoint:
    """What the harness learnt about one variant's running server before sending anything."""

    variant: str
    url: str
    identified_by: str  # /get_server_info, /server_info or /v1/models
    info: ServerInfo | None  # None: only /v1/models answered (arguments unknown)
    metrics_problem: str | None  # None: /metrics answers with sglang: series
    local: bool  # the URL's host is this machine
    api_key_env: str | None = None  # the variable whose API key every request carries (never the key)

    @property
    def hicache(self) -> HiCache | None:
        return hicache_block(self.info.hicache) if self.info is not None else None

    @property
    def hicache_known(self) -> bool:
        return self.info is not None and self.info.hicache.enabled is not None

    @property
    def host_sampling(self) -> str:
        """Whose host memory the samples show."""
        return SERVER_HOST if self.local else THIS_MACHINE

    def describe_hicache(self) -> str:
        if not self.hicache_known:
            return "HiCache unknown"
        hc = self.info.hicache
        if not hc.enabled:
            return "HiCache off"
        parts = [f"ratio {hc.ratio:g}" if hc.ratio is not None else None, hc.mem_layout, hc.write_policy]
        return "HiCache on" + (f" ({', '.join(p for p in parts if p)})" if any(parts) else "")

    def manifest_entry(self, redact: Callable[[Any], Any]) -> dict[str, Any]:
        """The manifest's ``variants[].server`` of an external variant: the URL, how it was
        recognised, the server's version and own arguments (through ``redact``: the run's
        ``fingerprint.scrub_json``), HiCache as the server reports it, /metrics and whose host
        memory is sampled."""
        args = None
        if self.info is not None:
            args = redact({k: v for k, v in self.info.raw.items() if k not in _NOT_ARGS})
        return {
            "url": self.url,
            "identified_by": self.identified_by,
            "version": self.info.version if self.info is not None else None,
            "args": args,
            "hicache_from": "server_args" if self.hicache_known else "unknown",
            "metrics": "available" if self.metrics_problem is None else f"unavailable: {self.metrics_problem}",
            "local": self.local,
            "host_sampling": self.host_sampling,
            "api_key_from_env": self.api_key_env,  # that a key was sent, and from where; never the key
        }


def hicache_block(s: HiCacheSettings) -> HiCache | None:
    """The server's resolved HiCache arguments as a variant's ``hicache`` block (None: off or
    unknown). Built without validation: a newer sglang may report a layout this harness does not
    list, and the block only describes the server, it launches nothing."""
    if not s.enabled:
        return None
    return HiCache.model_construct(
        ratio=s.ratio,
        size_gb=s.size_gb or None,  # sglang's hicache_size 0 means "use the ratio"
        mem_layout=s.mem_layout,
        write_policy=s.write_policy,
        io_backend=s.io_backend,
        storage_backend=s.storage_backend,
    )


def url_is_local(url: str) -> bool:
    """Whether ``url``'s host is this machine: a loopback address, or a name or address of one of
    its interfaces. A name that does not resolve is not local."""
    host = urlsplit(url).hostname or ""
    try:
        addrs = {ipaddress.ip_address(host.strip("[]"))}
    except ValueError:
        if host.rstrip(".").lower() in ("localhost", socket.gethostname().lower()):
            return True
        try:
            addrs = {ipaddress.ip_address(ai[4][0].split("%")[0]) for ai in socket.getaddrinfo(host, None)}
        except (OSError, ValueError):
            return False
    if addrs and all(a.is_loopback for a in addrs):
        return True
    mine = set()
    for nics in psutil.net_if_addrs().values():
        for a in nics:
            try:
                mine.add(ipaddress.ip_address(a.address.split("%")[0]))
            except ValueError:
                continue
    return bool(addrs & mine)


def metrics_problem(url: str, timeout_s: float = 5.0) -> str | None:
    """None when ``url/metrics`` answers with sglang's Prometheus series, else why not (sglang
    serves them only with ``--enable-metrics``)."""
    try:
        with httpx.Client(timeout=timeout_s, trust_env=False, headers=request_headers(url)) as client:
            with client.stream("GET", url.rstrip("/") + "/metrics") as r:
                if r.status_code != 200:
                    return f"/metrics answered {r.status_code} (the server needs --enable-metrics)"
                body = read_limited(r, MAX_INFO_BYTES * 2, deadline_s=timeout_s)
        checked_metric_values(parse_metrics_text(body.decode("utf-8")))
    except (httpx.HTTPError, ServerAnswerError, ValueError, UnicodeDecodeError) as exc:
        return f"/metrics: {type(exc).__name__}: {str(exc)[:120]}"
    return None


def api_key(scenario: Scenario, environ: Mapping[str, str] | None = None) -> str | None:
    """The servers' API key from the variable ``server.api_key_env`` names (None: no key asked);
    EndpointRefused, one line, when that variable is unset or empty."""
    name = scenario.server.api_key_env
    if name is None:
        return None
    key = (os.environ if environ is None else environ).get(name, "")
    if not key:
        raise EndpointRefused(
            f"server.api_key_env: environment variable {name} is not set (it must hold the servers' --api-key)"
        )
    return key


def probe_endpoint(variant: str, url: str, timeout_s: float = 10.0, api_key_env: str | None = None) -> Endpoint:
    """One variant's server, asked before any request; EndpointRefused (one line: the variant,
    the URL and what was seen) when it is not sglang."""
    try:
        found = identify_sglang(url, timeout_s=timeout_s)
    except NotSglangError as exc:
        raise EndpointRefused(f"variant {variant}: {url} is not an sglang server: {exc.reason}") from None
    return Endpoint(variant, url, found.path, found.info, metrics_problem(url), url_is_local(url), api_key_env)


@dataclass
class AttachedRun:
    """The probed endpoints of a run, and its variants with HiCache as each server reports it."""

    endpoints: dict[str, Endpoint]
    variants: list[Variant]
    parity_skipped: str | None = None  # why parity is not asked (no OFF and ON pair of servers)

    def notes(self) -> list[str]:
        """One console line per endpoint: what it is, and what will not be measured; then why
        parity is not asked, where it is not."""
        out = [self.parity_skipped] if self.parity_skipped else []
        for e in self.endpoints.values():
            version = e.info.version if e.info is not None and e.info.version else "version unknown"
            words = [f"{e.variant}: {e.url} is sglang {version}, {e.describe_hicache()}"]
            if e.info is None:
                words.append(f"only {e.identified_by} answered: its arguments are not recorded")
            if e.metrics_problem is not None:
                words.append(f"no /metrics sampling ({e.metrics_problem})")
            if not e.local:
                words.append("host memory is sampled on this machine, not the server's host")
            out.append("; ".join(words))
        return out


def attach(scenario: Scenario, variants: list[Variant], timeout_s: float = 10.0) -> AttachedRun:
    """Probe each external variant's server (in order; the first refusal raises), set each
    variant's ``hicache`` from the server's own arguments and, when the scenario asks for parity,
    its OFF baseline: ``quality.baseline_variant`` if given (its server must have HiCache off),
    else the first server with HiCache off; parity needs one OFF and at least one ON server."""
    key = api_key(scenario)
    if key is not None:  # before the first request: the probes carry it too
        for v in variants:
            use_api_key(str(v.url), key)
    name = scenario.server.api_key_env
    endpoints = {v.name: probe_endpoint(v.name, str(v.url), timeout_s, name) for v in variants}
    attached = []
    for v in variants:
        e = endpoints[v.name]
        update: dict[str, Any] = {"hicache": e.hicache}
        served = e.info.raw.get("model_path") if e.info is not None else None
        if not v.model_path and isinstance(served, str) and e.local:
            update["model_path"] = served  # the same machine: its config.json sizes token-id prompts
        attached.append(v.model_copy(update=update))
    skipped = _resolve_baseline(scenario, endpoints) if scenario.quality.enabled else None
    return AttachedRun(endpoints, attached, skipped)


def _resolve_baseline(scenario: Scenario, endpoints: dict[str, Endpoint]) -> str | None:
    """Pick the parity baseline (``quality.baseline_variant``); without one OFF and one ON server,
    turn parity off and say why (the returned line)."""

    def listing() -> str:
        return ", ".join(f"{e.variant}={e.url} ({e.describe_hicache()})" for e in endpoints.values())

    unknown = [e for e in endpoints.values() if not e.hicache_known]
    if unknown:
        raise EndpointRefused(
            f"quality parity needs HiCache on/off of every server, and {', '.join(e.url for e in unknown)} "
            "does not report it (no /get_server_info)"
        )
    q = scenario.quality
    if q.baseline_variant is not None and q.baseline_variant not in endpoints:
        return None  # this run (--only) does not run the baseline: no parity here, as with launched servers
    if q.baseline_variant is not None:
        if endpoints[q.baseline_variant].hicache is not None:
            raise EndpointRefused(
                f"quality.baseline_variant {q.baseline_variant} must be a server with HiCache off; its "
                f"server reports HiCache on: {listing()}"
            )
    offs = [e for e in endpoints.values() if e.hicache is None]
    ons = [e for e in endpoints.values() if e.hicache is not None]
    if not offs or not ons:  # the workloads still run; parity is not asked (one line says why)
        q.enabled = False
        return f"no quality parity: it needs one server with HiCache off and one with it on; got {listing()}"
    if q.baseline_variant is None:
        q.baseline_variant = offs[0].variant
    return None

"""The simulator's faults: one table, and the parser of ``--sim-fault NAME[=ARG]``.

One job: declare each fault once -- its name, its argument and what it does -- so that the
simulator's command line, its server and engine, docs/simulator.md (checked by a test) and the
scenario validator all read the same declaration.  Adding a fault means one member of
:class:`Fault` plus its behaviour where it acts (``server.py``, ``engine.py`` or ``fault_effects.py``) and a test.

A leaf on purpose: it imports nothing from the rest of harness and nothing heavy, because the
scenario validator imports it (through :func:`fault_problem`) on every ``harness validate``.
"""

from __future__ import annotations

import difflib
import math
from enum import Enum, unique

# int for a request number, float for seconds, factors, shares and rates
FaultArg = int | float


class ArgType(Enum):
    """What may follow ``NAME=``; the value is how messages and docs/simulator.md write it.
    A fault that takes an argument always requires it: none has a useful default."""

    NONE = "none"
    INT_FROM_1 = "int >= 1"
    SECONDS = "seconds >= 0"
    FACTOR = "number >= 1"  # a cost multiplier
    SHARE = "number in (0, 1]"  # a fraction of something kept
    RATE = "number >= 0"  # a growth per request


@unique  # members with equal values would silently become aliases of one fault
class Fault(Enum):
    """The table: one member per fault, named exactly as written after ``--sim-fault``."""

    crash_at_request = (
        ArgType.INT_FROM_1,
        (
            "the N-th request (from 1; health checks and warm-up excluded) prints sglang's "
            "`illegal memory access` traceback when the scheduler picks it up, and the server exits 1"
        ),
    )
    hang_at_request = (
        ArgType.INT_FROM_1,
        (
            "the N-th request (from 1; health checks and warm-up excluded) deadlocks the scheduler when "
            "it picks it up: no request makes progress again, `/health` still answers 200, "
            "`/health_generate` never answers; the process stays alive and stops on SIGTERM"
        ),
    )
    cuda_fault_at_startup = (
        ArgType.NONE,
        "prints sglang's `illegal memory access` traceback during start-up and exits 1",
    )
    hang_at_startup = (ArgType.NONE, "start-up never finishes: never binds HTTP, never ready, still killable")
    exit_before_ready = (ArgType.SECONDS, "exits with code 0 after S seconds of start-up, before ready")
    ignore_sigterm = (ArgType.NONE, "ignores SIGTERM (SIGKILL still stops it)")
    spawn_child = (ArgType.NONE, "the launched process forks the real server into its own session and exits 0 at once")
    die_after_idle = (ArgType.SECONDS, "exits 1 S seconds after its last response (health checks are not responses)")
    corrupt_host_load = (
        ArgType.NONE,
        (
            "requests with host-tier hits get a first token outside the true top-k, "
            "so their outputs diverge from token 0"
        ),
    )
    corrupt_storage = (
        ArgType.NONE,
        (
            "requests with storage-tier hits (pages prefetched from `--hicache-storage-backend`) get a "
            "first token outside the true top-k, so their outputs diverge from token 0"
        ),
    )
    missing_storage_pages = (
        ArgType.NONE,
        (
            "writes to the storage tier are acknowledged (and counted in `sglang:backuped_tokens_total`) "
            "but never land: every storage lookup misses, the prefix is recomputed, answers stay right"
        ),
    )
    reject_requests = (
        ArgType.INT_FROM_1,
        (
            "every /generate and /v1/completions request is answered with HTTP status N and an error "
            "body, as sglang does for a prompt longer than its context (400)"
        ),
    )
    slow_host_load = (
        ArgType.INT_FROM_1,
        "host-tier load-back takes N times as long: the cost model's host-to-device bandwidth divided by N",
    )
    host_register_fails_at_chunk = (
        ArgType.INT_FROM_1,
        (
            "the KV host pool's N-th `cudaHostRegister` chunk (`SGLANG_HICACHE_HOST_REGISTER_CHUNK_GB`, "
            "default 256, aligned down to whole pages; sglang PR #36798) fails with `rc=1, invalid argument`: "
            "the chunks before it are rolled back, sglang's `RuntimeError` is printed and the server exits "
            "(seed 002); a pool of fewer chunks registers fine"
        ),
    )
    elastic_kv_pool = (
        ArgType.INT_FROM_1,
        (
            "with `--sim-host-split proportional`, the KV device pool reports N times its bytes to the "
            "split of `--hicache-size`, as kvcached's elastic pool reports its whole virtual reservation "
            "(seed 004): the mamba host pool gets far fewer slots"
        ),
    )
    slow_prefill = (
        ArgType.FACTOR,
        "every prefill batch takes F times as long (the cost model's prefill time multiplied by F): a slower build",
    )
    slow_decode = (
        ArgType.FACTOR,
        "every decode step takes F times as long (the cost model's step time multiplied by F): a slower decode kernel",
    )
    slow_when_concurrent = (
        ArgType.FACTOR,
        (
            "a batch of more than one request (a prefill batch with several new sequences, a decode step "
            "of several running requests) takes F times as long; one request alone runs at full speed"
        ),
    )
    stall_every = (
        ArgType.INT_FROM_1,
        (
            "every N-th request (from 1; health checks and warm-up excluded) stalls: the prefill batch "
            "that computes its first token takes twice as long (a tail, the median unchanged)"
        ),
    )
    slowdown_per_request = (
        ArgType.RATE,
        (
            "the server slows down over its life: after n requests (health checks and warm-up excluded) "
            "every batch takes 1 + R x n times as long"
        ),
    )
    leak_per_request = (
        ArgType.RATE,
        (
            "every request (health checks and warm-up excluded) keeps R KiB of host memory, written and "
            "never freed: the server's RSS grows by R KiB a request for as long as it serves (a soak's LEAK)"
        ),
    )
    mamba_states_at_most = (
        ArgType.INT_FROM_1,
        (
            "a hybrid model keeps Mamba states for at most N cached prompts (least recently inserted "
            "dropped first), whatever `--max-mamba-cache-size` and the pools it reports say: a prompt "
            "whose state was dropped matches nothing usable and is recomputed (a Mamba pool too small)"
        ),
    )
    slow_page_first_direct = (
        ArgType.NONE,
        (
            "the `page_first_direct` layout (asked for, or `page_first` + `--hicache-io-backend direct`, "
            "which the simulator switches as sglang does) loads back at 2.6 % of the pretend host's pinned "
            "H2D (1.46 of 55.4 GB/s: sglang 0.5.17's one copy per token page per layer, measured on the "
            "H200); other layouts are untouched"
        ),
    )
    declined_host_load = (
        ArgType.NONE,
        (
            "a prefix match's host pages are reported (`cached_tokens_details.host`) but not loaded back: "
            "recomputed, as sglang 0.5.17 reports a declined `load_back` (host_hit_length is reported "
            "whatever `HiRadixCache.load_back` returned); `cached_tokens` counts only the device pages, "
            "the device share reads max(0, device - host), no load-back counter moves, and the server "
            "logs sglang's `load_back: FAILED to load N tokens for node M even after eviction` line"
        ),
    )
    partial_host_hits = (
        ArgType.SHARE,
        (
            "the host tier serves only the first S of the pages a prefix match finds there (rounded down "
            "to whole pages; on a hybrid model back to the last mamba checkpoint); the rest is recomputed, "
            "answers stay right"
        ),
    )
    late_token_flips = (
        ArgType.INT_FROM_1,
        (
            "requests with host-tier hits get, from output position 32 on, about one token in N replaced by "
            "one outside the true top-k (seeded by the sequence: the same prompt flips the same positions)"
        ),
    )
    near_tie_flips = (
        ArgType.NONE,
        (
            "without `--enable-deterministic-inference`, requests with a cache hit get seeded "
            "N(0, 0.06) logprob noise, so near-ties flip about half the time, like a real server's "
            "nondeterminism"
        ),
    )

    def __init__(self, arg: ArgType, does: str) -> None:
        self.arg = arg
        self.does = does

    @property
    def usage(self) -> str:
        """How the switch is written: ``ignore_sigterm``, ``crash_at_request=<int >= 1>``."""
        return self.name if self.arg is ArgType.NONE else f"{self.name}=<{self.arg.value}>"


class FaultError(ValueError):
    """A ``NAME[=ARG]`` that names no fault or gives it a wrong argument; the text is for people."""


def parse_fault(text: str) -> tuple[Fault, FaultArg | None]:
    """``"crash_at_request=3"`` -> ``(Fault.crash_at_request, 3)``, ``"ignore_sigterm"`` ->
    ``(Fault.ignore_sigterm, None)``; raises :class:`FaultError` for anything else."""
    name, equals, arg_text = text.partition("=")
    name = name.strip()
    try:
        fault = Fault[name]
    except KeyError:
        raise FaultError(_unknown_message(name)) from None
    if fault.arg is ArgType.NONE:
        if equals:
            raise FaultError(f"fault {name} takes no argument, got {text!r}")
        return fault, None
    if not arg_text:
        raise FaultError(f"fault {name} needs an argument: {fault.usage}")
    return fault, _parse_arg(fault, arg_text)


def fault_problem(text: str) -> str | None:
    """Why ``text`` is not a valid ``NAME[=ARG]`` fault (unknown name with a did-you-mean, missing
    or bad argument), as one line for people; None when it is valid."""
    try:
        parse_fault(text)
    except FaultError as exc:
        return str(exc)
    return None


def _unknown_message(name: str) -> str:
    names = [f.name for f in Fault]
    close = difflib.get_close_matches(name, names, n=1)
    hint = f", did you mean {close[0]!r}?" if close else ""
    return f"unknown fault {name!r}{hint} (known: {', '.join(names)})"


def _parse_arg(fault: Fault, arg_text: str) -> FaultArg:
    problem = f"fault {fault.name} wants {fault.arg.value} as its argument, got {arg_text!r}"
    if fault.arg is ArgType.INT_FROM_1:
        try:
            count = int(arg_text)
        except ValueError:
            raise FaultError(problem) from None
        if count < 1:  # requests count from 1: 0 would never fire
            raise FaultError(problem)
        return count
    try:
        number = float(arg_text)
    except ValueError:
        raise FaultError(problem) from None
    ok = {
        ArgType.SECONDS: lambda x: x >= 0,
        ArgType.RATE: lambda x: x >= 0,
        ArgType.FACTOR: lambda x: x >= 1,
        ArgType.SHARE: lambda x: 0 < x <= 1,
    }[fault.arg]
    if not (math.isfinite(number) and ok(number)):
        raise FaultError(problem)
    return number

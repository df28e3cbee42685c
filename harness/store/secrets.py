"""Secrets: one rule for what is a secret, one redactor for every file a run writes.

A value is secret when it sits under a credential-looking name: an environment variable, a
command-line flag (``--api-key``) or a YAML key (``hf_token:``). The redactor learns the secret
*values* of a run once — from the scenario's parsed YAML, the variants' merged args and env, the
harness's own argv and environment — and then replaces every occurrence of each of them in any
text or JSON-ready object. Replacing known values (not pattern-matching text) holds for every YAML
shape (flow maps, block scalars, quoted keys) and for what other programs print (sglang logs its
``server_args`` including ``api_key``), and costs linear time on any input.
"""

from __future__ import annotations

import fnmatch
import hashlib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

REDACTED = "***"
# Names of credentials, matched on the name with '-' read as '_' and case ignored.
# TOKEN and KEY only at the end (HF_TOKEN, api-key; not max_total_tokens, eos_token_id, key_len),
# and not after PER (kv_bytes_per_token, a size sglang's /get_server_info reports: scrubbing its
# number would garble every text of a run).
_SECRET_NAME = re.compile(
    r"((^|_)(?<!PER_)(TOKEN|KEY|APIKEY)$)|((^|_)(SECRETS?|PASSWORD|PASSWD|CREDENTIALS?|AUTH|AUTHORIZATION|COOKIE)($|_))",
    re.IGNORECASE,
)
# Shorter strings are not treated as secrets to scrub from free text ("1", "true" would
# otherwise vanish from every log); they are still replaced under a secret name.
MIN_SCRUB_LENGTH = 4


# Scenario ``env:`` names whose values are kept as written in the manifest and the dry run: the
# server's tuning knobs. Any other name's value is replaced by `hidden_value` (a MYSQL_PWD or a
# *_TOKEN_FOLDED is no knob), and learnt as a secret value to scrub from every text.
HARMLESS_ENV = (
    "SGLANG_*",
    "CUDA_*",
    "NCCL_*",
    "NVIDIA_*",
    "TORCH_*",
    "PYTORCH_*",
    "GLOO_*",
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "TOKENIZERS_PARALLELISM",
    "HF_HUB_OFFLINE",
    "HF_HUB_ENABLE_HF_TRANSFER",
    "TRANSFORMERS_OFFLINE",
    "KVCACHED_*",
    "HARNESS_*",
    # how a build is chosen (the patched copy first on the path) and the patched builds' own
    # switches (scenarios/gpu/make_broken_hicache.sh): what the dry run must show to be checked
    "PYTHONPATH",
    "HICACHE_*",
)


def is_harmless_env(name: str) -> bool:
    """A tuning variable whose value may be recorded (`HARMLESS_ENV`, and no credential name)."""
    return not is_secret_name(name) and any(fnmatch.fnmatchcase(name, pat) for pat in HARMLESS_ENV)


def hidden_value(value: str) -> str:
    """What a hidden env value is recorded as: ``***`` and a short hash (two runs can be told
    apart or alike without the value)."""
    return f"{REDACTED} sha256:{hashlib.sha256(value.encode('utf-8', 'surrogatepass')).hexdigest()[:12]}"


# Values the harness learnt as secret this process (the servers' API key, the run's redactor's
# values): scrubbed from whatever a server sends back before it enters a record (`scrub`).
_KNOWN: set[str] = set()


def remember_secret(*values: str) -> None:
    """Scrub these values from every server-sent text from now on (`scrub`)."""
    _KNOWN.update(v for v in values if isinstance(v, str) and len(v) >= MIN_SCRUB_LENGTH)


def scrub(text: str) -> str:
    """``text`` with every remembered secret value replaced by ``***`` (longest first); the text
    itself when none is known (one set test on the hot path)."""
    if not _KNOWN:
        return text
    for v in sorted(_KNOWN, key=len, reverse=True):
        if v in text:
            text = text.replace(v, REDACTED)
    return text


def is_secret_name(name: str) -> bool:
    """True for credential-looking names: HF_TOKEN, --api-key, OPENAI_API_KEY, db_password, ..."""
    return bool(_SECRET_NAME.search(str(name).lstrip("-").replace("-", "_").replace(".", "_")))


def secret_values_in(obj: Any) -> set[str]:
    """Every string value under a secret key anywhere in a parsed YAML/JSON tree; a secret flag's
    value in an argv-like list (``["--api-key", "v"]``, ``"--api-key=v"``) too."""
    found: set[str] = set()

    def walk(node: Any, secret: bool) -> None:
        if isinstance(node, Mapping):  # a nested block is judged by its own keys
            found.update(secret_argv_values(str(k) for k in node))  # args: {--api-key=v: true}
            for k, v in node.items():
                walk(v, is_secret_name(str(k)))
        elif isinstance(node, (list, tuple)):
            found.update(secret_argv_values([x for x in node if isinstance(x, str)]))
            for x in node:
                walk(x, secret)
        elif secret and node is not None and not isinstance(node, bool):
            found.add(str(node))
        elif isinstance(node, str) and " --" in f" {node}":  # a one-string command line (extra_args)
            found.update(secret_argv_values(node.split()))

    walk(obj, False)
    return found


def secret_argv_values(argv: Iterable[str]) -> set[str]:
    args = list(argv)
    out: set[str] = set()
    for i, a in enumerate(args):
        if not a.startswith("--"):
            continue
        flag, eq, value = a.partition("=")
        if not is_secret_name(flag):
            continue
        if eq:
            out.add(value)
        elif i + 1 < len(args) and not args[i + 1].startswith("--"):
            out.add(args[i + 1])
    return out


@dataclass
class Redactor:
    """Replaces a run's known secret values, and values under secret names, everywhere."""

    values: set[str] = field(default_factory=set)

    def learn(self, *sources: Any) -> Redactor:
        """Add the secret values found in each source (a parsed tree, an env mapping, an argv)."""
        for s in sources:
            self.values |= {v for v in secret_values_in(s) if v and v != REDACTED}
        remember_secret(*self.values)
        return self

    def learn_env(self, env: Mapping[str, str]) -> Redactor:
        """Learn the values of a scenario's env that are not harmless tuning (`is_harmless_env`)."""
        self.values |= {str(v) for k, v in env.items() if not is_harmless_env(str(k)) and v}
        remember_secret(*self.values)
        return self

    def text(self, s: str) -> str:
        """``s`` with every known secret value (longest first) replaced by ``***``."""
        for v in sorted((v for v in self.values if len(v) >= MIN_SCRUB_LENGTH), key=len, reverse=True):
            if v in s:
                s = s.replace(v, REDACTED)
        return s

    def obj(self, node: Any) -> Any:
        """A JSON-ready tree with values under secret names and known secret values replaced."""
        if isinstance(node, Mapping):
            return {
                k: (REDACTED if is_secret_name(str(k)) and node_is_value(v) else self.obj(v)) for k, v in node.items()
            }
        if isinstance(node, list):
            return self.argv(node) if all(isinstance(x, str) for x in node) else [self.obj(x) for x in node]
        if isinstance(node, tuple):
            return tuple(self.obj(list(node)))
        if isinstance(node, str):
            return self.text(node)
        return node

    def argv(self, argv: Iterable[str]) -> list[str]:
        """A command line with secret flags' values hidden (and known values scrubbed)."""
        out = [self.text(a) for a in argv]
        for i, a in enumerate(out):
            if not a.startswith("--"):
                continue
            flag, eq, _ = a.partition("=")
            if is_secret_name(flag):
                if eq:
                    out[i] = f"{flag}={REDACTED}"
                elif i + 1 < len(out) and not out[i + 1].startswith("--"):
                    out[i + 1] = REDACTED
        return out

    def env(self, env: Mapping[str, str]) -> dict[str, str]:
        return {k: (REDACTED if is_secret_name(k) else self.text(str(v))) for k, v in env.items()}

    def scenario_env(self, env: Mapping[str, str]) -> dict[str, str]:
        """A scenario's env additions as recorded: credential names ``***``, harmless tuning
        values kept (scrubbed), every other value replaced by `hidden_value`."""
        out = {}
        for k, v in env.items():
            if is_secret_name(str(k)):
                out[k] = REDACTED  # a credential by its name, as everywhere
            elif is_harmless_env(str(k)):
                out[k] = self.text(str(v))
            else:
                out[k] = hidden_value(str(v))
        return out


def node_is_value(v: Any) -> bool:
    """A scalar (what a secret name's value is); a nested block under a secret-looking name is
    walked instead (``auth: {mode: none}`` keeps its structure)."""
    return not isinstance(v, (Mapping, list, tuple))

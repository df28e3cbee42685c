"""What a run says about itself before its first variant: each variant's launch (argv and env,
secrets redacted; ``harness run --dry-run``), and the run's manifest.json (the scenario, the host,
the builds, the servers an external run attached to). Every secret the run knows is redacted.
"""

from __future__ import annotations

import functools
import os
import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from harness import __version__
from harness.core.yaml_lines import YamlLoadError, load_yaml_text
from harness.host import fingerprint
from harness.run import builds, external, ratio_boundary
from harness.run.launch import launch_spec
from harness.scenario import scenario_hash, variant_config_hash
from harness.server.client import client_stack
from harness.sim.cli import unmodelled_flags
from harness.store import results
from harness.store.secrets import MIN_SCRUB_LENGTH, Redactor, remember_secret

if TYPE_CHECKING:
    from harness.scenario.models import Scenario


def describe_launch(scenario: Scenario, variant, port: int = 30000, redactor: Redactor | None = None) -> dict:
    """A variant's launch argv and env additions, secrets redacted (``redactor``: the run's; by
    default one that learns the scenario's). An external variant starts nothing: no argv."""
    redactor = redactor or run_redactor(scenario)
    if variant.backend == "external":
        return {"name": variant.name, "argv": [], "env": {}, "simulated": False, "url": variant.url}
    spec = launch_spec(scenario, variant, port)
    return {
        "name": variant.name,
        "argv": redactor.argv(spec.argv),
        "env": redactor.scenario_env(dict(spec.env_overrides)),
        "simulated": spec.simulated,
    }


def dry_run_text(scenario: Scenario, variants: list) -> str:
    """Each variant's exact argv and env additions, shell-quoted, secrets redacted
    (``harness run --dry-run``)."""
    redactor = run_redactor(scenario)
    out = []
    for v in variants:
        d = describe_launch(scenario, v, redactor=redactor)
        if v.backend == "external":
            out.append(
                f"# variant {v.name} (external): {v.url}\n# nothing is started: the running server is measured\n\n"
            )
            continue
        out.append(f"# variant {v.name}{' (simulated)' if d['simulated'] else ''}\n")
        out.extend(f"# {line}\n" for line in ratio_boundary.boundary_lines(scenario, [v]))
        out.extend(f"{k}={val}\n" for k, val in d["env"].items())
        out.append(" ".join(shlex.quote(a) for a in d["argv"]) + "\n\n")
    return "".join(out)


def build_manifest(
    scenario: Scenario,
    variants: list,
    argv: list[str],
    simulated: bool,
    redactor: Redactor | None = None,
    attached: external.AttachedRun | None = None,
    checks: dict[str, builds.BuildCheck] | None = None,
) -> dict:
    """The run's manifest, every secret the run knows redacted (``redactor``: the run's).
    ``attached``: an external run's probed servers (each variant's ``server``: URL, version,
    the server's own arguments, HiCache as it reports it, /metrics, whose host is sampled).
    ``checks``: each variant's verified build (``builds.verify_builds``), kept per variant."""
    redactor = redactor or run_redactor(scenario, argv)
    checks = checks or {}
    entries = []
    for v in variants:
        d = describe_launch(scenario, v, redactor=redactor)
        extra = {}
        if attached is not None and v.name in attached.endpoints:
            scrub = functools.partial(fingerprint.scrub_json, redactor)  # numbers stay figures
            extra = {"url": v.url, "server": attached.endpoints[v.name].manifest_entry(scrub)}
        check = checks.get(v.name)
        if check is not None or attached is None:
            extra["build"] = fingerprint.scrub_json(redactor, check.to_json()) if check else {"build": v.build}
        entries.append(
            {
                "name": v.name,
                "dir": results.safe_name(v.name),
                "config_hash": variant_config_hash(scenario, v),
                "argv": d["argv"],
                "env": d["env"],  # already redacted by describe_launch
                "hicache": v.hicache.model_dump(mode="json") if v.hicache is not None else None,
                "expect": v.expect,
                "expect_cause": v.expect_cause,
                **extra,
            }
        )
    server = scenario.server
    manifest = {
        "schema_version": results.SCHEMA_VERSION,
        "kind": "run",
        "scenario": {
            "name": scenario.name,
            "path": str(scenario.path) if scenario.path else None,
            "text": redactor.text(scenario.text),
            "hash": scenario_hash(scenario.text),
            "overrides": scenario.overrides,  # --set KEY=VALUE as given (also in the text's header)
            "unrun_checks": scenario.unrun_checks,  # a --url run's checks naming variants it has not
        },
        "harness_version": __version__,
        "backend": server.backend,
        "simulated": simulated,
        "created_at": results.utc_now_iso(),
        "harness_argv": redactor.argv(argv),
        "seed": scenario.seed,
        "repeats": scenario.repeats,
        "host": fingerprint.host_fingerprint(),
        "client": client_stack(),  # event loop and JSON codec of the streaming client
        "env": fingerprint.allowlisted_env(dict(os.environ), redactor=redactor),
        "sglang": None,
        "probe": None,
        "variants": entries,
    }
    if attached is not None and attached.parity_skipped:
        manifest["parity_skipped"] = attached.parity_skipped
    if attached is not None:
        versions = sorted({e.info.version for e in attached.endpoints.values() if e.info and e.info.version})
        manifest["sglang"] = {"version": ", ".join(versions) or None, "location": "external"}
        if scenario.quality.enabled:
            manifest["quality_baseline"] = scenario.quality.baseline_variant  # read from the servers
    elif not simulated and variants:
        v0 = variants[0]  # the run's headline sglang; every variant's own is under variants[].build
        if v0.sglang_source:
            manifest["sglang_source"] = fingerprint.git_state(Path(v0.sglang_source))
        check = checks.get(v0.name)
        if check is not None:
            sglang = {"version": check.version, "location": check.location}
            if check.error:
                sglang["error"] = check.error
            elif check.location:
                sglang["git"] = fingerprint.git_state(Path(check.location))
        else:
            spec = launch_spec(scenario, v0, 0)
            sglang = fingerprint.sglang_version(v0.python, env=spec.full_env())
        manifest["sglang"] = fingerprint.scrub_json(redactor, sglang)
    else:
        manifest["sglang"] = {"version": "simulated", "location": "harness.sim"}
        # flags the simulator accepted without modelling them (harness.sim.cli.UNMODELLED_FLAGS)
        manifest["sim_unmodelled_flags"] = {e["name"]: found for e in entries if (found := unmodelled_flags(e["argv"]))}
    return manifest


def learn_server_secrets(redactor: Redactor, attached: external.AttachedRun, scenario: Scenario) -> None:
    """The string values under secret names in the servers' own arguments (``api_key``), and the
    key ``server.api_key_env`` names, scrubbed from every file of the run like the scenario's
    (numbers are figures, never secrets)."""
    key = external.api_key(scenario)
    if key is not None:
        redactor.learn({"api_key": key})
    for e in attached.endpoints.values():
        if e.info is not None:
            redactor.learn({k: v for k, v in e.info.raw.items() if isinstance(v, str)})


def run_redactor(scenario: Scenario, argv: Sequence[str] = (), environ: Mapping[str, str] | None = None) -> Redactor:
    """The run's one :class:`Redactor`: it learns, once, the secret values of the scenario file
    as written (its parsed YAML), of every variant's merged args and env (``${VAR}`` expanded,
    matrix axes applied, ``extra_args`` split), of the harness's ``argv`` and of this process's
    credential-named environment variables (``environ``, default ``os.environ``). Multi-line
    values are also learnt line by line, so a file scrubbed a run of lines at a time loses them."""
    r = Redactor()
    try:
        r.learn(load_yaml_text(scenario.text or "", str(scenario.path or "<scenario>")).data)
    except YamlLoadError:
        pass
    for v in scenario.expand_variants():
        r.learn({"args": dict(v.args), "env": dict(v.env)})
        r.learn_env(dict(v.env))
    r.learn(list(argv), dict(os.environ if environ is None else environ))
    r.values |= {line.strip() for v in r.values for line in v.splitlines() if len(line.strip()) >= MIN_SCRUB_LENGTH}
    # A switch under a credential-looking name (HF_HUB_DISABLE_TOKEN=true) is no secret, and
    # scrubbing "true" from every text would garble the manifest and the logs.
    r.values -= {v for v in r.values if v.strip().lower() in _NOT_SECRET_VALUES}
    remember_secret(*r.values)
    return r


_NOT_SECRET_VALUES = frozenset({"true", "false", "none", "null", "yes", "auto", "default", "enabled", "disabled"})

"""Builds: which sglang each variant runs, checked before any server starts and confirmed after.

A build is a scenario's ``builds:`` entry (or the server block's own, named ``default``): an
interpreter, an optional sglang source checkout put first on the server's PYTHONPATH, env and
args (docs/scenario-format.md). Before launch, :func:`verify_builds` checks, once per build and
import-relevant environment:

- the source exists and holds an sglang package (``python/sglang/__init__.py`` of a git checkout,
  or ``sglang/__init__.py`` directly in it);
- the interpreter, run exactly as the server would be (command prefix, the variant's launch
  environment), imports sglang from inside that source (a subprocess, bounded in time). A wrapper
  that rewrites PYTHONPATH, a ``.pth`` file or a variant's own PYTHONPATH would otherwise run the
  installed sglang silently in place of the patched one.

Every problem of every build is one :class:`BuildError` (a ``ValueError``: exit 2, bad input)
before any server starts. What was found is kept per variant in the manifest
(:meth:`BuildCheck.to_json`: the version, the imported file, the checkout's commit/branch/dirty
state). Once a server is ready, :func:`confirm_server` compares the version it reports
(``/get_server_info``) with the build's; the runner fails a variant that differs
(cause :data:`BUILD_MISMATCH`).

The simulator imports no sglang: a sim build's version is ``$HARNESS_SIM_VERSION`` of its
environment (``harness/sim/args.py``), and a sim build's ``sglang_source`` is checked like a real
one (the harness's own interpreter must import sglang from it), so the checks run in fast tests.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from harness.core.errors import BadInput
from harness.core.sglang_source import source_package_dir, source_problem
from harness.host import fingerprint
from harness.run.launch import launch_spec
from harness.server.process import SGLANG_MODULE, SIM_MODULE
from harness.sim.args import sim_version

if TYPE_CHECKING:
    from harness.scenario.models import Scenario

BUILD_MISMATCH = "build_mismatch"  # a variant's cause: its server reported another build's version
IMPORT_TIMEOUT_S = 120.0  # a real sglang imports torch and friends: seconds, not minutes
_IMPORT_CODE = "import sglang; print(sglang.__file__); print(getattr(sglang, '__version__', None))"
# What decides where ``import sglang`` comes from (the cache key of one check).
_IMPORT_ENV_PREFIXES = ("PYTHON", "VIRTUAL_ENV", "CONDA_PREFIX", "HARNESS_SIM_VERSION")


class BuildError(BadInput, ValueError):
    """One or more builds are not what the scenario says; the message lists every problem."""


@dataclass(frozen=True)
class BuildCheck:
    """What the check found for one variant's build. ``version``: what its server will report
    (real sglang: the imported ``sglang.__version__``; the simulator: ``$HARNESS_SIM_VERSION``).
    ``error``: sglang could not be imported and the build has no source (kept, not refused: the
    server start then fails as a classified startup failure, as it always did)."""

    build: str
    backend: str
    python: str
    sglang_source: str | None
    version: str | None
    imported_file: str | None
    imported_version: str | None
    git: dict | None
    error: str | None = None

    @property
    def location(self) -> str | None:
        """The imported sglang package's folder."""
        return os.path.dirname(self.imported_file) if self.imported_file else None

    def to_json(self) -> dict:
        return {**asdict(self), "location": self.location}


def import_sglang(command: Sequence[str], env: Mapping[str, str], timeout_s: float) -> tuple[str, str | None]:
    """``(sglang.__file__, sglang.__version__)`` as ``command`` (an interpreter, with any prefix)
    imports it in ``env``. Raises OSError (cannot run), TimeoutError, or RuntimeError (the
    import failed: its last line of stderr)."""
    try:
        r = subprocess.run(
            [*command, "-c", _IMPORT_CODE],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            env=dict(env),
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        raise TimeoutError(f"`import sglang` did not finish in {timeout_s:g} s") from None
    lines = r.stdout.strip().splitlines()
    if r.returncode != 0 or len(lines) < 2:
        raise RuntimeError((r.stderr.strip().splitlines() or [f"exit {r.returncode}"])[-1])
    version = lines[-1] if lines[-1] != "None" else None
    return lines[-2], version


def _interpreter(argv: Sequence[str]) -> list[str]:
    """The launch argv up to the module: command prefix and interpreter."""
    for i in range(len(argv) - 1):
        if argv[i] == "-m" and argv[i + 1] in (SGLANG_MODULE, SIM_MODULE):
            return list(argv[:i])
    return list(argv[:1])


def _inside(file: str, folder: Path) -> bool:
    try:
        Path(file).resolve().relative_to(folder.resolve())
    except (ValueError, OSError):
        return False
    return True


def check_variant_build(scenario: Scenario, variant, timeout_s: float = IMPORT_TIMEOUT_S) -> BuildCheck:
    """One variant's build, checked as its server would be launched. Raises :class:`BuildError`
    with the problem."""
    spec = launch_spec(scenario, variant, 0)
    env = spec.full_env()
    sim = variant.backend == "sim"
    command = _interpreter(spec.argv)
    source = Path(variant.sglang_source) if variant.sglang_source else None
    git = None
    if source is not None:
        problem = source_problem(source)
        if problem:
            raise BuildError(problem)
        git = fingerprint.git_state(source)
    if sim and source is None:  # nothing to import: the simulator is the build
        return BuildCheck(variant.build, variant.backend, command[-1], None, sim_version(env), None, None, None)
    try:
        file, version = import_sglang(command, env, timeout_s)
    except (OSError, TimeoutError, RuntimeError) as exc:
        if source is not None:
            raise BuildError(f"{' '.join(command)} cannot import sglang from {source}: {exc}") from None
        return BuildCheck(variant.build, variant.backend, command[-1], None, None, None, None, None, str(exc))
    if source is not None and not _inside(file, source_package_dir(source)):
        raise BuildError(
            f"{' '.join(command)} imports sglang from {file}, not from sglang_source "
            f"{source_package_dir(source)} (a wrapper or .pth that sets its own path, or a PYTHONPATH "
            f"in the variant's env, puts another sglang first)"
        )
    return BuildCheck(
        variant.build,
        variant.backend,
        command[-1],
        str(source) if source is not None else None,
        sim_version(env) if sim else version,
        file,
        version,
        git,
    )


def verify_builds(scenario: Scenario, variants: Sequence, timeout_s: float = IMPORT_TIMEOUT_S) -> dict[str, BuildCheck]:
    """Every variant's build checked (once per build, interpreter and import-relevant
    environment). Returns {variant name: BuildCheck}; raises one :class:`BuildError` listing
    every build that failed, with the variants that use it. A running server (``backend:
    external``) is not checked: the harness launches nothing there."""
    done: dict[tuple, BuildCheck | BuildError] = {}
    users: dict[tuple, list[str]] = {}
    out: dict[str, BuildCheck] = {}
    for v in variants:
        if v.backend == "external":  # started by someone else: its version is what it reports
            continue
        spec = launch_spec(scenario, v, 0)
        env = spec.full_env()
        key = (
            v.build,
            v.sglang_source,
            tuple(_interpreter(spec.argv)),
            tuple(sorted((k, val) for k, val in env.items() if k.startswith(_IMPORT_ENV_PREFIXES))),
        )
        if key not in done:
            try:
                done[key] = check_variant_build(scenario, v, timeout_s)
            except BuildError as exc:
                done[key] = exc
        users.setdefault(key, []).append(v.name)
        found = done[key]
        if isinstance(found, BuildCheck):
            out[v.name] = found
    failed = [(key, e) for key, e in done.items() if isinstance(e, BuildError)]
    if failed:
        lines = [f"build {key[0]!r} (variants {', '.join(users[key])}): {e}" for key, e in failed]
        raise BuildError("refused before any server started:\n  " + "\n  ".join(lines))
    return out


def dry_run_lines(scenario: Scenario, variants: Sequence, timeout_s: float = IMPORT_TIMEOUT_S) -> list[str]:
    """``harness run --dry-run``: every build with a ``sglang_source`` checked as the run checks it
    (:func:`verify_builds`: the checkout is there, holds sglang, and the interpreter imports sglang
    from it; :class:`BuildError`, exit 2, otherwise) and what was found, a comment line each. The
    dry run printed the argv of a build whose source did not exist, or imported another sglang."""
    from harness.scenario.checks import build_source_problems
    from harness.spec.errors import ScenarioError

    if problems := build_source_problems(scenario, list(variants)):  # as validate says them
        raise ScenarioError(problems)
    sourced = [v for v in variants if v.sglang_source and v.backend != "external"]
    lines, seen = [], set()
    for name, c in verify_builds(scenario, sourced, timeout_s).items():
        if (c.build, c.sglang_source, c.imported_file) in seen:
            continue
        seen.add((c.build, c.sglang_source, c.imported_file))
        git = c.git or {}
        state = ", ".join(
            x
            for x in (
                f"commit {str(git['commit'])[:12]}" if git.get("commit") else "not a git checkout",
                f"branch {git['branch']}" if git.get("branch") else "",
                "dirty" if git.get("dirty") else "",
            )
            if x
        )
        lines.append(
            f"# build {c.build!r} (variant {name}): sglang {c.version or '?'} imported from {c.imported_file}"
            f" inside {c.sglang_source} ({state})"
        )
    return lines


def confirm_server(check: BuildCheck | None, reported_version: str | None) -> str | None:
    """Why a ready server is not the build it was started as (the version it reports differs
    from the build's), or None. Nothing to compare on either side is no mismatch."""
    if check is None or check.version is None or reported_version is None:
        return None
    if reported_version == check.version:
        return None
    where = f" (sglang imported from {check.imported_file})" if check.imported_file else ""
    return f"build {check.build!r} is sglang {check.version}{where}, but the server reports version {reported_version}"

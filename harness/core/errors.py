"""One error root: what the harness raises on purpose, and the exit code each kind means.

Every error the harness raises on purpose is a :class:`HarnessError`, and one of two kinds; the
command line maps the kind to its exit code (`harness.core.exit_codes.ExitCode`) and prints
the message in one line. Anything else that escapes a command is a bug: exit 3 with its
traceback, never "bad input".

::

    HarnessError
    ├── BadInput  (exit 2)  what the user gave cannot be used; the fix is in the input
    │   ├── ScenarioError     harness/spec/errors.py      a scenario, one FILE:LINE KEY.PATH line each
    │   ├── YamlLoadError     harness/core/yaml_lines.py  a file that is not safe, loadable YAML
    │   ├── ModelConfigError  harness/core/model_config.py  a model's config.json
    │   ├── TooLarge          harness/core/bounds.py      a file over its bound, or not a regular file
    │   ├── MissingExtra      harness/core/optional.py    an optional extra the command needs
    │   ├── ResultsError      harness/store/results.py    a folder that is not a readable run
    │   ├── RunLocked         harness/store/results.py    another harness process writes this run
    │   ├── DatasetError      harness/workloads/datasets.py  a dataset or trace file
    │   ├── GpuBusy           harness/server/process.py   the GPUs a run needs are taken
    │   ├── SelectionError    harness/run/shard.py        --only / --shard naming no variant
    │   ├── BuildError        harness/run/builds.py       a build that is not the sglang it names
    │   ├── EndpointRefused   harness/run/external.py     a URL that is not a usable sglang server
    │   ├── ResumeRefused     harness/run/resume.py       a run folder --resume cannot continue
    │   ├── MergeRefused      harness/run/merge.py        runs that cannot be merged
    │   └── BaselineMismatch  harness/compare/runs.py     two runs that cannot be compared
    └── Broken    (exit 3)  the harness or what it talks to cannot go on
        ├── ServerAnswerError harness/server/info.py      a server answer the harness cannot use
        ├── NotSglangError    harness/server/identify.py  an endpoint that is not sglang
        ├── NoAnswer          harness/server/info.py      a control request that got no (complete) answer
        ├── HttpError         harness/server/http1.py     a broken HTTP/1.1 exchange
        ├── MetricsUnavailable harness/server/metrics_page.py  no /metrics to read
        ├── ProbeFailure      harness/probe/worker.py     a platform probe that could not run
        ├── RestartFailed     harness/run/restart.py      a server that did not come back after a planned restart
        ├── StorageServedAcrossChange  harness/workloads/kinds/storage_restart.py  storage entries of
        │                     another model, dtype or layout served after a restart
        └── StorageHeldBefore harness/workloads/kinds/storage_restart.py  a first pass served from
                              storage: the directory held these prompts' pages before the run

The classes that were a ``ValueError`` (``ModelConfigError``, ``TooLarge``, ``RunLocked``, ``DatasetError``,
``GpuBusy``, ``SelectionError``, ``BuildError``, ``EndpointRefused``, ``ResumeRefused``) still are
one, and ``MissingExtra`` still is an ``ImportError``, so that the handlers written against those
keep working; the command line maps only these classes, never a bare ``ValueError``.

Signals that never leave their module are not errors and stay outside the root:
``StopSending`` (harness/workloads/context.py: stop a workload's sending) and the client's
``_Bad`` (harness/server/stream.py: one bad answer, turned into the record's error). Bisect's
``Interrupted`` (harness/compare/bisect.py: a step's run was stopped by a signal) is caught by
its command (harness/cli/bisect.py), which ends with 130.
"""

from __future__ import annotations


class HarnessError(Exception):
    """Raised on purpose by the harness; see the module docstring for the tree."""


class BadInput(HarnessError):
    """What the user gave cannot be used (exit 2)."""


class Broken(HarnessError):
    """The harness, or a server or device it talks to, cannot go on (exit 3)."""


def in_context_chain(exc: BaseException | None, kinds: type[BaseException] | tuple[type[BaseException], ...]):
    """``exc`` or the first exception it was raised while handling (its ``__context__`` chain,
    cycles cut) that is one of ``kinds``; None when none is."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, kinds):
            return exc
        seen.add(id(exc))
        exc = exc.__context__
    return None

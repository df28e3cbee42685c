"""The one error root: every error the harness raises on purpose is a HarnessError (BadInput or
Broken), and the command line maps those classes -- never a bare ValueError -- to exit codes."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest

import harness
import harness.cli as cli
from harness.core.errors import BadInput, Broken, HarnessError
from harness.core.exit_codes import ExitCode
from harness.run.shard import SelectionError

# Signals caught inside their own module (bisect's by its command), never an error a user sees.
SIGNALS = {
    "harness.workloads.context.StopSending",
    "harness.server.stream._Bad",
    "harness.compare.bisect.Interrupted",
    "harness.run.lanes.LaneStopped",
}


def _harness_modules():
    for info in pkgutil.walk_packages(harness.__path__, "harness."):
        # the simulator is a program of its own (its errors are sglang's); __main__ modules run on import
        if info.name.startswith("harness.sim") or info.name.endswith("__main__"):
            continue
        yield importlib.import_module(info.name)


def test_every_exception_class_of_the_harness_is_under_the_root():
    found, outside = [], []
    for module in _harness_modules():
        for name, obj in vars(module).items():
            if inspect.isclass(obj) and issubclass(obj, BaseException) and obj.__module__ == module.__name__:
                qual = f"{module.__name__}.{name}"
                found.append(qual)
                if qual not in SIGNALS and obj is not HarnessError and not issubclass(obj, (BadInput, Broken)):
                    outside.append(qual)
    assert len(found) >= 20  # the walk found the classes (a broken walk would pass vacuously)
    assert outside == []


def test_the_root_is_drawn_in_its_docstring():
    import harness.core.errors as errors

    for module in _harness_modules():
        for name, obj in vars(module).items():
            if inspect.isclass(obj) and issubclass(obj, HarnessError) and obj.__module__ == module.__name__:
                assert name in errors.__doc__, f"{module.__name__}.{name} is not drawn in harness/core/errors.py"


@pytest.mark.parametrize(
    ("raised", "code", "traceback"),
    [
        (SelectionError("--only: no variant named x"), ExitCode.BAD_INPUT, False),
        (Broken("the server's answer is not JSON"), ExitCode.BROKEN, False),
        (ValueError("a bug"), ExitCode.BROKEN, True),  # a bare ValueError is a bug, not bad input
        (KeyError("a bug"), ExitCode.BROKEN, True),
    ],
)
def test_the_cli_maps_classes_to_exit_codes(monkeypatch, capsys, caplog, raised, code, traceback):
    def fails(args):
        raise raised

    monkeypatch.setattr(cli.schema, "cli_main", fails)  # bound when main() builds the parser
    assert cli.main(["schema"]) == code
    err = capsys.readouterr().err + caplog.text
    assert str(raised).strip("'") in err
    assert ("Traceback" in err) is traceback

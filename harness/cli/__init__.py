"""The `harness` command: parse arguments, call one function, map its outcome to an exit code.

Exit codes: 0 pass; 1 a regression, a failed expectation or a variant that failed unexpectedly;
2 bad input (scenario, arguments, results); 3 the harness or its environment broke; 130 interrupted.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

from harness import __version__
from harness.cli import accept, bisect, compare, history, load, merge, report, run, schema, show, validate
from harness.cli.common import bad
from harness.core.errors import BadInput, Broken
from harness.core.exit_codes import ExitCode, restore_handlers, terminations_interrupt
from harness.core.optional import MissingExtra, require_extra

DESCRIPTION = (
    "Benchmark and regression harness for SGLang's hierarchical KV cache (HiCache): run a "
    "scenario (one server per variant), compare runs, draw reports."
)
EPILOG = (
    "Exit codes: 0 pass, 1 regression / failed expectation / unexpected variant failure, 2 bad "
    "input (or a missing optional extra), 3 the harness or its environment broke, 4 inconclusive, "
    "130 interrupted. Docs: README.md and docs/ in the repository."
)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="harness", description=DESCRIPTION, epilog=EPILOG)
    p.add_argument("--version", action="version", version=f"harness {__version__}")
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    # one module per command (its arguments and its work); each imports what it needs when it runs,
    # so that `--help` and `validate` stay fast
    for command in (run, show, report, compare, accept, history, load, merge, bisect, validate, schema):
        command.add_parser(sub)
    # Listed for --help; main() hands their arguments to their own parsers.
    sub.add_parser("sim", help="the simulated sglang server (accepts sglang's launch flags; sim --help)")
    sub.add_parser("probe", help="platform probes: WSL, host-memory mapping, H2D/D2H bandwidth (probe --help)")
    return p


# Subcommands whose own argument parser takes every argument after the name: (module, function,
# the extra it needs).
_PASSTHROUGH = {"sim": ("harness.sim.cli", "main", "sim"), "probe": ("harness.probe.cli", "main", None)}


def _drop_stdout() -> None:
    """Point stdout at /dev/null: the interpreter's last flush would meet the closed pipe again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # no real stdout (captured): nothing will be flushed to a pipe
        pass


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] in _PASSTHROUGH:
        import importlib

        module, func, extra = _PASSTHROUGH[argv[0]]
        if extra is not None and argv[1:] not in (["-h"], ["--help"]):
            try:
                require_extra(extra, f"harness {argv[0]}")
            except MissingExtra as exc:
                print(exc, file=sys.stderr)
                return ExitCode.BAD_INPUT
        return getattr(importlib.import_module(module), func)(argv[1:])
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s"
    )
    handlers = terminations_interrupt()  # a console script's main: from here on, as `python -m harness` is
    try:
        return args.func(args)
    except MissingExtra as exc:  # an optional extra this command needs: one line, never a traceback
        print(exc, file=sys.stderr)
        return ExitCode.BAD_INPUT
    except BadInput as exc:  # the user's input: one line, never a traceback
        return bad(str(exc))
    except Broken as exc:  # raised on purpose: what broke, in one line
        logging.getLogger("harness").error("harness %s: %s", args.command, exc)
        return ExitCode.BROKEN
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else ExitCode.BAD_INPUT
    except KeyboardInterrupt:
        return ExitCode.INTERRUPTED
    except BrokenPipeError:  # the reader went away (`| head`): what was not read is lost, say so once
        _drop_stdout()
        print(f"harness {args.command}: standard output was closed before the command ended", file=sys.stderr)
        return ExitCode.BROKEN
    except OSError as exc:
        if exc.filename is None:  # not a file's: a harness bug
            logging.getLogger("harness").exception("harness %s failed", args.command)
            return ExitCode.BROKEN
        # a file system that refuses (read-only, full, no such folder, no permission): the file
        # and why, in one line, never a traceback
        return bad(f"{exc.filename}: {exc.strerror or type(exc).__name__}")
    except Exception:  # noqa: BLE001 - a harness bug: its traceback, exit 3 (never read as bad input)
        logging.getLogger("harness").exception("harness %s failed", args.command)
        return ExitCode.BROKEN
    finally:
        restore_handlers(handlers)

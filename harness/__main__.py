"""`python -m harness`: SIGTERM and SIGHUP end it with 130 from its first instant (before the CLI
is even imported), then the CLI."""

from harness.core.exit_codes import ExitCode, terminations_interrupt

terminations_interrupt()
try:
    from harness.cli import main

    code = main()
except KeyboardInterrupt:
    code = ExitCode.INTERRUPTED
raise SystemExit(code)

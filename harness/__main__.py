"""`python -m harness` and the installed `harness` command (`[project.scripts]` names
:func:`main`): SIGTERM and SIGHUP end it with 130 from its first instant, before the CLI is even
imported (the script named `harness.cli:main` imported the whole CLI first, and a SIGTERM then
ended it -15), then the CLI."""

from harness.core.exit_codes import ExitCode, terminations_interrupt


def main() -> int:
    terminations_interrupt()
    try:
        from harness.cli import main as cli_main

        return cli_main()
    except KeyboardInterrupt:
        return ExitCode.INTERRUPTED


if __name__ == "__main__":
    raise SystemExit(main())

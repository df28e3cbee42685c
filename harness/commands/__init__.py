"""The command-line layer of ``harness compare``, ``harness history`` and ``harness load``: each
module's ``cli_main(args) -> int`` reads the parsed arguments, calls the domain package, prints,
writes the files the options ask for, and maps the outcome to an `ExitCode`."""

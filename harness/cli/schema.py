"""``harness schema``: print the JSON Schema of the scenario format."""

from __future__ import annotations

import json

from harness.core.exit_codes import ExitCode


def add_parser(sub) -> None:
    s = sub.add_parser("schema", help="print the JSON Schema of the scenario format")
    s.set_defaults(func=cli_main)


def cli_main(args) -> int:
    from harness.scenario import json_schema

    print(json.dumps(json_schema(), indent=2))
    return ExitCode.OK

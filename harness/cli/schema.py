"""``harness schema``: print the JSON Schema of the scenario format (``--ranges``: every numeric
key's range and unit, one a line)."""

from __future__ import annotations

import json

from harness.core.exit_codes import ExitCode


def add_parser(sub) -> None:
    s = sub.add_parser("schema", help="print the JSON Schema of the scenario format")
    s.add_argument(
        "--ranges", action="store_true", help="print every numeric key's range and unit instead, one key a line"
    )
    s.set_defaults(func=cli_main)


def cli_main(args) -> int:
    from harness.scenario import json_schema
    from harness.scenario.ranges import ranges_table

    schema = json_schema()
    print(ranges_table(schema) if args.ranges else json.dumps(schema, indent=2))
    return ExitCode.OK

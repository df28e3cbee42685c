"""``harness report RUN [--reports-dir DIR]``: write the self-contained HTML report of a run
(`harness.report.html`; needs the [report] extra: one line, exit 2, without it)."""

from __future__ import annotations

from harness.core.optional import require_extra


def add_parser(sub) -> None:
    s = sub.add_parser("report", help="write the self-contained HTML report of a run")
    s.add_argument("run", help="run folder (results/<scenario>/<run_id>)")
    s.add_argument("--reports-dir", default="reports", help="where reports go (default: reports)")
    s.set_defaults(func=cli_main)


def cli_main(args) -> int:
    require_extra("report", f"harness {args.command}")
    from harness.report.html import cli_main as write  # heavy (matplotlib, jinja2): only when it runs

    return write(args)

"""The fault table of harness/sim/faults.py: its parser, its messages, and that docs/simulator.md
and the simulator's tests keep up with it."""

import re
from pathlib import Path

import pytest

from harness.sim.faults import ArgType, Fault, fault_problem, parse_fault

ROOT = Path(__file__).resolve().parents[3]
DOCS = ROOT / "docs" / "simulator.md"
SAMPLE_ARG = {
    ArgType.NONE: "",
    ArgType.INT_FROM_1: "=3",
    ArgType.SECONDS: "=0.5",
    ArgType.FACTOR: "=1.1",
    ArgType.SHARE: "=0.6",
    ArgType.RATE: "=0.01",
}


def _docs_fault_rows() -> list[tuple[str, str, str]]:
    """(fault, arg, what it does) of each row of the table under ``## Faults``."""
    section = DOCS.read_text().split("\n## Faults\n", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        if line.startswith("| `"):
            name, arg, does = (cell.strip() for cell in line.strip().strip("|").split("|"))
            rows.append((name.strip("`"), arg, does))
    return rows


def test_docs_table_matches_the_fault_table():
    documented = _docs_fault_rows()
    names = [name for name, _, _ in documented]
    assert len(names) == len(set(names)), f"a fault documented twice in {DOCS.name}: {names}"
    assert {name: (arg, does) for name, arg, does in documented} == {f.name: (f.arg.value, f.does) for f in Fault}


def test_every_fault_has_a_behaviour_test():
    tests = "\n".join(p.read_text() for p in (ROOT / "tests" / "unit" / "sim").glob("test_*.py"))
    untested = [f.name for f in Fault if not re.search(rf"def test_{f.name}\w*\(", tests)]
    assert not untested, f"no test_<fault name> in tests/unit/sim/test_*.py for: {untested}"


@pytest.mark.parametrize("fault", list(Fault), ids=lambda f: f.name)
def test_every_fault_parses_with_its_argument(fault):
    text = fault.name + SAMPLE_ARG[fault.arg]
    assert fault_problem(text) is None
    assert parse_fault(text)[0] is fault


def test_parsed_arguments_have_their_types():
    assert parse_fault("crash_at_request=3") == (Fault.crash_at_request, 3)
    assert isinstance(parse_fault("crash_at_request=3")[1], int)
    assert parse_fault("die_after_idle=1.5") == (Fault.die_after_idle, 1.5)
    assert parse_fault("exit_before_ready=0") == (Fault.exit_before_ready, 0.0)
    assert parse_fault("ignore_sigterm") == (Fault.ignore_sigterm, None)
    assert parse_fault("slow_prefill=1.1") == (Fault.slow_prefill, 1.1)
    assert parse_fault("partial_host_hits=1") == (Fault.partial_host_hits, 1.0)


@pytest.mark.parametrize(
    "text, problem",
    [
        ("crash_at_reqest=3", "unknown fault 'crash_at_reqest', did you mean 'crash_at_request'?"),
        ("ignore_sigterms", "did you mean 'ignore_sigterm'?"),
        ("explode", "unknown fault 'explode' (known: crash_at_request, "),
        ("crash_at_request", "fault crash_at_request needs an argument: crash_at_request=<int >= 1>"),
        ("crash_at_request=", "needs an argument"),
        ("crash_at_request=2.5", "fault crash_at_request wants int >= 1 as its argument, got '2.5'"),
        ("crash_at_request=0", "wants int >= 1"),
        ("die_after_idle=-1", "fault die_after_idle wants seconds >= 0 as its argument, got '-1'"),
        ("die_after_idle=nan", "wants seconds >= 0"),
        ("exit_before_ready=soon", "wants seconds >= 0"),
        ("slow_prefill=0.9", "fault slow_prefill wants number >= 1 as its argument, got '0.9'"),
        ("slow_decode=inf", "wants number >= 1"),
        ("partial_host_hits=0", "fault partial_host_hits wants number in (0, 1] as its argument, got '0'"),
        ("partial_host_hits=1.5", "wants number in (0, 1]"),
        ("slowdown_per_request=-0.1", "wants number >= 0"),
        ("ignore_sigterm=1", "fault ignore_sigterm takes no argument, got 'ignore_sigterm=1'"),
        ("ignore_sigterm=", "takes no argument"),
    ],
)
def test_fault_problem_says_what_is_wrong(text, problem):
    message = fault_problem(text)
    assert message is not None and problem in message


def test_no_suggestion_when_nothing_is_close():
    assert "did you mean" not in fault_problem("explode")

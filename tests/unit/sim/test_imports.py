"""Imports inside harness/sim flow one way, and harness.sim.faults stays a leaf that the scenario
validator can import without pulling in the server."""

import ast
import subprocess
import sys
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
SIM = ROOT / "harness" / "sim"
MODULES = {p.stem for p in SIM.glob("*.py")}


def _sim_imports(path: Path) -> set[str]:
    """harness.sim modules that ``path`` imports anywhere, function bodies included."""
    names: list[str] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            names += [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names += [a.name for a in node.names]
    return {n.split(".")[2] for n in names if n.startswith("harness.sim.")} & MODULES


def test_no_import_cycle_in_the_simulator():
    graph = {p.stem: _sim_imports(p) - {p.stem} for p in SIM.glob("*.py")}
    try:
        TopologicalSorter(graph).prepare()
    except CycleError as exc:
        raise AssertionError(f"import cycle in harness/sim: {exc.args[1]}") from None


def test_faults_is_a_leaf():
    code = (
        "import sys, harness.sim.faults; "
        "print(sorted(m for m in sys.modules if m.startswith(('harness', 'uvicorn', 'starlette', 'numpy', "
        "'pydantic', 'prometheus_client'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True).stdout
    assert out.strip() == "['harness', 'harness.sim', 'harness.sim.faults']"

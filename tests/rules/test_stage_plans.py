"""The stages below the run read typed plans, never the scenario (issue #23).

`harness.run` resolves a variant's window from the scenario once and hands each stage what it
needs, typed: the quality arm a `QualityPlan` and a `QualityArm`, the workloads their configs
and a `WorkloadContext`, the server layer a `LaunchSpec`. So in harness/quality, workloads,
server and measures (read from the source, every function and `TYPE_CHECKING` block counted):

- nothing imports ``harness.scenario`` (an ``import``, ``from ... import`` or
  ``importlib.import_module`` of it), no annotation names ``Scenario`` and no parameter is
  called ``scenario``;
- no ``getattr`` / ``hasattr`` reads an attribute whose name is written in the call (a string
  literal: a typed object is read as ``obj.name``), nor one whose name comes from a loop over
  literal names (``for knob in ("a", "b"): getattr(sim, knob)``), nor passes both the object
  and the name in from its function's parameters (the ``_get(cfg, "tasks", default)`` wrapper
  that would launder a literal). A module's ``__getattr__`` (lazy exports) is the one shape
  exempt from the last rule.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
STAGES = ("quality", "workloads", "server", "measures")
FORBIDDEN_MODULE = "harness.scenario"


def sources(stages: tuple[str, ...] = STAGES) -> Iterator[tuple[str, ast.Module]]:
    for stage in stages:
        for path in sorted((ROOT / "harness" / stage).rglob("*.py")):
            rel = str(path.relative_to(ROOT))
            yield rel, ast.parse(path.read_text(), filename=rel)


def _is_scenario_module(name: str | None) -> bool:
    return name is not None and (name == FORBIDDEN_MODULE or name.startswith(FORBIDDEN_MODULE + "."))


def _names_in_annotation(node: ast.expr | None) -> set[str]:
    """Every name an annotation mentions, string annotations parsed too."""
    if node is None:
        return set()
    out: set[str] = set()
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name):
            out.add(sub.id)
        elif isinstance(sub, ast.Attribute):
            out.add(sub.attr)
        elif isinstance(sub, ast.Constant) and isinstance(sub.value, str):
            try:
                out |= _names_in_annotation(ast.parse(sub.value, mode="eval").body)
            except SyntaxError:
                pass
    return out


def scenario_uses(rel: str, tree: ast.Module) -> list[str]:
    out = []
    for node in ast.walk(tree):
        where = f"{rel}:{getattr(node, 'lineno', '?')}"
        if isinstance(node, ast.Import):
            out += [f"{where} imports {a.name}" for a in node.names if _is_scenario_module(a.name)]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and _is_scenario_module(node.module):
            out.append(f"{where} imports from {node.module}")
        elif (
            isinstance(node, ast.ImportFrom)
            and node.module == "harness"
            and any(a.name == "scenario" for a in node.names)
        ):
            out.append(f"{where} imports harness.scenario")
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            if called in ("import_module", "__import__") and _is_scenario_module(str(node.args[0].value)):
                out.append(f"{where} imports {node.args[0].value} by name")
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            args = node.args
            params = args.posonlyargs + args.args + args.kwonlyargs + [a for a in (args.vararg, args.kwarg) if a]
            for a in params:
                if a.arg == "scenario":
                    out.append(f"{where} {node.name}() takes a parameter named scenario")
                if "Scenario" in _names_in_annotation(a.annotation):
                    out.append(f"{where} {node.name}() takes a Scenario ({a.arg})")
            if "Scenario" in _names_in_annotation(node.returns):
                out.append(f"{where} {node.name}() returns a Scenario")
        elif isinstance(node, ast.AnnAssign) and "Scenario" in _names_in_annotation(node.annotation):
            out.append(f"{where} holds a Scenario")
    return out


def _literal_names(node: ast.expr) -> bool:
    """A tuple/list/set whose items are string literals, or tuples of them (``for a, b in ...``)."""
    if not isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return False
    return all(
        (isinstance(e, ast.Constant) and isinstance(e.value, str)) or _literal_names(e) for e in node.elts
    ) and bool(node.elts)


def _targets(node: ast.expr) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


class _Reads(ast.NodeVisitor):
    """getattr/hasattr calls whose attribute name is written into the code (see the docstring)."""

    def __init__(self, rel: str) -> None:
        self.rel = rel
        self.found: list[str] = []
        self.params: list[tuple[str, set[str]]] = []  # enclosing functions: (name, parameters)
        self.literal_loop_vars: list[set[str]] = []

    def _function(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        a = node.args
        names = {p.arg for p in a.posonlyargs + a.args + a.kwonlyargs + [x for x in (a.vararg, a.kwarg) if x]}
        self.params.append((node.name, names))
        self.generic_visit(node)
        self.params.pop()

    visit_FunctionDef = _function
    visit_AsyncFunctionDef = _function

    def _loop(self, node: ast.For | ast.AsyncFor) -> None:
        literal = _literal_names(node.iter)
        if literal:
            self.literal_loop_vars.append(_targets(node.target))
        self.generic_visit(node)
        if literal:
            self.literal_loop_vars.pop()

    visit_For = _loop
    visit_AsyncFor = _loop

    def _comprehension(self, node: ast.ListComp | ast.SetComp | ast.GeneratorExp | ast.DictComp) -> None:
        # its element is visited before its loops: their names are bound for the whole node
        bound = [_targets(g.target) for g in node.generators if _literal_names(g.iter)]
        self.literal_loop_vars += bound
        self.generic_visit(node)
        del self.literal_loop_vars[len(self.literal_loop_vars) - len(bound) :]

    visit_ListComp = visit_SetComp = visit_GeneratorExp = visit_DictComp = _comprehension

    def visit_Call(self, node: ast.Call) -> None:
        if isinstance(node.func, ast.Name) and node.func.id in ("getattr", "hasattr") and len(node.args) >= 2:
            obj, name = node.args[0], node.args[1]
            where = f"{self.rel}:{node.lineno} {node.func.id}({ast.unparse(obj)}, {ast.unparse(name)})"
            if isinstance(name, ast.Constant):
                self.found.append(f"{where}: the attribute's name is a literal")
            elif isinstance(name, ast.Name) and any(name.id in vs for vs in self.literal_loop_vars):
                self.found.append(f"{where}: the attribute's name comes from a loop over literal names")
            elif isinstance(name, ast.Name) and self.params:
                func, params = self.params[-1]
                obj_is_param = isinstance(obj, ast.Name) and obj.id in params
                if func != "__getattr__" and name.id in params and obj_is_param:
                    self.found.append(f"{where}: object and name both come in through {func}()'s parameters")
        self.generic_visit(node)


def attribute_reads(rel: str, tree: ast.Module) -> list[str]:
    reads = _Reads(rel)
    reads.visit(tree)
    return reads.found


def test_no_stage_below_the_run_imports_or_receives_the_scenario():
    found = [line for rel, tree in sources() for line in scenario_uses(rel, tree)]
    assert found == [], "\n".join(found)


def test_analysis_receives_no_scenario():
    """The analysis (summaries, parity across arms, cost, verdicts) is handed typed blocks by the run
    (`run_products.write_run_products(run, quality, cost)`); it reads a *stored* scenario through
    `harness.scenario.load_scenario_text` (expectations), so only its imports are allowed."""
    found = [
        line for rel, tree in sources(("analysis",)) for line in scenario_uses(rel, tree) if " imports " not in line
    ]
    assert found == [], "\n".join(found)


def test_no_stage_below_the_run_reads_attributes_by_written_names():
    found = [line for rel, tree in sources() for line in attribute_reads(rel, tree)]
    assert found == [], "\n".join(found)


# -- the checks themselves see what they are for -----------------------------------------------


def _check(source: str) -> list[str]:
    tree = ast.parse(source)
    return scenario_uses("x.py", tree) + attribute_reads("x.py", tree)


def test_the_checks_see_each_shape():
    assert _check("from harness.scenario.models import Scenario\n")
    assert _check("def f():\n    import harness.scenario\n")
    assert _check("from harness import scenario\n")
    assert _check("import importlib\nimportlib.import_module('harness.scenario.models')\n")
    assert _check("def f(scenario):\n    pass\n")
    assert _check("def f(s: 'Scenario | None'):\n    pass\n")
    assert _check("def f(s) -> models.Scenario:\n    pass\n")
    assert _check("getattr(cfg, 'tasks', None)\n")
    assert _check("hasattr(client, 'flush_cache')\n")
    assert _check("def _get(cfg, name, default):\n    return getattr(cfg, name, default)\n")
    assert _check("for knob in ('a', 'b'):\n    getattr(sim, knob)\n")
    assert _check("for flag, knob in (('-a', 'a'),):\n    getattr(sim, knob)\n")
    assert _check("[getattr(sim, k) for k in ('a', 'b')]\n")


def test_the_checks_leave_typed_code_alone():
    assert _check("def f(plan: QualityPlan):\n    return plan.tasks\n") == []
    assert _check("def __getattr__(name):\n    return getattr(_load(), name)\n") == []
    assert _check("def of(self, series):\n    return getattr(self, series.field)\n") == []
    assert _check("from harness.scenario_notes import x\n") == []

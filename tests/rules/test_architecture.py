"""The house rules, checked: no import cycles (function-level imports included), layers that do
not reach up, and docs/architecture.md naming every module."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PKG = ROOT / "harness"


def module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


MODULES = {module_name(p): p for p in PKG.rglob("*.py")}


def _is_type_checking(node: ast.If) -> bool:
    return (
        isinstance(node.test, ast.Name)
        and node.test.id == "TYPE_CHECKING"
        or (isinstance(node.test, ast.Attribute) and node.test.attr == "TYPE_CHECKING")
    )


def imports_of(name: str) -> set[str]:
    """harness modules `name` imports anywhere in its file (module level or inside functions),
    except under `if TYPE_CHECKING:`."""
    path = MODULES[name]
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and _is_type_checking(node):
            skip.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    out: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            targets = [base] + [f"{base}.{a.name}" for a in node.names]
        else:
            continue
        for t in targets:
            if t in MODULES and t != name:
                out.add(t)
    return out


def find_cycles() -> list[list[str]]:
    graph = {m: imports_of(m) for m in MODULES}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []
    counter = [0]

    def strongconnect(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                strongconnect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))

    for m in sorted(graph):
        if m not in index:
            strongconnect(m)
    return cycles


def test_no_import_cycles_anywhere():
    assert find_cycles() == []


def test_the_cycle_finder_sees_function_level_imports(tmp_path, monkeypatch):
    """Control: a cycle made only of a function-level import is found."""
    a, b = tmp_path / "a.py", tmp_path / "b.py"
    a.write_text("from harness import b\n")
    b.write_text("def f():\n    from harness import a\n")
    monkeypatch.setitem(MODULES, "harness.a", a)
    monkeypatch.setitem(MODULES, "harness.b", b)
    assert ["harness.a", "harness.b"] in find_cycles()


def _imports_matching(prefix: str) -> dict[str, set[str]]:
    return {m: imports_of(m) for m in MODULES if m == prefix or m.startswith(prefix + ".")}


def test_the_scenario_layer_imports_no_run_store_or_runner():
    banned = ("harness.store.results", "harness.run.runner", "harness.run.resume", "harness.run.merge")
    for m, deps in _imports_matching("harness.scenario").items():
        assert not [d for d in deps if d.startswith(banned)], m


def test_the_report_reads_stored_figures_and_imports_no_probe_code():
    for m, deps in _imports_matching("harness.report").items():
        assert not [d for d in deps if d.startswith("harness.probe")], m


def test_no_module_outside_a_kind_names_a_workload_kind():
    """A workload kind is named only in its own module (and documentation): the registry,
    summary, compare, report and history read the declarations."""
    from harness.workloads import kinds as declared

    kinds = list(declared())
    assert len(kinds) >= 6
    # (module, word): the same word in another sense (a tokenizer's decode method)
    other_sense = {("harness.quality.fit", "decode")}
    offenders = []
    for name, path in MODULES.items():
        if name.startswith("harness.workloads.") or name.startswith("harness.sim"):
            continue
        text = path.read_text(encoding="utf-8")
        for kind in kinds:
            if (name, kind) not in other_sense and re.search(rf"[\"']{kind}[\"']", text):
                offenders.append(f"{name}: {kind!r}")
    assert offenders == []


def test_architecture_doc_lists_every_module():
    doc = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    listed = set(re.findall(r"`(harness/[\w/]+\.py)`", doc))
    missing = sorted(
        str(p.relative_to(ROOT))
        for p in MODULES.values()
        if p.name not in ("__init__.py", "__main__.py") and str(p.relative_to(ROOT)) not in listed
    )
    assert missing == [], "docs/architecture.md's module table lacks: " + ", ".join(missing)
    gone = sorted(p for p in listed if not (ROOT / p).exists())
    assert gone == [], "docs/architecture.md names modules that do not exist: " + ", ".join(gone)

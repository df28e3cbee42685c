"""The house rules, checked: packages in one ordered list of layers that imports only go down
(function-level and TYPE_CHECKING imports included), no import cycles, no kind named outside its
module, and docs/architecture.md naming every module."""

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


def imports_of(name: str) -> set[str]:
    """harness modules `name` imports anywhere in its file: module level, inside functions and
    under `if TYPE_CHECKING:` alike (a type is a dependency too)."""
    path = MODULES[name]
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(tree):
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


# The packages of harness/ by stage, lowest first: a module imports only modules of its own
# package or of a package before it (function-level and `if TYPE_CHECKING:` imports included).
# docs/architecture.md draws the same list.
LAYERS = [
    "harness.core",  # leaves: exit codes, optional extras, safe YAML, model shapes, bundled scenarios, errors
    "harness.sim",  # the simulated server
    "harness.spec",  # the words a scenario is written in: value types, error items
    "harness.store",  # the run folder: layout, atomic I/O, names, secrets, records, variant status
    "harness.measures",  # metric declarations
    "harness.host",  # /proc, NVML, the fingerprint
    "harness.probe",  # platform probes
    "harness.server",  # one server: process, control plane, client, transport, clock, log, sampler
    "harness.workloads",  # what is sent: declarations, the kinds, prompts, datasets
    "harness.quality",  # the quality arm, its `quality:` block, parity
    "harness.scenario",  # YAML -> typed scenario and variants
    "harness.analysis",  # records -> summaries, frames, expectations, verdicts, run products
    "harness.run",  # running a scenario
    "harness.compare",  # comparisons and history
    "harness.report",  # the HTML report
    "harness.api",  # the Python API
    "harness.cli",  # the command line
]
TOP = {"harness", "harness.__main__"}  # the package itself (__version__) and `python -m harness`


def layer_of(module: str) -> int:
    for i, prefix in enumerate(LAYERS):
        if module == prefix or module.startswith(prefix + "."):
            return i
    raise AssertionError(f"{module} is in no layer of LAYERS")


def upward_imports() -> list[str]:
    out = []
    for m in sorted(MODULES):
        if m in TOP:
            continue
        for d in sorted(imports_of(m) - TOP):
            if layer_of(d) > layer_of(m):
                out.append(f"{m} -> {d}")
    return out


def test_every_module_is_in_a_layer():
    for m in MODULES:
        if m not in TOP:
            layer_of(m)


def test_imports_only_go_down_the_layers():
    assert upward_imports() == []


def test_the_layer_rule_sees_a_function_level_import_upward(tmp_path, monkeypatch):
    """Control: a store module importing the runner inside a function is refused."""
    bad = tmp_path / "bad.py"
    bad.write_text("def f():\n    from harness.run import runner\n")
    monkeypatch.setitem(MODULES, "harness.store.bad", bad)
    assert "harness.store.bad -> harness.run.runner" in upward_imports()


def test_no_module_outside_a_kind_names_a_workload_kind():
    """A workload kind is named only in its own module (and documentation): the registry,
    summary, compare, report and history read the declarations."""
    from harness.workloads import kinds as declared

    kinds = list(declared())
    assert len(kinds) >= 6
    # (module, word): the same word in another sense (a tokenizer's decode method)
    other_sense = {("harness.core.tokenizers", "decode")}
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


def test_architecture_doc_lists_each_module_in_its_packages_section():
    """Each module's row is under the section of its package: a heading naming `harness/<package>/`
    (a top-level module: its own path)."""
    doc = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    modules = doc[doc.index("## Modules") : doc.index("\n## ", doc.index("## Modules") + 1)]
    misplaced = []
    for section in re.split(r"(?m)^### ", modules)[1:]:
        heading = section.splitlines()[0]
        for path in re.findall(r"(?m)^\| `(harness/[\w/]+\.py)` \|", section):
            parts = path.split("/")
            home = f"`harness/{parts[1]}/" if len(parts) > 2 else f"`{path}`"
            if home not in heading:
                misplaced.append(f"{path} under '{heading}'")
    assert misplaced == []


MAX_LINES = 600  # a module over it is split by job; there are no exemptions


def test_no_module_is_over_600_lines():
    sizes = {str(p.relative_to(ROOT)): len(p.read_text(encoding="utf-8").splitlines()) for p in MODULES.values()}
    over = {m: n for m, n in sizes.items() if n > MAX_LINES}
    assert over == {}, f"over {MAX_LINES} lines, split them by job: {over}"

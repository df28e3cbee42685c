"""The readers of a run read it typed, through harness/store (issue #23).

harness/store parses each run-folder file once, brought up to today's version (`versions.upgrade`),
into frozen types: `Summary` (and its `SamplingSummary`, `TierPrediction`), `Manifest` (its
`BuildInfo`, `ProbeResult`), `StatusView` (its `Pools`, `Preflight`, `LogExcerpt`, `StartupRecord`),
`StoredTiming`, `StoredCost`, `StoredComparison`, `StoredVerdict`, `ParityFloor`. So in
harness/report, harness/compare and harness/analysis (read from the source):

- no ``x.get(...) or {}``: the chain that walks a stored file's JSON by hand, one missing key at a
  time (154 of them in harness when this rule was written, 69 in these three packages);
- no ``json.load`` / ``json.loads``: a run-folder file is read by harness/store, never by a reader.

Exempt, each for its reason (they read no run-folder JSON by hand): `EXEMPT_CHAINS`, `EXEMPT_JSON`.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("report", "compare", "analysis")
EXEMPT_CHAINS = {
    "harness/analysis/samples.py": "parses the sampler's raw samples.jsonl lines into the sampling summary it writes",
    "harness/compare/bisect.py": "reads its own bisect.json state and the user's scenario YAML, no run-folder file",
}
EXEMPT_JSON = {
    "harness/analysis/frames.py": "decodes the category values of its own frames cache (.npz), not a run-folder file",
}


def sources() -> Iterator[tuple[str, ast.Module]]:
    for package in PACKAGES:
        for path in sorted((ROOT / "harness" / package).rglob("*.py")):
            rel = str(path.relative_to(ROOT))
            yield rel, ast.parse(path.read_text(), filename=rel)


def get_or_empty_dict(tree: ast.AST) -> list[int]:
    """Lines of ``<expr>.get(...) or {}`` (the ``.get`` call anywhere before the ``{}`` of an ``or``)."""
    out = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.BoolOp) and isinstance(node.op, ast.Or)):
            continue
        last = node.values[-1]
        if not (isinstance(last, ast.Dict) and not last.keys):
            continue
        if any(
            isinstance(v, ast.Call) and isinstance(v.func, ast.Attribute) and v.func.attr == "get"
            for v in node.values[:-1]
        ):
            out.append(node.lineno)
    return sorted(out)


def json_loads(tree: ast.AST) -> list[int]:
    """Lines of a ``json.load(...)`` / ``json.loads(...)`` call (``import json`` or ``from json import load``)."""
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        dotted = isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == "json"
        if dotted and f.attr in ("load", "loads"):
            out.append(node.lineno)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "json":
            if any(a.name in ("load", "loads") for a in node.names):
                out.append(node.lineno)
    return sorted(out)


def test_the_checks_see_what_they_forbid():
    tree = ast.parse(
        "a = (s.get('x') or {}).get('y')\nb = s.get('x') or d.get('y') or {}\nc = s.get('x') or []\n"
        "import json\nd = json.loads(t)\nfrom json import load\n"
    )
    assert get_or_empty_dict(tree) == [1, 2]
    assert json_loads(tree) == [5, 6]


def test_readers_walk_no_stored_json_by_hand():
    found = {rel: lines for rel, tree in sources() if rel not in EXEMPT_CHAINS and (lines := get_or_empty_dict(tree))}
    assert not found, (
        "a '.get(...) or {}' chain in a reader: read the stored file through its harness/store type "
        f"(add the field it lacks there): {found}"
    )


def test_readers_never_load_json_themselves():
    found = {rel: lines for rel, tree in sources() if rel not in EXEMPT_JSON and (lines := json_loads(tree))}
    assert not found, f"json.load(s) in a reader: run-folder files are read by harness/store: {found}"


def test_the_exemptions_are_still_needed():
    """An exempt module that no longer needs it loses its exemption (so the list cannot rot)."""
    trees = dict(sources())
    assert all(get_or_empty_dict(trees[rel]) for rel in EXEMPT_CHAINS), EXEMPT_CHAINS
    assert all(json_loads(trees[rel]) for rel in EXEMPT_JSON), EXEMPT_JSON

"""Packaging: the extras pyproject.toml declares are the ones the code asks for; a command whose
extra is missing prints one line naming it and exits 2 (never a traceback); every package of
harness/ ships; the bundled scenarios run from any folder; result files are readable per umask;
`harness --help` starts with what the tool does. (.ci/wheel_smoke.sh builds the wheel and runs
the smoke scenario from it in a fresh venv.)"""

from __future__ import annotations

import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from harness.core import optional
from harness.core.bundled import resolve_scenario_path
from harness.quality.parity import mcnemar_exact_p
from harness.store import results

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "golden" / "runs"

tomllib = pytest.importorskip("tomllib")  # Python >= 3.11


def pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def dist_name(requirement: str) -> str:
    return re.split(r"[<>=!~;\[ ]", requirement, maxsplit=1)[0].strip().lower()


IMPORT_NAME = {
    "matplotlib": "matplotlib",
    "jinja2": "jinja2",
    "starlette": "starlette",
    "uvicorn": "uvicorn",
    "scipy": "scipy",
    "tokenizers": "tokenizers",
    "prometheus-client": "prometheus_client",
}
# the import name of each core dependency (its distribution's name where they differ)
CORE_IMPORT = {"pyyaml": "yaml", "nvidia-ml-py": "pynvml", "prometheus-client": "prometheus_client"}


def _imports(path: Path) -> set[str]:
    import ast

    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            out.add(node.module.split(".")[0])
    return out


def test_a_core_dependency_is_used_outside_the_simulator():
    """Core is what `harness run` needs against a real sglang: a package only the simulator
    imports belongs in [sim] (prometheus-client was core)."""
    users: dict[str, set[str]] = {}
    for path in (ROOT / "harness").rglob("*.py"):
        for name in _imports(path):
            users.setdefault(name, set()).add(path.relative_to(ROOT).parts[1])
    for dep in (dist_name(r) for r in pyproject()["project"]["dependencies"]):
        where = users.get(CORE_IMPORT.get(dep, dep), set())
        assert where - {"sim"}, f"{dep}: imported only by {sorted(where) or 'nothing'}"


def test_every_requirement_has_an_upper_bound():
    """docs/install.md's policy: each dependency bounded below the next untested major."""
    project = pyproject()["project"]
    reqs = list(project["dependencies"]) + [
        r for rs in project["optional-dependencies"].values() for r in rs if not r.startswith("hicache-harness")
    ]
    unbounded = [r for r in reqs if "<" not in r.split(";")[0] and "==" not in r]
    assert unbounded == []


def test_extras_in_pyproject_are_the_ones_the_code_asks_for():
    extras = pyproject()["project"]["optional-dependencies"]
    for extra, modules in optional.EXTRAS.items():
        declared = {IMPORT_NAME[dist_name(r)] for r in extras[extra]}
        assert declared == set(modules), extra
    core = {dist_name(r) for r in pyproject()["project"]["dependencies"]}
    assert "numpy" in core and "pandas" in core
    assert not core & {"matplotlib", "jinja2", "starlette", "uvicorn", "scipy", "tokenizers"}
    assert extras["gpu"] == ["sglang==0.5.17"]


def test_core_upper_bounds_on_the_majors_that_were_tested():
    deps = {dist_name(r): r for r in pyproject()["project"]["dependencies"]}
    extras = pyproject()["project"]["optional-dependencies"]
    assert "<4" in deps["pandas"] and "<3" in deps["numpy"]
    assert any("starlette" in r and "<2" in r for r in extras["sim"])


def test_every_package_ships():
    listed = set(pyproject()["tool"]["setuptools"]["packages"])
    found = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "harness").rglob("__init__.py")}
    assert found <= listed, found - listed
    data = pyproject()["tool"]["setuptools"]["package-data"]
    assert "templates/*.j2" in data["harness.report"]
    assert pyproject()["tool"]["setuptools"]["package-dir"]["harness.bundled_scenarios"] == "scenarios"


BLOCKING_MAIN = """
import importlib.abc, sys
BLOCKED = set(sys.argv[1].split(","))
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None
sys.meta_path.insert(0, Block())
from harness.cli import main
raise SystemExit(main(sys.argv[2:]))
"""


def harness_without(blocked: str, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """``harness ARGS`` in a Python where the modules ``blocked`` (comma-separated) are not installed."""
    return subprocess.run(
        [sys.executable, "-c", BLOCKING_MAIN, blocked, *args],
        capture_output=True,
        text=True,
        cwd=cwd or ROOT,
        timeout=120,
    )


@pytest.mark.parametrize(
    "blocked,args,line",
    [
        (
            "jinja2,matplotlib",
            ["report", "RUN"],
            "harness report needs the [report] extra: pip install 'hicache-harness[report]'",
        ),
        (
            "matplotlib",
            ["history", "sim_smoke"],
            "harness history needs the [report] extra: pip install 'hicache-harness[report]'",
        ),
        (
            "scipy",
            ["compare", "RUN", "--baseline", "latest"],
            "harness compare needs the [stats] extra: pip install 'hicache-harness[stats]'",
        ),
        (
            "starlette,uvicorn",
            ["sim", "--model-path", "m"],
            "harness sim needs the [sim] extra: pip install 'hicache-harness[sim]'",
        ),
        (
            "uvicorn",
            ["run", "scenarios/sim_smoke.yaml"],
            "harness run with backend: sim needs the [sim] extra: pip install 'hicache-harness[sim]'",
        ),
    ],
)
def test_a_missing_extra_is_one_line_and_exit_2(golden_run, blocked, args, line):
    run = golden_run("healthy")
    r = harness_without(blocked, *[str(run) if a == "RUN" else a for a in args])
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip().splitlines() == [line], r.stderr
    assert "Traceback" not in r.stderr + r.stdout


def test_what_needs_no_extra_runs_without_them(tmp_path):
    """validate, --dry-run and load need only the core."""
    blocked = "jinja2,matplotlib,scipy,starlette,uvicorn,tokenizers"
    r = harness_without(blocked, "validate", "scenarios/sim_smoke.yaml")
    assert r.returncode == 0, r.stderr
    r = harness_without(blocked, "run", "scenarios/sim_smoke.yaml", "--dry-run")
    assert r.returncode == 0, r.stderr
    r = harness_without(blocked, "load", str(GOLDEN / "healthy"), "--csv", str(tmp_path / "t"))
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "t" / "requests.csv").is_file()


def test_validate_and_run_after_an_earlier_run_need_no_stats_extra(golden_run, monkeypatch):
    """The plan for a verdict sizes repeats from an earlier run's spread with scipy; without the
    [stats] extra it is one line saying so, and validate still passes (it was exit 3, a traceback,
    as was `harness run` a second time after README's main job)."""
    run = golden_run("healthy")
    monkeypatch.setenv("GOLDEN_MODEL", str(ROOT / "scenarios" / "models" / "llama-tiny"))
    blocked = "jinja2,matplotlib,scipy,starlette,uvicorn,tokenizers"
    r = harness_without(blocked, "validate", "tests/golden/golden.yaml", "--results-dir", str(run.parent.parent))
    assert r.returncode == 0, r.stderr
    assert "plan for a verdict: not made (the plan for a verdict needs the [stats] extra" in r.stdout + r.stderr
    assert "Traceback" not in r.stdout + r.stderr


def test_require_names_the_extra_and_passes_through_broken_imports(monkeypatch):
    with pytest.raises(optional.MissingExtra) as ei:
        optional.require("no_such_module_for_the_test", "report", "harness report")
    assert str(ei.value) == "harness report needs the [report] extra: pip install 'hicache-harness[report]'"
    assert isinstance(ei.value, ImportError)
    monkeypatch.setitem(optional.EXTRAS, "report", ("json", "no_such_module_for_the_test"))
    assert optional.missing("report") == ["no_such_module_for_the_test"]
    with pytest.raises(optional.MissingExtra):
        optional.require_extra("report", "x")
    assert optional.require("json", "report").dumps({}) == "{}"


def test_the_bundled_smoke_scenario_resolves_from_any_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path, bundled = resolve_scenario_path("scenarios/sim_smoke.yaml")
    assert bundled and path.is_file() and path.name == "sim_smoke.yaml"
    assert (path.parent / "models" / "llama-tiny" / "config.json").is_file()
    (tmp_path / "scenarios").mkdir()
    (tmp_path / "scenarios" / "sim_smoke.yaml").write_text("name: mine\n")
    assert resolve_scenario_path("scenarios/sim_smoke.yaml") == (Path("scenarios/sim_smoke.yaml"), False)
    assert resolve_scenario_path("elsewhere/sim_smoke.yaml")[1] is False
    r = subprocess.run(
        [sys.executable, "-m", "harness", "validate", "sim_smoke.yaml"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    assert "using the one this package ships" in r.stderr and ": ok" in r.stdout


def test_result_files_are_readable_per_umask(tmp_path):
    mask = os.umask(0o022)
    os.umask(mask)
    assert results.FILE_MODE == 0o666 & ~mask
    results.write_json_atomic(tmp_path / "a.json", {"x": 1})
    results.write_text_atomic(tmp_path / "b.csv", "x\n1\n")
    for name in ("a.json", "b.csv"):
        assert stat.S_IMODE((tmp_path / name).stat().st_mode) == results.FILE_MODE, name
    if mask == 0o022:
        assert results.FILE_MODE == 0o644


def test_mcnemar_needs_no_scipy_and_matches_its_binomtest():
    # scipy.stats.binomtest(k, n, 0.5).pvalue for these (k, n): the values it gave
    assert mcnemar_exact_p(10, 0) == pytest.approx(2 / 1024, rel=1e-12)
    assert mcnemar_exact_p(3, 7) == pytest.approx(0.34375, rel=1e-12)
    assert mcnemar_exact_p(5, 5) == 1.0 and mcnemar_exact_p(0, 0) == 1.0
    assert mcnemar_exact_p(1, 30) == pytest.approx(2.9802322387695312e-08, rel=1e-9)
    scipy_stats = pytest.importorskip("scipy.stats")
    for lost in range(0, 25):
        for gained in range(0, 25):
            if lost + gained:
                want = scipy_stats.binomtest(lost, lost + gained, 0.5).pvalue
                assert mcnemar_exact_p(lost, gained) == pytest.approx(want, rel=1e-9, abs=1e-300)


def test_help_says_what_the_tool_does():
    r = subprocess.run([sys.executable, "-m", "harness", "--help"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0
    text = r.stdout
    assert "parse arguments" not in text and "Benchmark and regression harness" in text
    assert "Exit codes:" in text

"""`harness validate` loads no HTTP client and no pandas: a scenario's declarations (the kinds'
configs, the metrics' names, the plan of a scenario that never ran) are read without the code
that sends requests or reads frames. Checked in a fresh interpreter, by its sys.modules."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.conftest import REPO

HEAVY = ("httpx", "httpcore", "pandas", "matplotlib", "scipy")
CODE = """
import json, sys
{pre}
from harness.cli import main
code = main(["validate", sys.argv[1]])
print(json.dumps({{"code": int(code), "heavy": sorted({{m.split(".")[0] for m in sys.modules}} & set(sys.argv[2:]))}}))
"""


def _validate(tmp_path, pre: str = "") -> dict:
    out = subprocess.run(
        [sys.executable, "-c", CODE.format(pre=pre), str(REPO / "scenarios" / "sim_smoke.yaml"), *HEAVY],
        cwd=tmp_path,  # no results/ here: a scenario that never ran
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_validate_imports_no_http_client_and_no_pandas(tmp_path):
    got = _validate(tmp_path)
    assert got == {"code": 0, "heavy": []}


def test_the_check_sees_a_heavy_import(tmp_path):
    """Control: the same check, with the streaming client loaded first, reports httpx."""
    assert "httpx" in _validate(tmp_path, pre="import harness.server.client")["heavy"]

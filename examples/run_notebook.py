"""Run a notebook's code cells, in order, as one Python script (a "script export"), so that CI
can execute the examples without a Jupyter kernel: ``python examples/run_notebook.py NOTEBOOK
[RUN_DIR]``. RUN_DIR (default: the notebook's own) is passed as the ``HARNESS_RUN`` environment
variable, which the example notebooks read. IPython magics (``%...``, ``!...``) are skipped.
Exit status: 0 when every cell ran, 1 on the first cell that raised (its traceback is printed)."""

from __future__ import annotations

import json
import os
import sys
import traceback
from pathlib import Path


def code_cells(notebook: Path) -> list[str]:
    nb = json.loads(notebook.read_text(encoding="utf-8"))
    if nb.get("nbformat") != 4:
        raise SystemExit(f"{notebook}: not an nbformat 4 notebook")
    cells = []
    for cell in nb["cells"]:
        if cell.get("cell_type") != "code":
            continue
        source = cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])
        cells.append("\n".join(line for line in source.splitlines() if not line.lstrip().startswith(("%", "!"))))
    return cells


def main(argv: list[str]) -> int:
    if not argv or len(argv) > 2:
        print(__doc__, file=sys.stderr)
        return 2
    notebook = Path(argv[0])
    if len(argv) == 2:
        os.environ["HARNESS_RUN"] = str(Path(argv[1]).resolve())
    namespace: dict = {"__name__": "__main__"}
    for i, source in enumerate(code_cells(notebook), 1):
        print(f"--- cell {i}")
        try:
            exec(compile(source, f"{notebook.name}[cell {i}]", "exec"), namespace)  # noqa: S102 - our own notebook
        except Exception:  # noqa: BLE001 - report which cell broke, then fail
            traceback.print_exc()
            print(f"{notebook}: cell {i} raised", file=sys.stderr)
            return 1
    print(f"{notebook}: {i} code cells ran")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

#!/usr/bin/env bash
# Execute the example notebooks against the committed golden run, so that they cannot rot.
# A "script export" (examples/run_notebook.py: the code cells in order, as one script) instead of
# a Jupyter kernel: nothing to install beyond the harness. Run after .ci/run's install step.
# Usage: .ci/notebook.sh [PYTHON]   (default .venv/bin/python); exits non-zero when a cell raises.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${1:-.venv/bin/python}
case "$PY" in /*) ;; */*) PY="$PWD/$PY" ;; *) PY=$(command -v "$PY") ;; esac
root=$PWD
run="$PWD/tests/golden/runs/healthy"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for nb in examples/*.ipynb; do
  echo "notebook: $nb against $run"
  # from an empty folder: a notebook must not depend on the current directory
  (cd "$work" && "$PY" "$root/examples/run_notebook.py" "$root/$nb" "$run") >"$work/out.txt" 2>&1 \
    || { cat "$work/out.txt"; echo "notebook: FAIL: $nb"; exit 1; }
  tail -1 "$work/out.txt"
done

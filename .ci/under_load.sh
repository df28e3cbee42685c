#!/usr/bin/env bash
# The suite once more under CPU burners: one busy-loop process per core beside README's test
# command, so a test that only passes on an idle machine fails here instead of in somebody's
# loaded run. The default suite takes ~2 min idle on 2 cores; under a burner per core ~2-3x that,
# far inside CI's 90-minute limit. The burners are this script's children, stopped by their PIDs.
# Usage: bash .ci/under_load.sh [pytest args...]   (default: README's -q -n 4 --dist loadfile)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
n=$(nproc 2>/dev/null || echo 2)
pids=()
stop() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap stop EXIT
for _ in $(seq "$n"); do
  "$PY" -c "while True: pass" &
  pids+=("$!")
done
echo "ci: the suite under $n CPU burners (PIDs ${pids[*]})"
if [ "$#" -eq 0 ]; then set -- -q -n 4 --dist loadfile; fi
"$PY" -m pytest "$@"

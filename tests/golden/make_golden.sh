#!/usr/bin/env bash
# Regenerates the golden run folders (tests/golden/runs/) with the simulator.
# Usage: bash tests/golden/make_golden.sh OUT_DIR   (then copy OUT_DIR/* into tests/golden/runs/)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="$1"; mkdir -p "$out"
py="${PYTHON:-python3}"
export GOLDEN_MODEL="${GOLDEN_MODEL:-$here/../../scenarios/models/llama-tiny}"
h() { "$py" -m harness "$@"; }
h run "$here/golden.yaml" --results-dir "$out/r" --no-report
mv "$out"/r/golden/* "$out/healthy"
SIM_TIME_SCALE=0.5 h run "$here/golden.yaml" --results-dir "$out/r" --no-report || true   # 2x slower build
mv "$out"/r/golden/* "$out/regressed"
h run "$here/golden.yaml" --results-dir "$out/s" --no-report --shard 1/2
h run "$here/golden.yaml" --results-dir "$out/s" --no-report --shard 2/2
h merge "$out"/s/golden/* --results-dir "$out/m"
mv "$out"/m/golden/* "$out/merged"
# interrupted: SIGINT while the second variant runs its workloads
set -m  # job control: a background job would otherwise ignore SIGINT
h run "$here/golden.yaml" --results-dir "$out/i" --no-report & pid=$!
while ! grep -qs '"state": "running"' "$out"/i/golden/*/on-r2/status.json; do sleep 0.2; done
sleep 1; kill -INT $pid; wait $pid || true
mv "$out"/i/golden/* "$out/interrupted"
rm -rf "$out/r" "$out/s" "$out/m" "$out/i"
find "$out" -name .lock -delete

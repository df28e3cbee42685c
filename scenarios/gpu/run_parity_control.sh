#!/usr/bin/env bash
# The parity negative control on real sglang, N times, in one device call, from the repo root:
# installs the offline site, makes the random llama-tiny checkpoint and the broken sglang copy,
# runs scenarios/gpu/h200_parity_control.yaml N times (each with its own SEED) in parallel, spread
# over the GPUs, prints one verdict line per run and a table, and packs the results into $OUT.
#
#   bash scenarios/gpu/run_parity_control.sh 10
#
# All N runs start at once (PARALLEL=N), round-robin over the GPUs; each run's three servers come
# up one after another. Timing (docs/gpu.md "How to run these"): a run is ~3 server starts
# (45-80 s each warm, slower while many start at once, ~+50 s of JIT on a fresh machine) plus
# ~1 min of quality, ~4.5-6.5 min in all; 10 runs at once on 2 H200s (5 servers per GPU, 32 cores)
# is what fits ~8 minutes. On one GPU (16 cores) use N=5. A run cut by the budget is
# INTERRUPTED and its table line says which arm is missing.
#
# $OUT gets: parity_table.txt (the lines and the table), parity-results.tar.gz (every run folder
# without samples.jsonl: parity.json, quality.jsonl, status.json, server logs), parity_run1.html
# (the report of run 1), run_parity.log, make_broken.txt. Environment: OUT (/tmp/out-parity), RESULTS
# (results/parity), CALL_BUDGET_S (540), PARALLEL (N), BASE_SEED (100: run i has SEED=BASE_SEED+i),
# SITE (/tmp/sglang-site), BROKEN_SGLANG (/tmp/sglang-broken), MODEL_PATH (/tmp/models/llama-sharp),
# SCENARIO, SKIP_INSTALL=1, PY (python3), GPUS (a list like "0 1"; default every GPU nvidia-smi shows).
set -u
START=$(date +%s)
N=${1:-}
case "$N" in ''|*[!0-9]*) echo "usage: $0 N   (number of runs)" >&2; exit 2 ;; esac
[ "$N" -ge 1 ] || { echo "N must be >= 1" >&2; exit 2; }
SCENARIO=${SCENARIO:-scenarios/gpu/h200_parity_control.yaml}
RESULTS=${RESULTS:-results/parity}
OUT=${OUT:-/tmp/out-parity}
PY=${PY:-python3}
CALL_BUDGET_S=${CALL_BUDGET_S:-540}
RESERVE_S=${RESERVE_S:-50}            # after the runs: harness stop on SIGTERM, table, report, tar
PARALLEL=${PARALLEL:-$N}
BASE_SEED=${BASE_SEED:-100}
export SITE=${SITE:-/tmp/sglang-site}
export BROKEN_SGLANG=${BROKEN_SGLANG:-/tmp/sglang-broken}
export MODEL_PATH=${MODEL_PATH:-/tmp/models/llama-sharp}
mkdir -p "$OUT" "$RESULTS"
LOG="$OUT/run_parity.log"
exec > >(tee -a "$LOG") 2>&1
say() { echo "[$(( $(date +%s) - START ))s] $*"; }

if [ "${SKIP_INSTALL:-0}" != 1 ]; then
  # shellcheck disable=SC1091
  source .gpu/install.sh || { say "install failed"; exit 3; }
  if [ ! -f "$MODEL_PATH/config.json" ]; then
    "$PY" .gpu/make_random_model.py .gpu/models/llama-tiny "$MODEL_PATH" 0 40 || { say "model failed"; exit 3; }
  fi
  if ! bash scenarios/gpu/make_broken_hicache.sh "$SITE" "$BROKEN_SGLANG" > "$OUT/make_broken.txt" 2>&1; then
    cat "$OUT/make_broken.txt"; say "broken copy failed"; exit 3
  fi
  tail -n 4 "$OUT/make_broken.txt"
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
if [ -z "${GPUS:-}" ]; then
  GPUS=$(nvidia-smi --query-gpu=index --format=csv,noheader 2>/dev/null | tr '\n' ' ')
  GPUS=${GPUS:-0}
fi
read -r -a GPU_LIST <<< "$GPUS"
BUDGET=$(( CALL_BUDGET_S - ($(date +%s) - START) - RESERVE_S ))
say "$N run(s), $PARALLEL at a time, on GPU(s) ${GPU_LIST[*]}, ${BUDGET}s for the runs"

PIDS=()
for i in $(seq 1 "$N"); do
  while [ "$(jobs -rp | wc -l)" -ge "$PARALLEL" ]; do sleep 2; done
  LEFT=$(( CALL_BUDGET_S - RESERVE_S - ($(date +%s) - START) ))
  if [ "$LEFT" -lt 120 ]; then say "run $i not started: ${LEFT}s left"; continue; fi
  GPU=${GPU_LIST[$(( (i - 1) % ${#GPU_LIST[@]} ))]}
  SEED=$(( BASE_SEED + i )) CUDA_VISIBLE_DEVICES=$GPU timeout -s TERM -k 30 "$LEFT" \
    "$PY" -m harness run "$SCENARIO" --results-dir "$RESULTS/run-$i" --no-report \
    > "$RESULTS/run-$i.out" 2>&1 &
  PIDS+=($!)
  say "run $i: GPU $GPU, SEED $(( BASE_SEED + i )), pid $!"
  sleep 1   # stagger the starts a little (ports, first imports)
done
for p in "${PIDS[@]}"; do wait "$p"; done
say "all runs ended"
for i in $(seq 1 "$N"); do
  [ -f "$RESULTS/run-$i.out" ] && echo "run $i: $(grep -E '^verdict:' "$RESULTS/run-$i.out" | tail -n 1)"
done

"$PY" scenarios/gpu/parity_table.py "$RESULTS" --out "$OUT/parity_table.txt"
RUN1=$(find "$RESULTS/run-1" -name manifest.json -printf '%h\n' 2>/dev/null | head -n 1)
if [ -n "$RUN1" ]; then
  "$PY" -m harness report "$RUN1" --reports-dir "$OUT/reports" >/dev/null 2>&1 \
    && cp "$(find "$OUT/reports" -name index.html | head -n 1)" "$OUT/parity_run1.html"
  rm -rf "$OUT/reports"
fi
tar -czf "$OUT/parity-results.tar.gz" --exclude=samples.jsonl "$RESULTS"
ls -la "$OUT"
say "done"

#!/bin/bash
# Session 4, device call 3: the 8B scenario's io_backend direct + write_back variants, one H200.
set -u
START=$(date +%s); say() { echo "[$(( $(date +%s) - START ))s] $*"; }
cd "$(dirname "$0")/snap" && ln -sfn .. .gpu
source .gpu/install.sh
export PYTHONPATH=$PWD:$PYTHONPATH PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=index,name,memory.used,memory.total,driver_version --format=csv,noheader
mkdir -p /tmp/r8
REPEATS_8B=2 timeout -s TERM -k 30 $((550 - ($(date +%s) - START))) python3 -m harness run scenarios/gpu/h200_8b.yaml \
  --only on-r2-layer_first-write_back-direct --only on-r2-page_first-write_back-direct \
  --results-dir /tmp/r8 --reports-dir /tmp/r8/reports > /tmp/r8/run.out 2>&1
say "run rc=$?"
tail -n 40 /tmp/r8/run.out
grep -h "switching" /tmp/r8/h200_8b/*/*/server.log 2>/dev/null | head -3
find /tmp/r8 -name samples.jsonl -delete
tar -C /tmp -czf $OUT/r8.tgz r8
ls -la $OUT

#!/bin/bash
# Session 5, device call 4 (a fresh machine; the session's last device time): issue #27 item 6 on
# the H200 -- the 8B shape's page_first + direct + write_back (sglang 0.5.17 runs it as
# page_first_direct) must come out "worse than off", a healthy layer_first variant within its
# roofline. scenarios/gpu/h200_8b.yaml, one run per variant (page_first_direct 1 repeat, then
# layer_first 2), each with the probe (the roofline's pinned H2D), from a snapshot of main.
#   run(carry=[".gpu"], command="bash .gpu/callE3.sh")
set -u
START=$(date +%s); say() { echo "[$(( $(date +%s) - START ))s] $*"; }
left() { echo $(( $1 - ($(date +%s) - START) )); }
REPO=$(pwd); G=$REPO/.gpu
rm -rf /tmp/snap && mkdir -p /tmp/snap && tar -xzf "$G/snap.tgz" -C /tmp/snap && cd /tmp/snap && ln -sfn "$G" .gpu
source .gpu/install.sh
export PYTHONPATH=$PWD:$PYTHONPATH PYTHONUNBUFFERED=1
R=/tmp/r8; mkdir -p $R
nvidia-smi --query-gpu=index,name,memory.used,memory.total,driver_version --format=csv,noheader
# the variant that must come out "worse than off" first (it also takes the fresh machine's JIT),
# then the healthy layer_first one with what is left
REPEATS_8B=1 timeout -s TERM -k 20 "$(left 300)" python3 -m harness run scenarios/gpu/h200_8b.yaml --probe \
  --only on-r2-page_first-write_back-direct --results-dir $R/results --reports-dir $R/reports > $R/run-pfd.out 2>&1
say "page_first direct write_back rc=$?"; tail -n 25 $R/run-pfd.out
REPEATS_8B=2 timeout -s TERM -k 20 "$(left ${CALL_BUDGET_S:-490})" python3 -m harness run scenarios/gpu/h200_8b.yaml --probe \
  --only on-r2-layer_first-write_through-kernel --results-dir $R/results --reports-dir $R/reports > $R/run-lf.out 2>&1
say "layer_first kernel write_through rc=$?"; tail -n 25 $R/run-lf.out
find $R/results -name "server*.log" -exec grep -H "switching to page first direct" {} + | head -3
find $R -name samples.jsonl -delete
tar -C /tmp -czf $OUT/r8.tgz r8
ls -la $OUT; say done

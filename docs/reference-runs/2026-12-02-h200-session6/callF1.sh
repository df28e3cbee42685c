#!/bin/bash
# Session 6, device call 1: issue #27 item 6 on the H200 -- the 8B shape's page_first + direct +
# write_back (sglang 0.5.17 runs it as page_first_direct) must come out "worse than off"; a healthy
# layer_first variant within its roofline. scenarios/gpu/h200_8b.yaml, with the probe, from a
# snapshot of main at $(git rev-parse HEAD).   run(carry=[".gpu"], command="bash .gpu/callF1.sh")
set -u
START=$(date +%s); say() { echo "[$(( $(date +%s) - START ))s] $*"; }
left() { echo $(( $1 - ($(date +%s) - START) )); }
REPO=$(pwd); G=$REPO/.gpu
rm -rf /tmp/snap && mkdir -p /tmp/snap && tar -xzf "$G/snap.tgz" -C /tmp/snap && cd /tmp/snap && ln -sfn "$G" .gpu
source .gpu/install.sh
export PYTHONPATH=$PWD:$PYTHONPATH PYTHONUNBUFFERED=1
R=/tmp/r9; mkdir -p $R
nvidia-smi --query-gpu=index,name,memory.used,memory.total,driver_version --format=csv,noheader
REPEATS_8B=2 timeout -s TERM -k 20 "$(left 560)" python3 -m harness run scenarios/gpu/h200_8b.yaml --probe \
  --only on-r2-page_first-write_back-direct --only on-r2-layer_first-write_back-direct \
  --results-dir $R/results --reports-dir $R/reports > $R/run.out 2>&1
say "rc=$?"; tail -n 60 $R/run.out
find $R/results -name "server*.log" -exec grep -H "switching to page first direct" {} + | head -3
find $R -name samples.jsonl -delete
tar -C /tmp -czf $OUT/r9.tgz r9
ls -la $OUT; say done

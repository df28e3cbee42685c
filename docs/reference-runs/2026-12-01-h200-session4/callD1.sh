#!/bin/bash
# Session 4, device call 1: train the answering model (~7.3 min, cores 0-7) beside the seed
# scenarios 000 and 004 on real sglang (cores 8-15), one H200.
set -u
START=$(date +%s); say() { echo "[$(( $(date +%s) - START ))s] $*"; }
left() { echo $(( $1 - ($(date +%s) - START) )); }
REPO=$(pwd)
cd "$(dirname "$0")/snap" && ln -sfn .. .gpu
source .gpu/install.sh
export PYTHONPATH=$PWD:$PYTHONPATH PYTHONUNBUFFERED=1
mkdir -p /tmp/r
nvidia-smi --query-gpu=index,name,memory.used,memory.total,driver_version --format=csv,noheader
nproc; free -g | head -2
( taskset -c 0-7 python3 scenarios/gpu/train_answering_model.py /tmp/models/answering --minutes 7.3 --workers 6 > /tmp/r/train.out 2>&1; echo "train rc=$?" >> /tmp/r/train.out ) &
TRAIN=$!
sleep 2
timeout -s TERM -k 20 $(left 535) taskset -c 8-15 python3 -m harness run scenarios/seeds/000.yaml --results-dir /tmp/r/seeds --reports-dir /tmp/r/reports > /tmp/r/seed000.out 2>&1 &
S0=$!
sleep 4
timeout -s TERM -k 20 $(left 535) taskset -c 8-15 python3 -m harness run scenarios/seeds/004.yaml --results-dir /tmp/r/seeds --reports-dir /tmp/r/reports > /tmp/r/seed004.out 2>&1 &
S4=$!
wait $TRAIN; say "train done"; tail -n 4 /tmp/r/train.out
cp /tmp/models/answering/train_report.json /tmp/r/ 2>/dev/null
mkdir -p "$REPO/.answering" && cp -r /tmp/models/answering "$REPO/.answering/" && say "model kept in $REPO/.answering"
tar -C /tmp/models -czf $OUT/answering.tgz answering
wait $S0; say "seed000 rc=$?"; wait $S4; say "seed004 rc=$?"
for f in seed000 seed004; do echo "---- $f"; tail -n 25 /tmp/r/$f.out; done
grep -h "Mamba Cache is allocated\|hierarchical Mamba\|host memory for" /tmp/r/seeds/*/*/*/server.log 2>/dev/null | head -12
find /tmp/r -name samples.jsonl -delete
tar -C /tmp -czf $OUT/r.tgz r
ls -la $OUT

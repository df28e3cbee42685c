#!/bin/bash
# Device call A: answering model (train + OFF/ON/broken) and multi-turn clients, one H200.
set -u
START=$(date +%s); say() { echo "[$(( $(date +%s) - START ))s] $*"; }
cd "$(dirname "$0")/snap" && ln -sfn .. .gpu
source .gpu/install.sh
export PYTHONPATH=$PWD:$PYTHONPATH
mkdir -p /tmp/r
nvidia-smi --query-gpu=index,name,memory.used,memory.total,driver_version --format=csv,noheader
python3 .gpu/make_random_model.py .gpu/models/llama-tiny /tmp/models/llama-sharp 0 40 >/tmp/r/mkmodel.out 2>&1; say "random model rc=$?"
export BROKEN_SGLANG=/tmp/broken-sglang
bash scenarios/gpu/make_broken_hicache.sh /tmp/sglang-site $BROKEN_SGLANG > /tmp/r/broken.out 2>&1; say "broken copy rc=$?"
python3 scenarios/gpu/train_answering_model.py /tmp/models/answering --minutes 2.5 > /tmp/r/train.out 2>&1; say "train rc=$?"
tail -5 /tmp/r/train.out
cp /tmp/models/answering/train_report.json /tmp/r/ 2>/dev/null
timeout -s TERM -k 20 $((560 - ($(date +%s) - START))) python3 -m harness run scenarios/gpu/h200_answering.yaml --only off --only on-r2-broken --results-dir /tmp/r/broken --reports-dir /tmp/r/reports > /tmp/r/broken_run.out 2>&1 &
sleep 3
timeout -s TERM -k 20 $((560 - ($(date +%s) - START))) python3 -m harness run scenarios/gpu/h200_multiturn.yaml --results-dir /tmp/r/multiturn --reports-dir /tmp/r/reports > /tmp/r/multiturn.out 2>&1 &
sleep 3
timeout -s TERM -k 20 $((560 - ($(date +%s) - START))) python3 -m harness run scenarios/gpu/h200_answering.yaml --only off --only on-r2 --results-dir /tmp/r/stock --reports-dir /tmp/r/reports > /tmp/r/stock_run.out 2>&1
say "stock rc=$?"
wait
say "all done"
for f in broken_run stock_run multiturn; do echo "---- $f"; tail -n 30 /tmp/r/$f.out; done
find /tmp/r -name samples.jsonl -delete
tar -C /tmp -czf $OUT/r.tgz r
ls -la $OUT

#!/bin/bash
# Session 4, device call 2: serve the trained answering model OFF / ON / ON-broken (two runs side
# by side, as the third session's callA), one H200. Reuses the model of call 1 when the machine is
# still warm (.answering in the repo root), else trains 3 min first.
set -u
START=$(date +%s); say() { echo "[$(( $(date +%s) - START ))s] $*"; }
left() { echo $(( $1 - ($(date +%s) - START) )); }
REPO=$(pwd)
cd "$(dirname "$0")/snap" && ln -sfn .. .gpu
source .gpu/install.sh
export PYTHONPATH=$PWD:$PYTHONPATH PYTHONUNBUFFERED=1
mkdir -p /tmp/r2 /tmp/models
if [ -f "$REPO/.answering/answering/config.json" ]; then
  say "warm machine: reusing the model of call 1"; rm -rf /tmp/models/answering; cp -r "$REPO/.answering/answering" /tmp/models/
elif [ -f /tmp/models/answering/config.json ]; then say "warm machine: /tmp/models/answering present"
else
  say "fresh machine: training 3 min"; python3 scenarios/gpu/train_answering_model.py /tmp/models/answering --minutes 3 > /tmp/r2/train.out 2>&1; tail -3 /tmp/r2/train.out
fi
cp /tmp/models/answering/train_report.json /tmp/r2/ 2>/dev/null
export BROKEN_SGLANG=/tmp/broken-sglang
[ -d $BROKEN_SGLANG ] || bash scenarios/gpu/make_broken_hicache.sh /tmp/sglang-site $BROKEN_SGLANG > /tmp/r2/broken.out 2>&1; say "broken copy ready"
timeout -s TERM -k 20 $(left 560) python3 -m harness run scenarios/gpu/h200_answering.yaml --only off --only on-r2-broken --results-dir /tmp/r2/broken --reports-dir /tmp/r2/reports > /tmp/r2/broken_run.out 2>&1 &
B=$!
sleep 4
timeout -s TERM -k 20 $(left 560) python3 -m harness run scenarios/gpu/h200_answering.yaml --only off --only on-r2 --results-dir /tmp/r2/stock --reports-dir /tmp/r2/reports > /tmp/r2/stock_run.out 2>&1
say "stock rc=$?"; wait $B; say "broken rc=$?"
for f in broken_run stock_run; do echo "---- $f"; tail -n 30 /tmp/r2/$f.out; done
find /tmp/r2 -name samples.jsonl -delete
tar -C /tmp -czf $OUT/r2.tgz r2
ls -la $OUT

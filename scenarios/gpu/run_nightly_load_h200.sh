#!/bin/bash
# Nights of scenarios/gpu/h200_nightly_load.yaml on one H200 (issue #24 item 9), each a build at
# /tmp/sglang-nightly made by make_slow_hicache.sh (repeat 1: the stock site, an inert copy; repeat
# N: every host-to-device layer load issued N times), one `harness run` per night into one results
# folder, then `harness compare NIGHT --baseline latest` after each night. Run folders (samples
# dropped) come back in $OUT/rn.tgz; the consoles in $OUT/*.out.
#   run(carry=[".gpu"], command="NIGHTS='n1-stock:1 n2-stock:1' bash scenarios/gpu/run_nightly_load_h200.sh")
#   run(carry=[".gpu"], command="NIGHTS='n3-slow:3' bash scenarios/gpu/run_nightly_load_h200.sh")   # warm: the nights before are still in /tmp/rn
# CALL_BUDGET_S (575): a night starts only with NIGHT_MIN_S (230) left.
set -u
START=$(date +%s); say() { echo "[$(( $(date +%s) - START ))s] $*"; }
left() { echo $(( ${CALL_BUDGET_S:-575} - ($(date +%s) - START) )); }
OUT=${OUT:-/tmp/out-nightly}; mkdir -p "$OUT"
source .gpu/install.sh   # unpacks the site to /tmp/sglang-site once (a warm machine keeps it), sets PYTHONPATH
export PYTHONPATH=$PWD:$PYTHONPATH PYTHONUNBUFFERED=1
R=/tmp/rn; mkdir -p $R/results
nvidia-smi --query-gpu=index,name,memory.used,memory.total,driver_version --format=csv,noheader
B=/tmp/sglang-nightly; mkdir -p $B
for spec in ${NIGHTS:-n1-stock:1}; do
  name=${spec%%:*}; rep=${spec##*:}
  if [ "$(left)" -lt "${NIGHT_MIN_S:-230}" ]; then say "skip $name: $(left) s left"; continue; fi
  bash scenarios/gpu/make_slow_hicache.sh /tmp/sglang-site $B "$rep" > $R/$name-build.out 2>&1 || { say "build $name failed"; cat $R/$name-build.out; continue; }
  say "night $name (repeat=$rep)"
  timeout -s TERM -k 20 "$(( $(left) - 15 ))" python3 -m harness run scenarios/gpu/h200_nightly_load.yaml \
    --results-dir $R/results --reports-dir $R/reports > $OUT/$name.out 2>&1
  say "night $name rc=$?"; tail -n 14 $OUT/$name.out
  NEW=$(ls -td $R/results/h200_nightly_load/*/ | head -1)
  python3 -m harness compare "$NEW" --baseline latest --pool 3 --markdown $OUT/$name-compare.md > $OUT/$name-compare.out 2>&1
  say "compare $name vs latest (pool 3): rc=$?"; tail -n 12 $OUT/$name-compare.out
done
find $R/results -name "server*.log" -exec grep -H "HICACHE_SLOW_LOAD active" {} + | head -4
mkdir -p /tmp/rncopy && rm -rf /tmp/rncopy/* && cp -r $R/results /tmp/rncopy/ && find /tmp/rncopy -name samples.jsonl -delete
tar -C /tmp/rncopy -czf $OUT/rn.tgz results
ls -la $OUT; say done

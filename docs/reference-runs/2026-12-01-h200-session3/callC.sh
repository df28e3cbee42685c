#!/bin/bash
# Device call C (one H200): two sglang builds in one run (stock vs patched copy), the file storage
# tier (L3), and the client side by side on the GPU host's cores, all at once:
#   harness runs and their servers on cores 0-11, the client benchmark alone on cores 12-15.
set -u
START=$(date +%s); say() { echo "[$(( $(date +%s) - START ))s] $*"; }
cd "$(dirname "$0")/snap" && ln -sfn .. .gpu
source .gpu/install.sh
export PYTHONPATH=$PWD:$PYTHONPATH
mkdir -p /tmp/rc
nproc; nvidia-smi --query-gpu=index,name,memory.used,memory.total,driver_version --format=csv,noheader
python3 .gpu/make_random_model.py .gpu/models/llama-tiny /tmp/models/llama-sharp 0 40 >/tmp/rc/mkmodel.out 2>&1; say "random model rc=$?"
bash scenarios/gpu/make_broken_hicache.sh /tmp/sglang-site /tmp/sglang-patched > /tmp/rc/patched.out 2>&1; say "patched copy rc=$?"
rm -rf /tmp/harness-hicache-l3
LEFT=$((520 - ($(date +%s) - START)))
SGLANG_EXTRA_ARGS="--disable-cuda-graph" taskset -c 0-11 timeout -s INT -k 20 $LEFT python3 -m harness run scenarios/gpu/h200_builds.yaml \
  --results-dir /tmp/rc/builds --reports-dir /tmp/rc/reports > /tmp/rc/builds.out 2>&1 &
P1=$!
sleep 2
taskset -c 0-11 timeout -s INT -k 20 $LEFT python3 -m harness run scenarios/gpu/h200_storage.yaml --probe \
  --results-dir /tmp/rc/storage --reports-dir /tmp/rc/reports > /tmp/rc/storage.out 2>&1 &
P2=$!
python3 -c 'from harness.server.client import client_stack; print("client:", client_stack())' > /tmp/rc/client_stack.txt 2>&1
taskset -c 12-15 timeout 220 python3 benchmarks/client_fidelity.py --quick --clients reference,harness,harness-uvloop \
  --levels 1,64,256,512 --json /tmp/rc/fidelity.json > /tmp/rc/fidelity.txt 2>&1; say "fidelity rc=$?"
taskset -c 12-15 timeout 60 python3 benchmarks/schedule_keeping.py --seconds 3 --json /tmp/rc/schedule.json > /tmp/rc/schedule.txt 2>&1; say "schedule rc=$?"
wait $P1; say "builds rc=$?"
wait $P2; say "storage rc=$?"
cat /tmp/rc/client_stack.txt; tail -n 30 /tmp/rc/fidelity.txt; tail -n 10 /tmp/rc/schedule.txt
for f in builds storage; do echo "---- $f"; grep -v "^\[" /tmp/rc/$f.out | tail -n 25; done
python3 - <<'PY'
import json, glob
for m in glob.glob('/tmp/rc/builds/h200_builds/*/manifest.json'):
    for v in json.load(open(m))['variants']:
        b = v.get('build') or {}
        print(v['name'], b.get('build'), b.get('version'), b.get('imported_file'))
PY
ls -la /tmp/harness-hicache-l3 2>/dev/null | head -3; du -sh /tmp/harness-hicache-l3 2>/dev/null
find /tmp/rc -name samples.jsonl -delete
tar -C /tmp -czf $OUT/rc.tgz rc
ls -la $OUT

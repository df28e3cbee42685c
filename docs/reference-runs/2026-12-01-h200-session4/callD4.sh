#!/bin/bash
# Session 4, device call 4: seed 004 again with non-aligned prompts (cores 0-11), beside the client
# benchmarks on the 16-core host (cores 12-15): schedule keeping and the side-by-side.
set -u
START=$(date +%s); say() { echo "[$(( $(date +%s) - START ))s] $*"; }
left() { echo $(( $1 - ($(date +%s) - START) )); }
cd "$(dirname "$0")/snap" && ln -sfn .. .gpu
source .gpu/install.sh
export PYTHONPATH=$PWD:$PYTHONPATH PYTHONUNBUFFERED=1
mkdir -p /tmp/r4
grep -n "prompt_tokens" scenarios/seeds/004.yaml
timeout -s TERM -k 20 $(left 440) taskset -c 0-11 python3 -m harness run scenarios/seeds/004.yaml --results-dir /tmp/r4/seeds --reports-dir /tmp/r4/reports > /tmp/r4/seed004.out 2>&1 &
S4=$!
sleep 20
taskset -c 12-15 python3 benchmarks/schedule_keeping.py --seconds 3 --json /tmp/r4/sched.json > /tmp/r4/schedule_keeping.txt 2>&1; say "schedule_keeping rc=$?"
taskset -c 12-15 timeout $(left 400) python3 benchmarks/client_fidelity.py --quick --clients reference,harness-uvloop --levels 1,64,512 --json /tmp/r4/fidelity.json > /tmp/r4/client_fidelity.txt 2>&1; say "client_fidelity rc=$?"
wait $S4; say "seed004 rc=$?"
tail -n 8 /tmp/r4/schedule_keeping.txt; tail -n 8 /tmp/r4/client_fidelity.txt
tail -n 12 /tmp/r4/seed004.out
python3 - <<'PY'
import json,glob,collections
for v in sorted(glob.glob('/tmp/r4/seeds/seed004/*/*/requests.jsonl')):
    agg=collections.defaultdict(lambda:[0,0,0,0])
    for line in open(v):
        r=json.loads(line); a=agg[r.get('phase')]; a[0]+=r.get('prompt_tokens') or 0; a[1]+=r.get('cached_device') or 0; a[2]+=r.get('cached_host') or 0; a[3]+=1
    print(v.split('/')[-2], dict(agg))
PY
find /tmp/r4 -name samples.jsonl -delete
tar -C /tmp -czf $OUT/r4.tgz r4
ls -la $OUT

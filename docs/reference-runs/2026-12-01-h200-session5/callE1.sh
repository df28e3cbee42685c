#!/bin/bash
# Session 5, device call 1 (one H200): three "nights" of scenarios/gpu/h200_nightly_load.yaml,
# one after another, the build under test at /tmp/sglang-nightly (a git repo, one commit per
# build): night 1 and 2 the healthy build (make_slow_hicache.sh ... 1: an inert copy of the
# site), night 3 the slow one (make_slow_hicache.sh ... 2: every host-to-device load issued
# twice). The run folders come back whole (samples.jsonl dropped) for `harness compare` here.
#   run(carry=[".gpu"], command="bash .gpu/callE1.sh")
set -u
START=$(date +%s); say() { echo "[$(( $(date +%s) - START ))s] $*"; }
left() { echo $(( $1 - ($(date +%s) - START) )); }
REPO=$(pwd); G=$REPO/.gpu
rm -rf /tmp/snap && mkdir -p /tmp/snap && tar -xzf "$G/snap.tgz" -C /tmp/snap && cd /tmp/snap && ln -sfn "$G" .gpu
source .gpu/install.sh
export PYTHONPATH=$PWD:$PYTHONPATH PYTHONUNBUFFERED=1
R=/tmp/rn; mkdir -p $R
nvidia-smi --query-gpu=index,name,memory.used,memory.total,driver_version --format=csv,noheader
nproc; free -g | head -2; git --version
B=/tmp/sglang-nightly; mkdir -p $B
[ -d $B/.git ] || git -C $B init -q
night() {  # name repeat
  bash scenarios/gpu/make_slow_hicache.sh /tmp/sglang-site $B "$2" > $R/$1-build.out 2>&1 || { say "build $1 failed"; cat $R/$1-build.out; return 1; }
  git -C $B add -A && git -C $B -c user.email=gpu@harness -c user.name=gpu commit -q --allow-empty -m "$1: make_slow_hicache.sh repeat=$2"
  say "night $1 (repeat=$2) build $(git -C $B rev-parse --short HEAD)"
  REPEATS=5 timeout -s TERM -k 20 "$(left 575)" python3 -m harness run scenarios/gpu/h200_nightly_load.yaml --probe \
    --results-dir $R/results --reports-dir $R/reports > $R/$1.out 2>&1
  say "night $1 rc=$?"; tail -n 12 $R/$1.out
}
night n1-stock 1
night n2-stock 1
night n3-slow 2
find $R/results -name "server*.log" -exec grep -H "HICACHE_SLOW_LOAD" {} + | head -6
ls $R/results/h200_nightly_load/
find $R -name samples.jsonl -delete
tar -C /tmp -czf $OUT/rn.tgz rn
ls -la $OUT; say done

#!/bin/bash
# Session 5, device call 2 (the machine still warm from call 1, whose 575-s budget cut night 3
# at its server start): night 3 again, the slow build. Sent inline as one command; this file is
# that command, laid out:
#   run(carry=[".gpu"], command="<the lines below joined by ;>")
R=$PWD; cd /tmp/snap 2>/dev/null || { mkdir -p /tmp/snap && tar -xzf .gpu/snap.tgz -C /tmp/snap && cd /tmp/snap && ln -sfn $R/.gpu .gpu; }
source .gpu/install.sh; export PYTHONPATH=$PWD:$PYTHONPATH PYTHONUNBUFFERED=1
B=/tmp/sglang-nightly; mkdir -p $B; [ -d $B/.git ] || git -C $B init -q
bash scenarios/gpu/make_slow_hicache.sh /tmp/sglang-site $B 2 | tail -1 && git -C $B add -A \
  && git -C $B -c user.email=gpu@harness -c user.name=gpu commit -qm "n3-slow: make_slow_hicache.sh repeat=2" --allow-empty
git -C $B log --oneline | head -5
REPEATS=5 timeout -s TERM -k 20 330 python3 -m harness run scenarios/gpu/h200_nightly_load.yaml --probe \
  --results-dir /tmp/rn3/results --reports-dir /tmp/rn3/reports > /tmp/rn3.out 2>&1; echo rc=$?; tail -8 /tmp/rn3.out
find /tmp/rn3 -name samples.jsonl -delete; find /tmp/rn3 -name "server*.log" -exec grep -H HICACHE_SLOW {} +
tar -C /tmp -czf $OUT/rn3.tgz rn3 rn3.out; ls -la $OUT

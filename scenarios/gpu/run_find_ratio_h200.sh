#!/usr/bin/env bash
# The safe-ratio boundary against a real sglang start, in one device call (issue #29 item 4), from
# the repo root with the offline site carried (.gpu, /work/shared/gpu/README.md):
#
#   run(kind="nvidia-h200", carry=[".gpu"], command="bash scenarios/gpu/run_find_ratio_h200.sh")
#
# 1. installs the site and makes the random llama-tiny checkpoint (as h200_smoke);
# 2. records the host: /proc/meminfo, the process's cgroup and its memory limit files;
# 3. `harness validate scenarios/gpu/h200_find_ratio.yaml`: the predicted boundary of variant `on`
#    (size_gb, grid BOUNDARY_STEP_GB, default 4): "starts up to size_gb S (S+4: <why>)" -- why being
#    sglang's rule or the container's cgroup limit -- and "keeps the page cache up to P";
# 4. `harness run ... --find-ratio --only on`: the pool at S (must start), at S+4 (must be refused:
#    sglang's "Not enough host memory available" -> host_memory; or, where the cgroup binds, killed
#    while pinning -> out_of_memory), and when P < S at P and P+4 (page cache kept / lost in the
#    samples). Each start is 45-110 s (the first slower: Triton JIT) plus pinning the pool
#    (~0.05 s per GB registered, README); 2 points fit one call, 4 may not (then the call is cut,
#    rc 124/130, and what ran still comes back: its status.json files say which side was seen).
# 5. packs into $OUT: find_ratio.out (the console), ratio_boundary.json, host.txt, and each point's
#    status.json, server.log tail and samples.jsonl.
#
# What it should print (find_ratio.out): the boundary line, then
#   find-ratio: on-gbS: expected to starts: started, page cache kept, no swap-in
#   find-ratio: on-gbS+4: expected to refused: startup_failed (host_memory)
#   find-ratio: the start cliff is between size_gb S and S+4
#   find-ratio: the boundary is confirmed on both sides        (rc=0)
# A contradiction (S refused, or S+4 started) prints "CONTRADICTED (FAIL)" and rc=1: the prediction
# (MemAvailable read before launch, the 10 GiB reserve, the cgroup headroom) is wrong for this host
# -- the figures in host.txt and the points' logs say by how much.
#
# Environment: OUT (/tmp/out-find-ratio), SITE (/tmp/sglang-site), MODEL_PATH
# (/tmp/models/llama-sharp), PY (python3), BOUNDARY_STEP_GB (4), SKIP_INSTALL=1, DRY=1 (no GPU: the
# prediction and the points' argv only, against scenarios/models/llama-tiny's config; what
# tests/integration/test_gpu_scripts.py runs).
set -u
OUT=${OUT:-/tmp/out-find-ratio}
PY=${PY:-python3}
export SITE=${SITE:-/tmp/sglang-site}
SCRIPTS=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$SCRIPTS/../.." && pwd)
SCENARIO="$SCRIPTS/h200_find_ratio.yaml"
mkdir -p "$OUT"
exec > >(tee -a "$OUT/find_ratio.out") 2>&1

if [ "${DRY:-0}" = 1 ]; then
  export MODEL_PATH=${MODEL_PATH:-$ROOT/scenarios/models/llama-tiny}
else
  export MODEL_PATH=${MODEL_PATH:-/tmp/models/llama-sharp}
  if [ "${SKIP_INSTALL:-0}" != 1 ]; then
    # shellcheck disable=SC1091
    source "$ROOT/.gpu/install.sh" || { echo "install failed"; exit 3; }
    "$PY" "$ROOT/.gpu/make_random_model.py" "$ROOT/.gpu/models/llama-tiny" "$MODEL_PATH" 0 40 || exit 3
  fi
fi
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"

{
  echo "# /proc/meminfo"; cat /proc/meminfo
  echo "# /proc/self/cgroup"; cat /proc/self/cgroup
  for f in /sys/fs/cgroup/memory.max /sys/fs/cgroup/memory.current \
           /sys/fs/cgroup/memory/memory.limit_in_bytes /sys/fs/cgroup/memory/memory.usage_in_bytes; do
    [ -r "$f" ] && echo "# $f: $(cat "$f")"
  done
  echo "# harness.host.cgroup: $("$PY" -c 'from harness.host import cgroup; print(cgroup.read_memory_limit())')"
} > "$OUT/host.txt" 2>&1

"$PY" -m harness validate "$SCENARIO" || exit $?
if [ "${DRY:-0}" = 1 ]; then
  "$PY" -m harness run "$SCENARIO" --find-ratio --only on --dry-run
  echo "rc=$?"
  exit 0
fi
"$PY" -m harness run "$SCENARIO" --find-ratio --only on --no-report --results-dir /tmp/find-ratio-results
rc=$?
run=$(ls -dt /tmp/find-ratio-results/h200_find_ratio-find-ratio/*/ 2>/dev/null | head -1)
if [ -n "$run" ]; then
  cp "$run/ratio_boundary.json" "$OUT/" 2>/dev/null
  for v in "$run"/on-*/; do
    n=$(basename "$v")
    mkdir -p "$OUT/$n"
    cp "$v/status.json" "$v/samples.jsonl" "$OUT/$n/" 2>/dev/null
    tail -n 60 "$v/server.log" > "$OUT/$n/server.log.tail" 2>/dev/null
  done
fi
echo "rc=$rc"
exit $rc

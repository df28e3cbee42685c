#!/usr/bin/env bash
# `harness bisect` over a few commits of a patched sglang, in one device call (issue #29 items 1
# and 6), from the repo root with the offline site carried (.gpu, /work/shared/gpu/README.md):
#
#   run(kind="nvidia-h200", carry=[".gpu"], command="bash scenarios/gpu/run_bisect_h200.sh")
#
# 1. installs the site (source .gpu/install.sh) and makes the random llama-tiny checkpoint;
# 2. makes a git history at $REPO (default /tmp/sglang-bisect-repo) of COMMITS+1 commits
#    (default 5: commits 0..4) over the site's sglang, laid out as a checkout (python/sglang):
#      0      the site as installed (make_slow_hicache.sh SITE REPO 1 0: an inert copy)
#      1..    a harmless change each (a line in BISECT_NOTES), except
#      SLOW_AT (default 2): make_slow_hicache.sh SITE REPO 1 $SLOW_SLEEP_MS -- every host-to-device
#             layer load sleeps SLOW_SLEEP_MS (default 20) ms first: the regression to find;
#             the commits after it keep it;
# 3. runs `harness bisect scenarios/gpu/h200_bisect.yaml --repo $REPO --good <commit 0> --bad
#    <commit COMMITS>` into $BISECT_DIR (default /tmp/bisect-h200): the good side, the bad side,
#    then the midpoints -- with the defaults 4 runs (commits 0, 4, 2, 1), each a server start
#    (45-110 s, the first on a fresh machine slower: Triton JIT) and ~10-20 s of requests;
# 4. packs into $OUT: bisect.out (the console), summary.md, bisect.json, first_bad.diff,
#    steps/ (each step's comparison), bisect-results.tar.gz (the run folders without samples.jsonl;
#    the worktree src/ left out), history.txt (git log of the made history).
#
# What it should print (the end of bisect.out, also summary.md): one line per step --
#   harness bisect: good side 1: <c0> (0 of 4: 0: the site as installed): GOOD — the good side: the baseline
#   harness bisect: bad side 2: <c4> (4 of 4: ...): BAD — FAIL against the good run: on-r2 repeat_prefill.repeat_after_evict.ttft_ms: regression +...%
#   harness bisect: step 3: <c2> (2 of 4: 2: slow host load-back ...): BAD — FAIL against the good run: ...
#   harness bisect: step 4: <c1> (1 of 4: 1: ...): GOOD — PASS against the good run
# then "# harness bisect: h200_bisect.yaml — first bad commit <c2>" with the diff of
# srt/mem_cache/pool_host/mha.py (the HICACHE_SLOW_LOAD block, sleep <SLOW_SLEEP_MS>) and the
# comparison that decided it; "rc=1" (FAIL-found). A healthy step that the 20 host hits a side
# cannot decide is reported UNDECIDED (rc=4 if it leaves a range), never guessed; a cut call
# (the budget) prints "interrupted; resume: harness bisect --resume DIR" (rc=130) and the partial
# bisect.json still comes back.
#
# Environment: OUT (/tmp/out-bisect), CALL_BUDGET_S (570), RESERVE_S (30), SITE (/tmp/sglang-site),
# REPO, BISECT_DIR, COMMITS (4), SLOW_AT (2), SLOW_SLEEP_MS (20), GOOD_REPEATS (20), MODEL_PATH (/tmp/models/llama-sharp),
# PY (python3), SKIP_INSTALL=1 (the site and model already there), HISTORY_ONLY=1 (make the
# history and stop: what tests/integration/test_bisect.py runs without a GPU), RESUME=1 (a second
# call on the still-warm machine after a cut one: no new history, `harness bisect --resume
# $BISECT_DIR`, the finished steps not run again):
#   run(kind="nvidia-h200", carry=[".gpu"], command="RESUME=1 SKIP_INSTALL=1 bash scenarios/gpu/run_bisect_h200.sh")
set -u
START=$(date +%s)
OUT=${OUT:-/tmp/out-bisect}
PY=${PY:-python3}
CALL_BUDGET_S=${CALL_BUDGET_S:-570}
RESERVE_S=${RESERVE_S:-30}
export SITE=${SITE:-/tmp/sglang-site}
REPO=${REPO:-/tmp/sglang-bisect-repo}
BISECT_DIR=${BISECT_DIR:-/tmp/bisect-h200}
COMMITS=${COMMITS:-4}
SLOW_AT=${SLOW_AT:-2}
SLOW_SLEEP_MS=${SLOW_SLEEP_MS:-20}
GOOD_REPEATS=${GOOD_REPEATS:-20}   # the good side's repeats: 40 host hits, the baseline of every step
export MODEL_PATH=${MODEL_PATH:-/tmp/models/llama-sharp}
SCRIPTS=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)   # not HERE: .gpu/install.sh sets its own HERE
case "$COMMITS" in ''|*[!0-9]*) echo "COMMITS must be a whole number" >&2; exit 2 ;; esac
case "$SLOW_AT" in ''|*[!0-9]*) echo "SLOW_AT must be a whole number" >&2; exit 2 ;; esac
[ "$SLOW_AT" -ge 1 ] && [ "$SLOW_AT" -le "$COMMITS" ] || { echo "need 1 <= SLOW_AT <= COMMITS" >&2; exit 2; }
mkdir -p "$OUT"
exec > >(tee -a "$OUT/bisect.out") 2>&1
say() { echo "[$(( $(date +%s) - START ))s] $*"; }

if [ "${SKIP_INSTALL:-0}" != 1 ] && [ "${HISTORY_ONLY:-0}" != 1 ]; then
  # shellcheck disable=SC1091
  source .gpu/install.sh || { say "install failed"; exit 3; }
  if [ ! -f "$MODEL_PATH/config.json" ]; then
    "$PY" .gpu/make_random_model.py .gpu/models/llama-tiny "$MODEL_PATH" 0 40 || { say "model failed"; exit 3; }
  fi
fi

if [ "${RESUME:-0}" = 1 ]; then
  [ -f "$BISECT_DIR/bisect.json" ] || { say "RESUME=1: no $BISECT_DIR/bisect.json (a fresh machine: run without RESUME)"; exit 2; }
  BISECT_ARGS=(--resume "$BISECT_DIR")
else
# ---- the history
g() { git -C "$REPO" -c user.name=bisect -c user.email=bisect@harness -c core.autocrlf=false "$@"; }
rm -rf "$REPO" "$BISECT_DIR"
mkdir -p "$REPO"
g init -q || exit 3
for i in $(seq 0 "$COMMITS"); do
  if [ "$i" -eq 0 ]; then
    bash "$SCRIPTS/make_slow_hicache.sh" "$SITE" "$REPO" 1 0 > /dev/null || { say "copy of the site failed"; exit 3; }
    printf '*.pyc\n__pycache__/\n' > "$REPO/.gitignore"
    msg="0: the site as installed"
  elif [ "$i" -eq "$SLOW_AT" ]; then
    bash "$SCRIPTS/make_slow_hicache.sh" "$SITE" "$REPO" 1 "$SLOW_SLEEP_MS" > /dev/null || { say "slow patch failed"; exit 3; }
    msg="$i: slow host load-back (HICACHE_SLOW_LOAD, sleep ${SLOW_SLEEP_MS} ms a layer)"
  else
    msg="$i: a harmless change (BISECT_NOTES)"
  fi
  echo "commit $i" >> "$REPO/BISECT_NOTES"
  g add -A && g commit -q -m "$msg" || { say "commit $i failed"; exit 3; }
done
g log --format='%h %s' > "$OUT/history.txt"
say "history at $REPO:"; cat "$OUT/history.txt"
GOOD=$(g rev-list --max-parents=0 HEAD)
BAD=$(g rev-parse HEAD)
[ "${HISTORY_ONLY:-0}" = 1 ] && exit 0
BISECT_ARGS=(scenarios/gpu/h200_bisect.yaml --repo "$REPO" --good "$GOOD" --bad "$BAD" --dir "$BISECT_DIR"
             --good-repeats "$GOOD_REPEATS")
fi

# ---- the bisection
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
LEFT=$(( CALL_BUDGET_S - RESERVE_S - ($(date +%s) - START) ))
say "harness bisect, ${LEFT}s left for it"
timeout -s TERM -k 20 "$LEFT" "$PY" -m harness bisect "${BISECT_ARGS[@]}"
RC=$?
say "rc=$RC"
for f in summary.md bisect.json first_bad.diff; do [ -f "$BISECT_DIR/$f" ] && cp "$BISECT_DIR/$f" "$OUT/"; done
[ -d "$BISECT_DIR/steps" ] && cp -r "$BISECT_DIR/steps" "$OUT/"
find "$BISECT_DIR/results" -name samples.jsonl -delete 2>/dev/null
find "$BISECT_DIR/results" -name server.log -exec grep -H "HICACHE_SLOW_LOAD active" {} + 2>/dev/null
[ -d "$BISECT_DIR/results" ] && tar -C "$BISECT_DIR" -czf "$OUT/bisect-results.tar.gz" results
ls -la "$OUT"
exit "$RC"

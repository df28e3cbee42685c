#!/usr/bin/env bash
# One device call of scenarios/gpu/h200_8b.yaml on the 2xH200 machine, from the repo root:
# installs the offline sglang site, runs two of the scenario's four shards at once (one per GPU),
# merges every shard run it has, renders the report and packs everything into $OUT.
#
#   bash scenarios/gpu/run_8b_shards.sh 1       # call 1: shards 1/4 (GPU 0) and 2/4 (GPU 1)
#   bash scenarios/gpu/run_8b_shards.sh 2       # call 2: shards 3/4 and 4/4; merges 1-4 if the
#                                               #   call-1 shard runs are here (carry results/8b)
#   bash scenarios/gpu/run_8b_shards.sh merge   # no GPU needed: merge + report what results/8b holds
#
# Which variants each shard holds: the header of scenarios/gpu/h200_8b.yaml. After call 1, unpack
# its h200_8b-shards-part1.tar.gz at the repo root (it holds results/8b/shard-{1,2}/...) and either
# carry results/8b into call 2 or run `... merge` here afterwards.
#
# $OUT gets (at most 8 files, each under 16 MiB):
#   h200_8b-shards-partP.tar.gz  this call's shard run folders, whole (samples.jsonl left out only
#                                if the archive would pass 15 MiB)
#   h200_8b-report.tar.gz        the merged run folder without samples.jsonl, plus its report
#   index.html, summary.csv      the merged report and table (the reference-run convention)
#   run_8b.log                   this script's log, both shards' output included
# Environment: SCENARIO, RESULTS (results/8b), REPORTS (reports/8b), OUT (/tmp/out-8b when
# unset), CALL_BUDGET_S (540: the whole call, install to tar), SKIP_INSTALL=1 (a box with sglang
# installed), PY (python3), GPU_A / GPU_B (0 / 1).
set -u
START=$(date +%s)
PART=${1:-}
case "$PART" in
  1) SHARDS="1 2" ;;
  2) SHARDS="3 4" ;;
  merge) SHARDS="" ;;
  *) echo "usage: $0 1|2|merge" >&2; exit 2 ;;
esac
SCENARIO=${SCENARIO:-scenarios/gpu/h200_8b.yaml}
RESULTS=${RESULTS:-results/8b}
REPORTS=${REPORTS:-reports/8b}
OUT=${OUT:-/tmp/out-8b}
PY=${PY:-python3}
CALL_BUDGET_S=${CALL_BUDGET_S:-540}
RESERVE_S=${RESERVE_S:-55}            # after the shards: harness stop on SIGTERM, merge, report, tar
N=4
mkdir -p "$OUT" "$RESULTS" "$REPORTS"
LOG="$OUT/run_8b.log"
exec > >(tee -a "$LOG") 2>&1
say() { echo "[$(( $(date +%s) - START ))s] $*"; }

if [ -n "$SHARDS" ] && [ "${SKIP_INSTALL:-0}" != 1 ]; then
  # shellcheck disable=SC1091
  source .gpu/install.sh || { say "install failed"; exit 3; }
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
say "part $PART, scenario $SCENARIO, python $($PY -c 'import sys; print(sys.version.split()[0])')"
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=index,name,memory.used,memory.total --format=csv,noheader

if [ -n "$SHARDS" ]; then
  set -- $SHARDS
  BUDGET=$(( CALL_BUDGET_S - ($(date +%s) - START) - RESERVE_S ))
  if [ "$BUDGET" -lt 120 ]; then say "only ${BUDGET}s left for the shards: not starting them"; exit 3; fi
  say "shards $1/$N on GPU ${GPU_A:-0} and $2/$N on GPU ${GPU_B:-1}, ${BUDGET}s each at most"
  CUDA_VISIBLE_DEVICES=${GPU_A:-0} timeout -s TERM -k 30 "$BUDGET" \
    "$PY" -m harness run "$SCENARIO" --shard "$1/$N" --results-dir "$RESULTS/shard-$1" --no-report \
    > "$OUT/shard-$1.out" 2>&1 &
  PID_A=$!
  CUDA_VISIBLE_DEVICES=${GPU_B:-1} timeout -s TERM -k 30 "$BUDGET" \
    "$PY" -m harness run "$SCENARIO" --shard "$2/$N" --results-dir "$RESULTS/shard-$2" --no-report \
    > "$OUT/shard-$2.out" 2>&1 &
  PID_B=$!
  wait "$PID_A"; RC_A=$?
  wait "$PID_B"; RC_B=$?
  say "shard $1/$N exit $RC_A, shard $2/$N exit $RC_B (0 pass, 1 expectation/variant failed, 124/130 cut by the budget)"
  for i in "$1" "$2"; do echo "---- shard $i/$N (last 25 lines)"; tail -n 25 "$OUT/shard-$i.out"; done
  # this call's shard runs, whole
  ARCH="$OUT/h200_8b-shards-part$PART.tar.gz"
  tar -czf "$ARCH" "$RESULTS/shard-$1" "$RESULTS/shard-$2"
  if [ "$(stat -c %s "$ARCH")" -gt $(( 15 * 1024 * 1024 )) ]; then
    say "shard archive over 15 MiB: packing it without samples.jsonl"
    tar -czf "$ARCH" --exclude=samples.jsonl "$RESULTS/shard-$1" "$RESULTS/shard-$2"
  fi
  say "packed $(basename "$ARCH") ($(du -h "$ARCH" | cut -f1))"
fi

# merge every shard run here (a run folder holds manifest.json), then report
mapfile -t RUNS < <(find "$RESULTS" -path "$RESULTS/merged" -prune -o -name manifest.json -printf '%h\n' | sort)
if [ "${#RUNS[@]}" -eq 0 ]; then say "no shard runs under $RESULTS"; exit 3; fi
say "merging ${#RUNS[@]} shard run(s): ${RUNS[*]}"
"$PY" -m harness merge "${RUNS[@]}" --results-dir "$RESULTS/merged"
say "merge exit $? (1: incomplete - a shard missing or cut - or an expectation missed)"
MERGED=$(find "$RESULTS/merged" -mindepth 3 -maxdepth 3 -name manifest.json -printf '%T@ %h\n' | sort -n | tail -n 1 | cut -d' ' -f2)
[ -n "$MERGED" ] || { say "merge wrote nothing"; exit 3; }
"$PY" -m harness report "$MERGED" --reports-dir "$REPORTS"
REPORT_DIR="$REPORTS/$(basename "$(dirname "$MERGED")")/$(basename "$MERGED")"
cp "$REPORT_DIR/index.html" "$OUT/index.html" 2>/dev/null || say "no report at $REPORT_DIR"
cp "$MERGED/summary.csv" "$OUT/summary.csv" 2>/dev/null || say "no summary.csv in $MERGED"
tar -czf "$OUT/h200_8b-report.tar.gz" --exclude=samples.jsonl "$MERGED" "$REPORT_DIR"
say "merged run $MERGED; report $REPORT_DIR/index.html"
"$PY" - "$MERGED" <<'EOF' || true
import json, sys
from pathlib import Path
run = Path(sys.argv[1])
m = json.loads((run / "manifest.json").read_text())
print(f"{'variant':44} {'state':16} {'ready_s':>8}  cause")
for v in m.get("variants", []):
    st = run / v["dir"] / "status.json"
    s = json.loads(st.read_text()) if st.exists() else {}
    print(f"{v['name']:44} {str(s.get('state')):16} {str(s.get('ready_s')):>8}  {s.get('cause') or ''}")
print("COMPLETE" if (run / "COMPLETE").exists() else "not COMPLETE (see manifest merge.problems)")
EOF
ls -la "$OUT"
say "done"

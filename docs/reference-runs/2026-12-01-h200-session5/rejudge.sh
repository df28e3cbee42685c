#!/bin/bash
# Re-judge this session's stored GPU runs (runs.tgz: every run folder of calls 1-3, the sampler's
# series left out) with the checkout this runs from -- no GPU. From the repo root:
#   PY=.venv/bin/python bash docs/reference-runs/2026-12-01-h200-session5/rejudge.sh [OUT_DIR]
# OUT_DIR (default: a temp dir) gets compare-*.md/.txt (console), parity_subsets.txt, roofline.txt.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
PY=${PY:-python3}
OUTD=${1:-$(mktemp -d)}; mkdir -p "$OUTD"
W=$(mktemp -d); tar -xzf "$HERE/runs.tgz" -C "$W"
N=$W/rn/results/h200_nightly_load
N1=$N/20261201T211909Z-1ab903 N2=$N/20261201T212354Z-3cf02d
N3=$W/rn3/results/h200_nightly_load/20261201T212857Z-836057
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
cmp() {  # name candidate baseline
  "$PY" -m harness compare "$2" --baseline "$3" --markdown "$OUTD/compare-$1.md" > "$OUTD/compare-$1.txt" 2>&1
  echo "compare $1: exit $? ($(grep -m1 -o 'PASS\|FAIL\|INCONCLUSIVE' "$OUTD/compare-$1.md"))"
}
cmp n2-vs-n1 "$N2" "$N1"          # two healthy nights
cmp n3slow-vs-n2 "$N3" "$N2"      # the slow build against the night before
cmp n3slow-vs-n1 "$N3" "$N1"      # ... and against the first night
# as a nightly job sees them: the nights in one results folder (night 3's interrupted first try
# too), the slow night against the latest good night(s); --pool 3 is nightly-gpu.yml's own
L=$W/nights; mkdir -p "$L/h200_nightly_load"; cp -r "$N"/* "$N3" "$L/h200_nightly_load/"
for k in 1 2 3; do
  "$PY" -m harness compare "$L/h200_nightly_load/$(basename "$N3")" --baseline latest --pool $k --results-dir "$L" \
    --markdown "$OUTD/compare-n3slow-vs-latest-pool$k.md" > "$OUTD/compare-n3slow-vs-latest-pool$k.txt" 2>&1
  echo "compare n3slow-vs-latest-pool$k: exit $? ($(grep -m1 -o 'PASS\|FAIL\|INCONCLUSIVE' "$OUTD/compare-n3slow-vs-latest-pool$k.md"))"
done
B=$(ls -d "$W"/rp/results/h200_builds/*/)
"$PY" scenarios/gpu/parity_subsets.py "$B" --on on-patched --on on-stock --off off-stock \
  --samples 1,2 --reasks 1,2 > "$OUTD/parity_subsets.txt" 2>&1; echo "parity_subsets: exit $?"
"$PY" scenarios/gpu/roofline_of_run.py "$N1" "$N2" "$N3" "$W"/rt/results/wsl_tp2/*/ > "$OUTD/roofline.txt" 2>&1
echo "roofline: exit $?"; echo "outputs in $OUTD"; rm -rf "$W"

#!/usr/bin/env bash
# A soak on real sglang in one device call (issue #29 items 2, 3 and 6): HiCache OFF and ON
# (ratio 2) each serve scenarios/gpu/h200_soak.yaml's steady mix for SOAK_S seconds, then the
# slope test per memory series (LEAK / STABLE / INCONCLUSIVE, slope and interval per hour) and
# NVML's energy counter as joules per token, OFF vs ON. From the repo root, the offline site
# carried (.gpu, /work/shared/gpu/README.md):
#
#   run(kind="nvidia-h200-x2", carry=[".gpu"], command="bash scenarios/gpu/run_soak_h200.sh")
#     two GPUs: OFF on GPU 0 and ON on GPU 1 side by side (--gpus 0,1), each its own energy
#     counter; SOAK_S defaults to what the call leaves: ~395 s (6.6 min) after a 30-s install,
#     capped at SOAK_MAX_S (420)
#   run(kind="nvidia-h200", carry=[".gpu"], command="bash scenarios/gpu/run_soak_h200.sh")
#     one GPU: OFF, then ON, each a soak of half of what is left (~2.5 min each, 10-s slices)
#
# 1. installs the site (source .gpu/install.sh) and makes the random llama-tiny checkpoint;
# 2. sizes the soak: SOAK_S = min(SOAK_MAX_S, (budget - elapsed - START_ALLOW_S - TAIL_S) / runs
#    in sequence); SLICE_S = SOAK_S / 15 in [6, 30] s unless given (3 slices settle, 12 judged;
#    under 8 slices it stops: too short to judge); OPEN_LOOP_S, the mix's open loop, half a slice;
# 3. `harness run scenarios/gpu/h200_soak.yaml` (with --gpus 0,1 on two GPUs) under `timeout`;
# 4. packs into $OUT: soak.out (the console), soak_table.txt (per variant and series: verdict,
#    slope/h, interval/h, points; then joules per token of the soak and of energy_repeat's cold
#    and host-hit phases, energy source), index.html (the report: the slopes section has a figure
#    per series), soak-results.tar.gz (the run folder, samples included).
#
# What it should show: both variants ran (ok), their results table with an `energy J/tok`
# column from NVML (no "SIMULATED" note); in soak_table.txt, server_rss, mlocked, gpu_memory and
# (ON) host_pool STABLE or INCONCLUSIVE on a healthy sglang (a LEAK there is a finding: the run
# exits 1 and soak.out names the series, its slope and interval); storage_dir NOT_MEASURED (no
# storage backend); host_pool NOT_MEASURED where sglang 0.5.17 exports no
# hicache_host_used_tokens gauge. Joules per token: energy_repeat's repeat_after_evict phase
# cheaper per prompt token ON (host hits) than OFF (recompute), its cold phase alike on both; the
# soak's J/token close OFF vs ON on this tiny model (idle draw dominates). rc 0 (PASS), 4 when a
# series is INCONCLUSIVE, 1 on a LEAK; 124/137 if the call's budget cut the run.
#
# Environment: OUT (/tmp/out-soak), CALL_BUDGET_S (585), START_ALLOW_S (100: one server start,
# 45-111 s measured, the first on a fresh machine the slowest), TAIL_S (60: the energy_repeat workload, stop, cooldown,
# report, packing), SOAK_MAX_S (420), SLICE_S (auto), OPEN_LOOP_S (SLICE_S / 2), MODEL_PATH (/tmp/models/llama-sharp), PY (python3), GPUS
# (auto: 2 if nvidia-smi lists two), RUN_ARGS (more `harness run` arguments: the tests run the
# whole script on the simulator with `--set server.backend=sim ...`), SKIP_INSTALL=1 (site and
# model already there), DRY_RUN=1
# (no install, no GPU: print the plan and `harness run --dry-run`; what the tests run).
set -u
START=$(date +%s)
OUT=${OUT:-/tmp/out-soak}
PY=${PY:-python3}
CALL_BUDGET_S=${CALL_BUDGET_S:-585}
START_ALLOW_S=${START_ALLOW_S:-100}
TAIL_S=${TAIL_S:-60}
SOAK_MAX_S=${SOAK_MAX_S:-420}
SLICE_S=${SLICE_S:-auto}
export MODEL_PATH=${MODEL_PATH:-/tmp/models/llama-sharp}
RESULTS=${RESULTS:-/tmp/soak-h200}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/soak.out") 2>&1
say() { echo "[$(( $(date +%s) - START ))s] $*"; }

if [ "${DRY_RUN:-0}" != 1 ] && [ "${SKIP_INSTALL:-0}" != 1 ]; then
  # shellcheck disable=SC1091
  source .gpu/install.sh || { say "install failed"; exit 3; }
  if [ ! -f "$MODEL_PATH/config.json" ]; then
    "$PY" .gpu/make_random_model.py .gpu/models/llama-tiny "$MODEL_PATH" 0 40 || { say "model failed"; exit 3; }
  fi
fi
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1

GPUS=${GPUS:-auto}
if [ "$GPUS" = auto ]; then
  GPUS=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
  [ -n "$GPUS" ] && [ "$GPUS" -ge 1 ] || GPUS=1
fi
if [ "$GPUS" -ge 2 ]; then SEQ=1; LANES=(--gpus 0,1); else SEQ=2; LANES=(); fi
ELAPSED=$(( $(date +%s) - START ))
SOAK_S=$(( (CALL_BUDGET_S - ELAPSED - SEQ * (START_ALLOW_S + TAIL_S / 2) - TAIL_S / 2) / SEQ ))
[ "$SOAK_S" -gt "$SOAK_MAX_S" ] && SOAK_S=$SOAK_MAX_S
export SOAK_S
if [ "$SLICE_S" = auto ]; then  # about 15 slices: 3 settle, 12 judged
  SLICE_S=$(( SOAK_S / 15 )); [ "$SLICE_S" -lt 6 ] && SLICE_S=6; [ "$SLICE_S" -gt 30 ] && SLICE_S=30
fi
export SLICE_S
# the mix's open loop runs on its own clock: half a slice, so the slice's cold prefills, repeats and
# decodes (under 1 s on the H200) fit beside it (at 10 s in 6-s slices every slice ran ~10 s and the
# soak outgrew its call: session 6's ON half was cut at its server start)
OPEN_LOOP_S=${OPEN_LOOP_S:-$(( SLICE_S / 2 ))}
export OPEN_LOOP_S
say "GPUs $GPUS: ${SEQ} run(s) in sequence, a soak of ${SOAK_S} s in ${SLICE_S}-s slices each (open loop ${OPEN_LOOP_S} s a slice)"
if [ "$SOAK_S" -lt $(( 8 * SLICE_S )) ]; then
  say "a soak of ${SOAK_S} s is under 8 slices of ${SLICE_S} s: too short to judge; stopping"; exit 2
fi

if [ "${DRY_RUN:-0}" = 1 ]; then
  "$PY" -m harness run scenarios/gpu/h200_soak.yaml --dry-run; exit $?
fi

LEFT=$(( CALL_BUDGET_S - ($(date +%s) - START) - 15 ))
rm -rf "$RESULTS"
# shellcheck disable=SC2086  # RUN_ARGS: extra `harness run` arguments, split on spaces (the tests: --set ... the simulator)
timeout -s TERM -k 15 "$LEFT" "$PY" -m harness run scenarios/gpu/h200_soak.yaml "${LANES[@]}" ${RUN_ARGS:-} \
  --results-dir "$RESULTS/results" --reports-dir "$RESULTS/reports"
RC=$?
say "harness run rc=$RC"

RUN=$(ls -d "$RESULTS"/results/h200_soak/*/ 2>/dev/null | tail -n 1)
if [ -n "$RUN" ]; then
  "$PY" - "$RUN" > "$OUT/soak_table.txt" <<'PYEOF'
import json, sys
from pathlib import Path
run = Path(sys.argv[1])
for v in sorted(p for p in run.iterdir() if (p / "summary.json").exists()):
    s = json.loads((v / "summary.json").read_text())
    soak = ((s.get("workloads") or {}).get("soak") or {}).get("from_samples") or {}
    print(f"## {v.name}: state {s.get('state')}")
    for name, e in (soak.get("series") or {}).items():
        fmt = lambda x: "-" if x is None else f"{x:+.4g}"
        print(f"  {name:17} {e.get('verdict'):13} slope {fmt(e.get('slope_per_h'))} {e.get('unit')}/h "
              f"[{fmt(e.get('lo_per_h'))}, {fmt(e.get('hi_per_h'))}] tol {e.get('tolerance_per_h')} "
              f"points {e.get('n_points', 0)}")
    energy = s.get("energy") or {}
    print(f"  energy source: {energy.get('source')}")
    for key, fig in [("soak", (energy.get("workloads") or {}).get("soak"))] + [
        (k, f) for k, f in (energy.get("phases") or {}).items() if k.startswith("energy_repeat/")
    ]:
        if fig and fig.get("too_short"):  # the counter did not advance over it: not 0 J
            print(f"  {key:40} too short to measure (NVML's counter did not advance over it)")
        elif fig:
            print(f"  {key:40} J {fig.get('joules')}  J/token {fig.get('j_per_token')}  "
                  f"J/prompt token {fig.get('j_per_prompt_token')}  J/generated token {fig.get('j_per_generated_token')}")
PYEOF
  cat "$OUT/soak_table.txt"
  tar -C "$RUN/.." -czf "$OUT/soak-results.tar.gz" "$(basename "$RUN")"
fi
REPORT=$(ls "$RESULTS"/reports/h200_soak/*/index.html 2>/dev/null | tail -n 1)
[ -n "$REPORT" ] && cp "$REPORT" "$OUT/index.html"
ls -la "$OUT"
say "done rc=$RC"
exit $RC

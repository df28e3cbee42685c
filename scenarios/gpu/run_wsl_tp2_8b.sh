#!/usr/bin/env bash
# The nightly scenario (scenarios/wsl_tp2.yaml) at TP2 with the Llama-3-8B shape (dummy weights) on
# the 2xH200 machine, in one device call: OFF vs ON ratio 1.3 (the variant whose checks need host-
# tier hits: second pass >= 2x, parity PASS). Sizes through the scenario's variables
# (docs/nightly.md): 140K-token GPU pool (H - P = 42,000 tokens of host window at ratio 1.3),
# 32K long prompts, 8 prefixes of 0.14 x pool, quality contexts of 24,100 tokens (non-aligned).
#   run(kind="nvidia-h200-x2", carry=[".gpu"], command="bash scenarios/gpu/run_wsl_tp2_8b.sh")
# Check the argv here first: DRY_RUN=1 bash scenarios/gpu/run_wsl_tp2_8b.sh
set -u
OUT=${OUT:-/tmp/out-tp2}
mkdir -p "$OUT"
if [ "${DRY_RUN:-0}" != 1 ]; then
  # shellcheck disable=SC1091
  source .gpu/install.sh || exit 3
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export MODEL_PATH=${MODEL_PATH:-$PWD/scenarios/models/llama3-8b}
export SGLANG_EXTRA_ARGS="--load-format dummy --attention-backend triton --sampling-backend pytorch --grammar-backend none --skip-tokenizer-init --mem-fraction-static 0.5 --cuda-graph-max-bs-decode 4"
export KV_CACHE_DTYPE=auto GPU_POOL_TOKENS=140000 CONTEXT_LENGTH=65536 LONG_PROMPT_TOKENS=32768
export PREFIX_TOKENS="0.14x pool" QUALITY_LENGTH=24100 QUALITY_SAMPLES=1 QUALITY_MODE=token_ids
export REPEATS=1 IDLE_WINDOW_S=3
ARGS=(run scenarios/wsl_tp2.yaml --only off --only on-r1.3 --results-dir /tmp/r-tp2 --reports-dir /tmp/r-tp2/reports)
if [ "${DRY_RUN:-0}" = 1 ]; then exec python3 -m harness "${ARGS[@]}" --dry-run; fi
timeout -s TERM -k 30 540 python3 -m harness "${ARGS[@]}" > "$OUT/run.out" 2>&1
echo "harness exit $?"
tail -n 30 "$OUT/run.out"
find /tmp/r-tp2 -name samples.jsonl -delete
tar -C /tmp -czf "$OUT/r-tp2.tgz" r-tp2

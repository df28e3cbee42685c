#!/bin/bash
# Session 5, device call 2 (one H200, right after call 1 while the machine is warm), two runs side
# by side on the one GPU:
#  a) the deterministic corrupt-build parity at the shipped sample sizes: scenarios/gpu/h200_builds.yaml
#     (llama-tiny random checkpoint, 5 tasks x 2 samples x 2 re-asks) with
#     --enable-deterministic-inference and the broken build in `shift` mode (every loaded token gets
#     its neighbour's K/V: the "rotated" host-tier load of issue #24), arms off-stock (with the
#     OFF-vs-OFF control), on-stock, on-patched;
#  b) issue #30's rehearsal at TP1: scenarios/gpu/run_wsl_tp2_8b.sh's variables (8B dense shape,
#     dummy weights, 32K prompts, 140K-token pool, off + on-r1.3) with tp_size 1 (patched into this
#     call's snapshot of scenarios/wsl_tp2.yaml, with a 20-s cooldown: (a)'s servers come and go on
#     the same GPU). Its timings share the GPU with (a)'s tiny servers.
#   run(carry=[".gpu"], command="bash .gpu/callE2.sh")
set -u
START=$(date +%s); say() { echo "[$(( $(date +%s) - START ))s] $*"; }
left() { echo $(( $1 - ($(date +%s) - START) )); }
REPO=$(pwd); G=$REPO/.gpu
rm -rf /tmp/snap && mkdir -p /tmp/snap && tar -xzf "$G/snap.tgz" -C /tmp/snap && cd /tmp/snap && ln -sfn "$G" .gpu
source .gpu/install.sh
export PYTHONPATH=$PWD:$PYTHONPATH PYTHONUNBUFFERED=1
mkdir -p /tmp/rp /tmp/rt
# the rehearsal's two patches: TP1, and a cooldown that does not wait on (a)'s servers coming and going
sed -i -e 's/^  tp_size: 2$/  tp_size: ${TP_SIZE:-2}/' -e 's/^  cooldown_timeout_s: 180$/  cooldown_timeout_s: 20/' \
  -e 's/^  cooldown_mem_tolerance_gib: 1.0$/  cooldown_mem_tolerance_gib: 48/' scenarios/wsl_tp2.yaml
grep -n "tp_size\|cooldown_" scenarios/wsl_tp2.yaml
( export MODEL_PATH=$PWD/scenarios/models/llama3-8b TP_SIZE=1 \
    SGLANG_EXTRA_ARGS="--load-format dummy --attention-backend triton --sampling-backend pytorch --grammar-backend none --skip-tokenizer-init --mem-fraction-static 0.5 --cuda-graph-max-bs-decode 4" \
    KV_CACHE_DTYPE=auto GPU_POOL_TOKENS=140000 CONTEXT_LENGTH=65536 LONG_PROMPT_TOKENS=32768 \
    PREFIX_TOKENS="0.14x pool" QUALITY_LENGTH=24100 QUALITY_SAMPLES=1 QUALITY_MODE=token_ids REPEATS=1 IDLE_WINDOW_S=3
  timeout -s TERM -k 20 "$(left 565)" python3 -m harness run scenarios/wsl_tp2.yaml --only off --only on-r1.3 \
    --results-dir /tmp/rt/results --reports-dir /tmp/rt/reports > /tmp/rt/run.out 2>&1; echo "tp1 rc=$?" >> /tmp/rt/run.out ) &
T=$!
sleep 3
python3 .gpu/make_random_model.py .gpu/models/llama-tiny /tmp/models/llama-sharp 0 40 > /tmp/rp/model.out 2>&1; say "model rc=$?"
bash scenarios/gpu/make_broken_hicache.sh /tmp/sglang-site /tmp/sglang-patched > /tmp/rp/broken.out 2>&1; say "broken copy rc=$?"
SGLANG_EXTRA_ARGS=--enable-deterministic-inference CORRUPT_MODE=shift timeout -s TERM -k 20 "$(left 560)" \
  python3 -m harness run scenarios/gpu/h200_builds.yaml --only off-stock --only on-stock --only on-patched \
  --results-dir /tmp/rp/results --reports-dir /tmp/rp/reports > /tmp/rp/run.out 2>&1
say "parity rc=$?"; tail -n 25 /tmp/rp/run.out
find /tmp/rp -name samples.jsonl -delete; tar -C /tmp -czf $OUT/rp.tgz rp
wait $T; say "tp1 done"; tail -n 30 /tmp/rt/run.out
find /tmp/rt -name samples.jsonl -delete; tar -C /tmp -czf $OUT/rt.tgz rt
ls -la $OUT; say done

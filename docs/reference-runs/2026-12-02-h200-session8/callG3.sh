#!/bin/bash
# Session 8, device call 3 (warm H200, right after call 2): the deterministic corrupt-build parity
# at h200_builds.yaml's shipped sizes (5 tasks x 2 samples x 2 re-asks), run inline as:
#   run(carry=[".gpu"], command="bash docs/reference-runs/2026-12-02-h200-session8/callG3.sh")
S=$(date +%s); source .gpu/install.sh; export PYTHONPATH=$PWD:$PYTHONPATH PYTHONUNBUFFERED=1
python3 .gpu/make_random_model.py .gpu/models/llama-tiny /tmp/models/llama-sharp 0 40 > $OUT/model.out 2>&1; echo model rc=$?
bash scenarios/gpu/make_broken_hicache.sh /tmp/sglang-site /tmp/sglang-patched > $OUT/broken.out 2>&1; echo broken rc=$?
SGLANG_EXTRA_ARGS=--enable-deterministic-inference CORRUPT_MODE=shift timeout -s TERM -k 15 $((560-($(date +%s)-S))) \
  python3 -m harness run scenarios/gpu/h200_builds.yaml --only off-stock --only on-stock --only on-patched \
  --results-dir /tmp/rp/results --reports-dir /tmp/rp/reports > $OUT/builds.out 2>&1; echo run rc=$?
tail -40 $OUT/builds.out; find /tmp/rp/results -name samples.jsonl -delete; tar -C /tmp/rp -czf $OUT/rp.tgz results

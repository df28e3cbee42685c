#!/usr/bin/env bash
# A host tier that loads back slowly, on real sglang, for compare's regression test (issue #24
# item 9: two healthy nights and one with this build -> compare FAIL on the host-hit rows):
#
#   bash scenarios/gpu/make_slow_hicache.sh SITE_DIR OUT_DIR [REPEAT [SLEEP_MS]]
#   e.g. bash scenarios/gpu/make_slow_hicache.sh /tmp/sglang-site /tmp/sglang-nightly 2
#
# REPEAT and SLEEP_MS are baked into the copy as the defaults of HICACHE_SLOW_LOAD_REPEAT and
# HICACHE_SLOW_LOAD_SLEEP_MS, so the slow build is slow with no variable set: a night with it has
# the same scenario, sglang_source path, args and env -- the same variant config hash -- as the
# healthy nights, which is what lets `harness compare` compare them (a changed env or source path
# makes a variant "not comparable: config changed"). REPEAT 1 and SLEEP_MS 0 (the defaults) give
# an inert copy: the healthy build at the same path.
#
# Copies SITE_DIR/sglang (the offline site unpacked by .gpu/install.sh) to OUT_DIR/python/sglang
# (the layout of a git checkout, so `sglang_source: OUT_DIR` puts OUT_DIR/python first) and wraps
# the host-to-device load of the MHA host pool (sglang/srt/mem_cache/pool_host/mha.py,
# MHATokenToKVPoolHost.load_to_device_per_layer, which HiCacheController.start_loading calls once
# per layer, on the load stream, for every host-tier hit): with HICACHE_SLOW_LOAD_REPEAT=N each
# layer's transfer is issued N times on the load stream. The copies are idempotent (same source,
# same destination), so the outputs are unchanged -- parity stays PASS -- while the load-back
# moves N times the bytes over PCIe: an N-times slower host load-back, the regression a slower
# transfer kernel or a lost pinned mapping would be. The forward pass of layer i waits for layer
# i's load (LayerDoneCounter), so a host hit's TTFT grows by about (N-1) x its load time where
# the load is not hidden behind compute. HICACHE_SLOW_LOAD_SLEEP_MS=M adds a host-side sleep of
# M ms per layer before the load is issued (blocks the scheduler thread; for models whose KV is
# too small for the repeat to show). With repeat 1 and no sleep the class is not touched at all.
# The server log says "HICACHE_SLOW_LOAD active" at import and once at the first slowed load.
set -euo pipefail
if [ $# -lt 2 ] || [ $# -gt 4 ]; then
  echo "usage: $0 SITE_DIR OUT_DIR [REPEAT [SLEEP_MS]]" >&2
  exit 2
fi
SITE=$1
OUT=$2
REPEAT=${3:-1}
SLEEP_MS=${4:-0}
[[ "$REPEAT" =~ ^[1-9][0-9]*$ ]] || { echo "REPEAT must be a whole number >= 1: $REPEAT" >&2; exit 2; }
[[ "$SLEEP_MS" =~ ^[0-9]+([.][0-9]+)?$ ]] || { echo "SLEEP_MS must be a number >= 0: $SLEEP_MS" >&2; exit 2; }
SRC="$SITE/sglang"
[ -f "$SRC/__init__.py" ] || { echo "$SRC is not an sglang package" >&2; exit 2; }
rm -rf "$OUT/python/sglang"
mkdir -p "$OUT/python"
cp -a "$SRC" "$OUT/python/sglang"
TARGET="$OUT/python/sglang/srt/mem_cache/pool_host/mha.py"
[ -f "$TARGET" ] || { echo "no $TARGET: this sglang's host pool lives elsewhere" >&2; exit 3; }
grep -q "^class MHATokenToKVPoolHost" "$TARGET" || { echo "no MHATokenToKVPoolHost in $TARGET" >&2; exit 3; }
grep -q "def load_to_device_per_layer" "$TARGET" || { echo "no load_to_device_per_layer in $TARGET" >&2; exit 3; }

cat >> "$TARGET" <<PATCH


# ---- HICACHE_SLOW_LOAD: a deliberately slow host tier (a regression for harness compare, ----
# ---- scenarios/gpu/make_slow_hicache.sh). Inert unless HICACHE_SLOW_LOAD_REPEAT > 1 or   ----
# ---- HICACHE_SLOW_LOAD_SLEEP_MS > 0.                                                       ----
import os as _hs_os
import time as _hs_time

_HS_REPEAT = max(1, int(_hs_os.environ.get("HICACHE_SLOW_LOAD_REPEAT", "$REPEAT") or 1))
_HS_SLEEP_S = max(0.0, float(_hs_os.environ.get("HICACHE_SLOW_LOAD_SLEEP_MS", "$SLEEP_MS") or 0)) / 1000.0
_HS_STATE = {"loads": 0}

if _HS_REPEAT > 1 or _HS_SLEEP_S > 0:
    _hs_original_load = MHATokenToKVPoolHost.load_to_device_per_layer

    def _hs_load_to_device_per_layer(self, device_pool, host_indices, device_indices, layer_id,
                                     io_backend, *args, **kwargs):
        if _HS_SLEEP_S > 0:
            _hs_time.sleep(_HS_SLEEP_S)
        for _ in range(_HS_REPEAT):  # idempotent: the same rows copied again, on the same stream
            _hs_original_load(self, device_pool, host_indices, device_indices, layer_id,
                              io_backend, *args, **kwargs)
        if layer_id == 0:
            _HS_STATE["loads"] += 1
            if _HS_STATE["loads"] == 1:
                logger.warning("HICACHE_SLOW_LOAD: slowed the first host-to-device load "
                               "(%d tokens, repeat=%d, sleep=%.1f ms per layer)",
                               len(device_indices), _HS_REPEAT, _HS_SLEEP_S * 1000)

    MHATokenToKVPoolHost.load_to_device_per_layer = _hs_load_to_device_per_layer
    logger.warning("HICACHE_SLOW_LOAD active: every host-to-device KV load is issued %d times "
                   "(+%.1f ms per layer) - a regression for the harness, not a real server",
                   _HS_REPEAT, _HS_SLEEP_S * 1000)
PATCH

PY=${PY:-python3}
"$PY" -m py_compile "$TARGET"
echo "patched $TARGET (compiles):"
grep -n "HICACHE_SLOW_LOAD active\|    MHATokenToKVPoolHost.load_to_device_per_layer" "$TARGET"
echo "baked in: repeat=$REPEAT sleep_ms=$SLEEP_MS (inert when 1 and 0); use: sglang_source: $OUT"

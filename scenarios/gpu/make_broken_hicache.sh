#!/usr/bin/env bash
# A broken host tier on real sglang, for the parity negative control
# (scenarios/gpu/h200_parity_control.yaml):
#
#   bash scenarios/gpu/make_broken_hicache.sh SITE_DIR OUT_DIR
#   e.g. bash scenarios/gpu/make_broken_hicache.sh /tmp/sglang-site /tmp/sglang-broken
#
# Copies SITE_DIR/sglang (an installed sglang package: the offline site unpacked by
# .gpu/install.sh) to OUT_DIR/python/sglang and patches the host-to-device load path of the MHA
# host pool (sglang/srt/mem_cache/pool_host/mha.py, MHATokenToKVPoolHost.load_to_device_per_layer,
# which HiCacheController.start_loading calls once per layer for every host-tier hit): when the
# server's environment has HICACHE_CORRUPT_LOAD=1, the K and V just loaded into the GPU pool are
# perturbed, on the load stream, before the layer is marked ready. Without the variable the
# class is not touched at all. Put OUT_DIR/python first on the server's PYTHONPATH (the scenario
# does it per variant; server.sglang_source would apply to every variant).
#
# Knobs (read once when the server imports the module):
#   HICACHE_CORRUPT_LOAD=1          turn it on
#   HICACHE_CORRUPT_MODE=noise      noise (default): add Gaussian noise of SCALE x the loaded
#                                   values' std | zero: zero them | shift: every loaded token gets
#                                   its neighbour's K/V (an off-by-one index bug)
#   HICACHE_CORRUPT_SCALE=1.0       noise size
#   HICACHE_CORRUPT_FRACTION=1.0    share of each load's tokens that is corrupted (the first ones)
# The server log says "HICACHE_CORRUPT_LOAD active" at import and once at the first corrupted load.
set -euo pipefail
if [ $# -ne 2 ]; then
  echo "usage: $0 SITE_DIR OUT_DIR" >&2
  exit 2
fi
SITE=$1
OUT=$2
SRC="$SITE/sglang"
[ -f "$SRC/__init__.py" ] || { echo "$SRC is not an sglang package" >&2; exit 2; }
rm -rf "$OUT/python/sglang"
mkdir -p "$OUT/python"
cp -a "$SRC" "$OUT/python/sglang"
TARGET="$OUT/python/sglang/srt/mem_cache/pool_host/mha.py"
[ -f "$TARGET" ] || { echo "no $TARGET: this sglang's host pool lives elsewhere" >&2; exit 3; }
grep -q "^class MHATokenToKVPoolHost" "$TARGET" || { echo "no MHATokenToKVPoolHost in $TARGET" >&2; exit 3; }
grep -q "def load_to_device_per_layer" "$TARGET" || { echo "no load_to_device_per_layer in $TARGET" >&2; exit 3; }

cat >> "$TARGET" <<'PATCH'


# ---- HICACHE_CORRUPT_LOAD: a deliberately broken host tier (the harness's negative control, ----
# ---- scenarios/gpu/make_broken_hicache.sh). Inert unless HICACHE_CORRUPT_LOAD=1.              ----
import os as _hc_os

_HC_ACTIVE = _hc_os.environ.get("HICACHE_CORRUPT_LOAD", "") == "1"
_HC_MODE = _hc_os.environ.get("HICACHE_CORRUPT_MODE", "noise")
_HC_SCALE = float(_hc_os.environ.get("HICACHE_CORRUPT_SCALE", "1.0"))
_HC_FRACTION = float(_hc_os.environ.get("HICACHE_CORRUPT_FRACTION", "1.0"))
_HC_STATE = {"loads": 0, "generators": {}}


def _hc_corrupt_(buf, device_indices, layer_id):
    """Perturb rows ``device_indices`` of one layer's K or V buffer ([tokens, heads, dim]) in
    place, on the current (load) stream."""
    idx = device_indices
    if idx.device != buf.device:
        idx = idx.to(buf.device)
    idx = idx.reshape(-1).long()
    n = idx.numel()
    if n == 0:
        return 0
    if _HC_FRACTION < 1.0:
        idx = idx[: max(1, int(n * _HC_FRACTION))]
    vals = buf.index_select(0, idx)
    if _HC_MODE == "zero":
        new = torch.zeros_like(vals)
    elif _HC_MODE == "shift":
        new = vals.roll(1, dims=0)
    else:
        gens = _HC_STATE["generators"]
        gen = gens.get(buf.device)
        if gen is None:
            gen = gens[buf.device] = torch.Generator(device=buf.device)
        gen.manual_seed(20261130 + int(layer_id))
        noise = torch.randn(vals.shape, generator=gen, device=buf.device, dtype=torch.float32)
        # the scale stays a device tensor: no host sync inside the load stream
        scale = _HC_SCALE * (vals.float().std() + 1e-6) if vals.numel() > 1 else _HC_SCALE
        new = (vals.float() + scale * noise).to(vals.dtype)
    buf.index_copy_(0, idx, new)
    return int(idx.numel())


if _HC_ACTIVE:
    _hc_original_load = MHATokenToKVPoolHost.load_to_device_per_layer

    def _hc_load_to_device_per_layer(self, device_pool, host_indices, device_indices, layer_id,
                                     io_backend, *args, **kwargs):
        _hc_original_load(self, device_pool, host_indices, device_indices, layer_id, io_backend,
                          *args, **kwargs)
        hit = _hc_corrupt_(device_pool.k_buffer[layer_id], device_indices, layer_id)
        _hc_corrupt_(device_pool.v_buffer[layer_id], device_indices, layer_id)
        if layer_id == 0:
            _HC_STATE["loads"] += 1
            if _HC_STATE["loads"] == 1:
                logger.warning("HICACHE_CORRUPT_LOAD: corrupted the first host-to-device load "
                               "(%d tokens per layer, mode=%s)", hit, _HC_MODE)

    MHATokenToKVPoolHost.load_to_device_per_layer = _hc_load_to_device_per_layer
    logger.warning("HICACHE_CORRUPT_LOAD active: KV loaded from the host tier is corrupted "
                   "(mode=%s, scale=%s, fraction=%s) - a negative control, not a real server",
                   _HC_MODE, _HC_SCALE, _HC_FRACTION)
PATCH

PY=${PY:-python3}
"$PY" -m py_compile "$TARGET"
echo "patched $TARGET (compiles):"
grep -n "HICACHE_CORRUPT_LOAD\|^MHATokenToKVPoolHost.load_to_device_per_layer\|    MHATokenToKVPoolHost.load_to_device_per_layer" "$TARGET"
echo "use: PYTHONPATH=$OUT/python:\$PYTHONPATH HICACHE_CORRUPT_LOAD=1 python3 -m sglang.launch_server ..."

#!/bin/bash
# Device call D (one H200): harness probe on real CUDA - chunked cudaHostRegister timing and its
# rollback (seed 002), GPU page-fault exposure (seed 003), pinned H2D/D2H, the disk under /tmp.
cd "$(dirname "$0")/snap" && ln -sfn .. .gpu
source .gpu/install.sh >/dev/null
export PYTHONPATH=$PWD:$PYTHONPATH
mkdir -p /tmp/l3
timeout -k 10 170 python3 -m harness probe --json $OUT/probe.json --register-gib 32 --register-chunks-gib 1,4,16 \
  --storage-dir /tmp/l3 --timeout 150 2>&1 | tail -60
echo "probe rc=${PIPESTATUS[0]}"

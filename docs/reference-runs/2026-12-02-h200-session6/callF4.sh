#!/bin/bash
# Session 6, device call 4: #29 items 2, 3, 6 - a soak OFF vs ON with NVML energy per token, one GPU,
# from a snapshot of branch soak at e04f31b (.gpu/snapS.tgz).  run(carry=[".gpu"], command="bash .gpu/callF4.sh")
set -u
REPO=$(pwd); G=$REPO/.gpu
rm -rf /tmp/snapS && mkdir -p /tmp/snapS && tar -xzf "$G/snapS.tgz" -C /tmp/snapS && cd /tmp/snapS && ln -sfn "$G" .gpu
CALL_BUDGET_S=${CALL_BUDGET_S:-420} OUT=$OUT bash scenarios/gpu/run_soak_h200.sh
echo "rc=$?"

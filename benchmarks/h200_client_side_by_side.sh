#!/bin/bash
# The client side by side on a lent GPU host (16+ cores, no internet), one device call:
#   run(kind="nvidia-h200", carry=["build/h200deps"], command="bash benchmarks/h200_client_side_by_side.sh")
# Writes $OUT/{machine.txt,fidelity.txt,fidelity.json,schedule.txt,schedule.json}.
# harness client (asyncio's loop and uvloop) vs the raw-socket reference: benchmarks/client_fidelity.py
# (1/64/256/512 lockstep streams and the rate sweep) and benchmarks/schedule_keeping.py (2,000 req/s).
# AIPerf and guidellm are left out (their venvs are > 64 MiB and cannot travel).
# build/h200deps (ignored, ~16 MiB) is built here from a Python 3.11 venv that has the harness installed:
#   SP=.venv/lib/python3.11/site-packages; mkdir -p build/h200deps/pure build/h200deps/cp311
#   for p in httpx httpcore h11 anyio sniffio idna certifi typing_extensions.py; do
#     [ -e $SP/$p ] && cp -r $SP/$p build/h200deps/pure/; done
#   cp -r $SP/uvloop $SP/orjson build/h200deps/cp311/
# (pure: the httpx stack, for an image without it; cp311: uvloop and orjson, used only by a Python 3.11.)
set -u
OUT=${OUT:-/tmp/h200-client}
mkdir -p "$OUT"
export PYTHONPATH="$PWD:$PWD/build/h200deps/pure${PYTHONPATH:+:$PYTHONPATH}"
if python3 -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))'; then
  export PYTHONPATH="$PYTHONPATH:$PWD/build/h200deps/cp311"
fi
{
  nproc; uptime; python3 --version
  python3 -c 'from harness.server.client import client_stack; print("client:", client_stack())'
} > "$OUT/machine.txt" 2>&1
timeout 420 python3 benchmarks/client_fidelity.py --clients reference,harness,harness-uvloop \
  --levels 1,64,256,512 --json "$OUT/fidelity.json" > "$OUT/fidelity.txt" 2>&1
timeout 120 python3 benchmarks/schedule_keeping.py --seconds 5 --json "$OUT/schedule.json" > "$OUT/schedule.txt" 2>&1
cat "$OUT/machine.txt"; tail -n 25 "$OUT/fidelity.txt"; tail -n 7 "$OUT/schedule.txt"

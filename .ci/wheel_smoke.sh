#!/usr/bin/env bash
# Build the sdist and the wheel, install the wheel alone (no source tree on the path) into fresh
# venvs and run the simulator smoke scenario from it — what a user of `pip install` gets:
#   1. core only: `harness run` of a simulated scenario says it needs [sim] in one line, exit 2;
#   2. [sim] without [report]: the smoke run passes (exit 0) and says there is no report;
#      `harness report RUN` says it needs [report] in one line, exit 2 (never a traceback);
#   3. [report] added: `harness report RUN` writes the page.
# The scenario is read from the package (harness.bundled_scenarios), as a user without the
# repository would; the run happens in an empty temporary folder.
# Usage: .ci/wheel_smoke.sh [PYTHON]   (default python3); exits non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${1:-python3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

step() { echo "wheel-smoke: $*"; }
fail() { echo "wheel-smoke: FAIL: $*" >&2; exit 1; }

step "building the sdist and the wheel"
"$PY" -m venv "$work/build-env"
"$work/build-env/bin/pip" install -q build
"$work/build-env/bin/python" -m build --outdir "$work/dist" . >"$work/build.log" 2>&1 || { cat "$work/build.log"; fail "build"; }
wheel=$(ls "$work"/dist/*.whl)
ls "$work"/dist/*.tar.gz >/dev/null || fail "no sdist"
step "built $(cd "$work/dist" && ls | tr '\n' ' ')"

step "fresh venv, the wheel alone (core)"
"$PY" -m venv "$work/venv"
"$work/venv/bin/pip" install -q "$wheel"
run_dir="$work/cwd"
mkdir -p "$run_dir"
cd "$run_dir"   # no source tree here: everything comes from the installed wheel
harness="$work/venv/bin/harness"
"$work/venv/bin/python" - <<'PY'
import harness, pathlib
assert "site-packages" in pathlib.Path(harness.__file__).parts, harness.__file__
PY

set +e
out=$("$harness" run scenarios/sim_smoke.yaml 2>&1); rc=$?
set -e
echo "$out" | tail -3
[ "$rc" = 2 ] || fail "core install: harness run of a sim scenario exited $rc, expected 2"
echo "$out" | grep -q "needs the \[sim\] extra: pip install 'hicache-harness\[sim\]'" || fail "no [sim] line"
echo "$out" | grep -q Traceback && fail "a traceback"

step "[sim] extra: the smoke scenario, no report extra"
"$work/venv/bin/pip" install -q "${wheel}[sim]"
set +e
"$harness" run scenarios/sim_smoke.yaml >"$work/run.log" 2>&1; rc=$?
set -e
tail -12 "$work/run.log"
[ "$rc" = 0 ] || fail "the smoke scenario exited $rc"
grep -q "needs the \[report\] extra" "$work/run.log" || fail "the run did not say why there is no report"
grep -q Traceback "$work/run.log" && fail "a traceback in the run"
run=$(sed -n 's/^results: //p' "$work/run.log" | tail -1)
[ -f "$run/COMPLETE" ] || fail "no COMPLETE run folder at '$run'"
perm=$(stat -c %a "$run/manifest.json")
[ "$perm" = "$(printf '%o' $((0666 & ~$(umask))))" ] || fail "manifest.json is mode $perm, not 0666 & ~umask"

set +e
out=$("$harness" report "$run" 2>&1); rc=$?
set -e
echo "$out"
[ "$rc" = 2 ] || fail "harness report without [report] exited $rc, expected 2"
[ "$(echo "$out" | wc -l)" = 1 ] || fail "more than one line"
echo "$out" | grep -qx "harness report needs the \[report\] extra: pip install 'hicache-harness\[report\]'" || fail "wrong line"

step "[report] extra: the report"
"$work/venv/bin/pip" install -q "${wheel}[report]"
"$harness" report "$run"
ls reports/*/*/index.html >/dev/null || fail "no report written"
step "ok"

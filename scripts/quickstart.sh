#!/usr/bin/env bash
# Quickstart: set up storekit in ./.venv and run the main job on the embedded defaults:
# a local ./storage tier, the bundled sample corpus and BPE tokenizer, no network, no config file.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  if ! "$PY" -m venv .venv 2>/dev/null; then
    # Debian's python3 ships venv separately
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
      DEBIAN_FRONTEND=noninteractive apt-get install -y -q python3-venv >/dev/null
      rm -rf .venv && "$PY" -m venv .venv
    else
      echo "quickstart: '$PY -m venv' failed; install python3-venv" >&2; exit 1
    fi
  fi
fi
.venv/bin/python -m pip install -q --upgrade pip >/dev/null
.venv/bin/python -m pip install -q -e . >/dev/null
SK=.venv/bin/storekit

set -x
$SK init
$SK prepare dataset
$SK dataset info datasets/code/sample/v1
$SK dataset verify datasets/code/sample/v1
$SK layout check
$SK status
{ set +x; } 2>/dev/null
echo "next: storekit is installed in ./.venv: run .venv/bin/storekit --help, or 'source .venv/bin/activate' and then storekit"

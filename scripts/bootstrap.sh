#!/usr/bin/env bash
# Create .venv and install the project with everything the demo and tests need.
# Idempotent: re-running after a successful install only re-checks the stamp.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
VENV=${VENV:-.venv}
# The CPU build: a plain `torch` requirement would pull the CUDA build and several GB of NVIDIA packages.
TORCH_SPEC=${TORCH_SPEC:-torch==2.13.0}

if [ ! -x "$VENV/bin/python" ]; then
  echo "==> creating $VENV"
  "$PY" -m venv "$VENV"
fi
# constraints.txt pins every package to the versions the suite last passed with; CONSTRAINTS= (empty)
# resolves pyproject.toml's ranges afresh, as scripts/lock.sh does to regenerate the file.
CONSTRAINTS=${CONSTRAINTS-constraints.txt}
pin=()
[ -n "$CONSTRAINTS" ] && pin=(-c "$CONSTRAINTS")
stamp="$VENV/.installed-$(cat pyproject.toml ${CONSTRAINTS:+"$CONSTRAINTS"} scripts/bootstrap.sh | sha256sum | cut -c1-16)"
if [ ! -f "$stamp" ]; then
  echo "==> installing (first run takes a few minutes)"
  "$VENV/bin/python" -m pip install -q --upgrade pip
  "$VENV/bin/python" -m pip install -q "${pin[@]}" "$TORCH_SPEC"
  "$VENV/bin/python" -m pip install -q "${pin[@]}" -e ".[local,export,heic,test]"
  rm -f "$VENV"/.installed-*
  touch "$stamp"
fi

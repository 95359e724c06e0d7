#!/usr/bin/env bash
# The README's test command: set up, lint, type-check, then run the whole suite on SQLite and PostgreSQL.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
export RUBRIC_REQUIRE_POSTGRES=1 RUBRIC_REQUIRE_REDIS=1
.venv/bin/ruff check app worker tests bench
.venv/bin/mypy
exec .venv/bin/python -m pytest "$@"

#!/usr/bin/env bash
# The README's first command: set up (idempotent), then `rubric demo`: a SQLite workbench with the
# sample collection, graded in-process by the bundled default model, served on http://127.0.0.1:8000.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
exec .venv/bin/rubric demo "$@"

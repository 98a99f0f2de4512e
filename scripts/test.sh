#!/usr/bin/env bash
# Install, lint, and run the whole test suite (slow and docker tests included where an engine runs).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh
ruff check .
pytest -q "$@"

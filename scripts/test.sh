#!/usr/bin/env bash
# Install, lint, and run the test suite (slow and docker tests included where an engine runs).
#   bash scripts/test.sh            everything (CI)
#   bash scripts/test.sh --fast     the fast lane: everything but the @pytest.mark.slow
#                                   end-to-end tests (full repro, nightly, torchrun, load)
# Further arguments go to pytest. The 40 slowest tests are listed at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh
ruff check .
if [ "${1:-}" = "--fast" ]; then
  shift
  pytest -q --durations=40 -m "not slow" "$@"
else
  pytest -q --durations=40 "$@"
fi

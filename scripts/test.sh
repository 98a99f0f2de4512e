#!/usr/bin/env bash
# Install, lint, and run the test suite (slow and docker tests included where an engine runs).
#   bash scripts/test.sh            everything (CI)
#   bash scripts/test.sh --fast     the fast lane: everything but the @pytest.mark.slow
#                                   end-to-end tests (full repro, nightly, torchrun, load)
# Further arguments go to pytest. The suite runs on CODELOOP_TEST_WORKERS pytest-xdist workers
# (default 2; 0 runs it in this process), a file's tests on one worker (module fixtures are
# built once), files with end-to-end tests first. The 40 slowest tests are listed at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh
ruff check .
opts=(-n "${CODELOOP_TEST_WORKERS:-2}" --dist loadfile --no-loadscope-reorder --durations=40)
if [ "${1:-}" = "--fast" ]; then
  shift
  pytest -q "${opts[@]}" -m "not slow" "$@"
else
  pytest -q "${opts[@]}" "$@"
fi

#!/usr/bin/env bash
# Source me: starts a local Prefect server for this shell unless PREFECT_API_URL is already
# set, exports PREFECT_API_URL, and stops the server (by its PID) when the shell exits.
# Why: one server, with its UI, for the whole run (stages attach to it, and it is gone when
# the shell is).
if [ -z "${PREFECT_API_URL:-}" ]; then
  export PREFECT_HOME="${PREFECT_HOME:-$PWD/.prefect}"
  mkdir -p "$PREFECT_HOME"
  _port=$(python -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  # The UI asks the server where its API is; untold, it answers :4200 and the page fails.
  PREFECT_UI_API_URL="http://127.0.0.1:$_port/api" \
    prefect server start --host 127.0.0.1 --port "$_port" >"$PREFECT_HOME/server.log" 2>&1 &
  _codeloop_prefect_pid=$!
  trap 'kill "$_codeloop_prefect_pid" 2>/dev/null || true' EXIT
  for _ in $(seq 1 90); do
    python - "$_port" <<'PY' && break
import sys, urllib.request
try:
    urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/api/health", timeout=1)
except Exception:
    sys.exit(1)
PY
    sleep 1
  done
  export PREFECT_API_URL="http://127.0.0.1:$_port/api"
  echo "codeloop: Prefect UI at http://127.0.0.1:$_port (log: $PREFECT_HOME/server.log)"
fi

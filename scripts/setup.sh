#!/usr/bin/env bash
# Idempotent install of everything codeloop needs into ./.venv (sourced by run.sh/test.sh).
# Why a venv: the sandbox children run under Debian's /usr/bin/python3 while the pipeline runs
# here; keeping our packages out of the system interpreter keeps the two apart.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null || PY=python3
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
stamp=.venv/.codeloop-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  .venv/bin/python -m pip install -q --upgrade pip
  # The CPU wheel: an unpinned torch would pull a multi-GB CUDA build.
  .venv/bin/python -m pip install -q "torch==2.13.0"
  .venv/bin/python -m pip install -q -e ".[dev]"
  touch "$stamp"
fi
# The sandbox runs model code under an unprivileged uid, which cannot read an interpreter kept
# in root's home: it needs a system python3 (Debian: python3-minimal).
if [ ! -x /usr/bin/python3 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-minimal
  else
    echo "codeloop: /usr/bin/python3 is missing; install python3-minimal (the sandbox needs it)" >&2
    exit 1
  fi
fi
# The real package `codeloop mint` is tested on: a pinned sdist that ships its
# pytest suite, fetched once into the ignored .cache/mint/ (offline after that; the test
# checks its sha256 and skips with a reason when it is absent).
if [ ! -f .cache/mint/inflection-0.5.1.tar.gz ]; then
  .venv/bin/python -m pip download -q --no-deps --no-binary :all: "inflection==0.5.1" \
    -d .cache/mint >/dev/null 2>&1 || echo "codeloop: could not fetch the inflection sdist" >&2
fi
export PATH="$PWD/.venv/bin:$PATH"
export DVC_NO_ANALYTICS=1 DO_NOT_TRACK=1 PREFECT_SERVER_ANALYTICS_ENABLED=false
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false

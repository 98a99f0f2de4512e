#!/usr/bin/env bash
# The main job: install, then one full iteration of the pipeline on the embedded default
# (clean → policy_init → sft → bucket → rollout → score → critic → train → evaluate) through `dvc repro`.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh
source scripts/prefect_server.sh
dvc repro "$@"
echo
echo "codeloop: done. Data in data/, checkpoints in models/, metrics in metrics/."
codeloop report

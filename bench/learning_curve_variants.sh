#!/usr/bin/env bash
# The learning-curve variants compared: the same SFT policy, held-out tasks and seeds for each
# variant; rows appended to metrics/learning_curve_variants.csv as iterations finish.
# Usage: bash bench/learning_curve_variants.sh [ITERATIONS] [OUTDIR]
# Then:  python bench/learning_curve.py --table metrics/learning_curve_variants.csv
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
N=${1:-6}
WORK=${2:-bench/out/variants}
CSV=metrics/learning_curve_variants.csv
mkdir -p "$WORK"
export OMP_NUM_THREADS=1 PYTHONUNBUFFERED=1
COMMON=(--heldout 200 --pool 256 --eval-samples 8 --iterations "$N" --eval-at "$((N / 2)),$N"
        --variants-out "$CSV" --base-cache "$WORK/base.json")
PY=.venv/bin/python
# The SFT policy and its evaluation once; every variant starts from them.
[ -f "$WORK/init/model_version.txt" ] || $PY bench/learning_curve.py "${COMMON[@]}" \
  --iterations 0 --save-init "$WORK/init" --variants-out "$WORK/sft.csv" >"$WORK/init.log" 2>&1
run() {  # name, extra flags
  local name=$1; shift
  $PY bench/learning_curve.py "${COMMON[@]}" --init "$WORK/init" --variant "$name" "$@" \
    >"$WORK/$name.log" 2>&1
}
# Two queues side by side (one torch thread each).
( run grpo; run grpo_replay --set train.replay.fraction=0.5; run rft_grpo \
    --set train.rft=before --set train.rft_source=archive ) &
( run grpo_steps8 --steps 8; run rft --set train.rft=instead --set train.rft_source=archive ) &
wait

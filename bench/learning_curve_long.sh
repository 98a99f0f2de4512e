#!/usr/bin/env bash
# The long learning curve of the shipped default (params.yaml as it is: RFT from the archive, then GRPO)
# for tens of iterations, with the drift check, on the variants bench's held-out tasks and
# seeds; metrics/learning_curve.csv is rewritten after every iteration (poll it). Killed, the
# same command goes on after the last written row (--work).
# Usage: bash bench/learning_curve_long.sh [ITERATIONS] [OUTDIR] [CSV] [-- extra flags]
# e.g.   bash bench/learning_curve_long.sh 20 bench/out/long metrics/learning_curve_rft.csv \
#          -- --set train.rft=instead
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
N=${1:-20}
WORK=${2:-bench/out/long}
CSV=${3:-metrics/learning_curve.csv}
shift $(( $# < 3 ? $# : 3 )); [ "${1:-}" = "--" ] && shift
mkdir -p "$WORK"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2} PYTHONUNBUFFERED=1
# Held-out evaluations every few iterations and at the last (each costs ~1.5 non-evaluated
# iterations); EVAL=... overrides.
EVAL=${EVAL:-3,6,12,16,$N}
INIT=(--save-init "$WORK/init")
[ -f "$WORK/init/model_version.txt" ] && INIT=(--init "$WORK/init")
exec nice -n 19 .venv/bin/python bench/learning_curve.py --heldout 200 --pool 256 \
  --eval-samples 8 --iterations "$N" --eval-at "$EVAL" --drift "${INIT[@]}" \
  --base-cache "$WORK/base.json" --work "$WORK/run" --out "$CSV" "$@"

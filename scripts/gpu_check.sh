#!/usr/bin/env bash
# One command, one GPU, < 8 minutes: rollout tokens/s and one GRPO step (full, LoRA and
# QLoRA on an NF4 4-bit base, peak memory) of a random model shaped like Qwen2.5-Coder-0.5B
# in bf16, beside TRL's GRPOTrainer with equal settings (full, LoRA); then the vLLM engine
# on a random Qwen2.5-Coder-1.5B shape: rollout tokens/s hf vs vllm at batch 64, the
# engine's start and one weight sync in seconds. Figures to metrics/gpu_check.json (or
# --out ...), each part's as it ends. QLoRA needs bitsandbytes (dev or the qlora extra);
# the engine part needs `bash scripts/setup.sh --vllm` (skipped, and said so, without it).
#   scripts/gpu_check.sh                 # on a CUDA machine
#   scripts/gpu_check.sh --cpu-smoke     # the same code path, tiny sizes, on CPU
set -euo pipefail
cd "$(dirname "$0")/.."
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
PY="${PYTHON:-python}"
[ -x .venv/bin/python ] && PY="${PYTHON:-.venv/bin/python}"
exec timeout 480 "$PY" bench/gpu_check.py "$@"

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
# With 2+ GPUs it then compares train.strategy ddp and fsdp (below).
set -euo pipefail
cd "$(dirname "$0")/.."
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
PY="${PYTHON:-python}"
[ -x .venv/bin/python ] && PY="${PYTHON:-.venv/bin/python}"
timeout 480 "$PY" bench/gpu_check.py "$@"
# train.strategy ddp vs fsdp: one GRPO step per rank on a 24-layer, 896-wide model (bf16),
# peak memory (max_memory_allocated) and step seconds per rank, to metrics/train_memory_gpu.json.
# NCCL gives each rank its own GPU, so it needs 2+ of them (up to 4 more minutes).
case " $* " in *" --cpu-smoke "*) exit 0 ;; esac
NGPU=$("$PY" -c 'import torch; print(torch.cuda.device_count())')
if [ "${NGPU:-0}" -ge 2 ]; then
  timeout 240 "$PY" bench/train_memory.py --nproc "$NGPU" --layers 24 --width 896 --heads 14 \
    --out metrics/train_memory_gpu.json
else
  echo "gpu_check: ddp vs fsdp step skipped: it needs 2+ GPUs, this machine has $NGPU"
fi

"""params.yaml's policy sections: which policy (policy), the embedded default's
shape (policy_init) and its SFT warm start (sft).

Config imports nothing of the domain; codeloop.config re-exports every name.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from codeloop.config.section import Section


class PolicyConfig(Section):
    model: str = Field(
        "embedded",
        description="'embedded' builds the tiny offline default; otherwise a hub id or local path.",
    )
    checkpoint: str = Field(
        "models/init", description="Policy directory used by rollout (promoted by nightly)."
    )
    device: str = Field(
        "auto",
        pattern=r"^(auto|cpu|cuda(:\d+)?)$",
        description="Where every stage runs the policy (generation, sampler log-probs, "
        "training): auto = CUDA when torch.cuda.is_available(), else the CPU; cpu; cuda; "
        "cuda:N. A CUDA device on a machine without CUDA is an error naming this field "
        "(codeloop.policy.device). Not a DVC param: like runner.*, it says where, not what.",
    )
    engine: Literal["hf", "vllm"] = Field(
        "hf",
        description="What samples rollout and evaluate episodes: hf (transformers' generate "
        "with codeloop's per-row sampler) or vllm (an inference engine: continuous batching, "
        "paged KV cache; codeloop.policy.engine). Never falls back to hf.",
    )
    engine_url: str = Field(
        "",
        description="vllm only: a running vLLM OpenAI-compatible server to sample from "
        "(e.g. http://127.0.0.1:8000); empty starts the engine beside the stage. Not a DVC "
        "param: it says where, not what.",
    )
    engine_dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field(
        "auto", description="vllm only: the engine's weight dtype (auto: the checkpoint's)."
    )
    engine_memory: float = Field(
        0.5,
        gt=0,
        le=1,
        description="vllm on a GPU: the share of the device's memory the engine takes "
        "(weights + KV cache); the rest is the trainer's. Not a DVC param.",
    )


class PolicyInitConfig(Section):
    seed: int = Field(0, description="Seed for tokenizer sampling, init and SFT order.")
    vocab_size: int = Field(2048, ge=260, le=65536, description="BPE vocabulary size.")
    n_layer: int = Field(4, ge=1, le=48, description="Transformer blocks of the tiny model.")
    n_head: int = Field(4, ge=1, le=64, description="Attention heads per block.")
    n_embd: int = Field(128, ge=16, le=4096, description="Hidden size (divisible by n_head).")
    n_positions: int = Field(1024, ge=128, le=8192, description="Maximum context in tokens.")
    arch: Literal["gpt2", "llama"] = Field(
        "llama",
        description="The tiny model's architecture: gpt2 (learned absolute positions) or llama "
        "(rotary positions, SwiGLU, RMSNorm; same width, depth and heads).",
    )


class SftConfig(Section):
    steps: int = Field(
        1500, ge=0, description="SFT optimizer steps on reference solutions; 0 = copy."
    )
    batch_size: int = Field(16, ge=1, description="SFT sequences per step.")
    lr: float = Field(3e-3, gt=0, le=1.0, description="SFT AdamW peak learning rate.")
    warmup_steps: int = Field(20, ge=0, description="Linear warmup steps before cosine decay.")
    lr_floor: float = Field(
        0.1,
        ge=0,
        le=1,
        description="Multiplier of sft.lr the cosine decay ends at on the last step "
        "(0 = decay to zero).",
    )
    ema: float = Field(
        0.0,
        ge=0,
        lt=1,
        description="Decay of an exponential moving average of the SFT weights; the policy "
        "ends with the average instead of the last step's weights (0 = off).",
    )
    max_len: int = Field(
        1024, ge=32, description="Longest SFT example in tokens (longer: skipped)."
    )
    revise_fraction: float = Field(
        0.5,
        ge=0,
        le=1,
        description="Share of generated tasks that also get a revise example "
        "(wrong program + its feedback -> reference), so multi-turn fixes can succeed.",
    )
    agent_fraction: float = Field(
        0.2,
        ge=0,
        lt=1,
        description="Share of SFT examples that are expert agent episodes on repository "
        "training tasks (scripted expert through the real environment); 0 = none.",
    )
    slip_fraction: float = Field(
        0.5,
        ge=0,
        le=1,
        description="Share of expert episodes that first make a wrong edit (another name in "
        "its old text; kept out of the loss) and mend it from the no_match error's closest "
        "lines, so the policy learns to recover from a failed edit; 0 = none.",
    )
    seed: int = Field(0, description="Seed of SFT example order.")

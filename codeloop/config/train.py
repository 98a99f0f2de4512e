"""params.yaml's train section: GRPO, RFT, archive replay and LoRA adapters.

Config imports nothing of the domain; codeloop.config re-exports every name.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from codeloop.config.section import Section


class LoraConfig(Section):
    r: int = Field(
        0,
        ge=0,
        le=1024,
        description="LoRA rank via peft; 0 = full fine-tuning (the embedded default). The KL "
        "reference is then the base with the adapter disabled (no second model copy).",
    )
    alpha: float = Field(32.0, gt=0, description="LoRA scaling numerator (scale alpha / r).")
    dropout: float = Field(0.0, ge=0, lt=1, description="Dropout on the LoRA input.")
    target_modules: list[str] = Field(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"],
        description="Module names that get adapters (Qwen2/Llama attention projections; "
        "add gate_proj/up_proj/down_proj for the MLP; GPT-2 calls them c_attn/c_proj).",
    )
    merge_on_promote: bool = Field(
        False,
        description="Promotion writes the merged full model instead of base + adapter.",
    )
    quantize: Literal["none", "4bit", "8bit"] = Field(
        "none",
        description="QLoRA: load the frozen base quantized by bitsandbytes (4bit: NF4, double "
        "quant, bf16 compute; 8bit: LLM.int8) under full-precision adapters; recorded in the "
        "adapter checkpoint, whose loads quantize its base the same way. Needs r > 0 and "
        "codeloop[qlora].",
    )

    @model_validator(mode="after")
    def _quantize_needs_adapters(self):
        if self.quantize != "none" and self.r == 0:
            raise ValueError(
                f"quantize: {self.quantize} needs r > 0 (a quantized base cannot be fully "
                "fine-tuned; QLoRA trains adapters on it)"
            )
        return self


class ReplayConfig(Section):  # codeloop.train.archive_replay
    fraction: float = Field(
        0.0,
        ge=0,
        le=0.9,
        description="Share of the GRPO update's rows drawn from data/archive (earlier nights); "
        "0 = off. n_replay = fraction / (1 - fraction) x tonight's rows, capped by what is there.",
    )
    max_age: int = Field(
        3,
        ge=1,
        description="Replay only nights N-max_age .. N-1 (N = tonight's iteration): older "
        "samplers are too far from the policy for a clipped weight to correct.",
    )
    clip: float = Field(
        2.0,
        ge=1.0,
        description="Truncate the importance weight pi_start / pi_sampler at this value "
        "(truncated IS, as TRL's vllm_importance_sampling_cap): bias for bounded variance.",
    )
    level: Literal["token", "sequence"] = Field(
        "token",
        description="token: one truncated weight per generated token (low variance); "
        "sequence: the product over the episode's tokens, truncated once (unbiased "
        "before truncation, but its ESS collapses once the sampler is a night old).",
    )


class TrainConfig(Section):
    steps: int = Field(2, ge=0, description="Optimizer steps per iteration.")
    engine_is_cap: float = Field(
        2.0,
        ge=1.0,
        description="Rows an inference engine sampled (policy.engine: vllm): truncate the "
        "per-token weight pi_start / pi_engine at this value (truncated IS, as TRL's "
        "vllm_importance_sampling_cap; codeloop.train.sampler_gap).",
    )
    lr: float = Field(2e-4, gt=0, le=1.0, description="AdamW learning rate.")
    beta: float = Field(0.02, ge=0, description="KL (k3) coefficient to the reference policy.")
    kl_ratio_correction: bool = Field(
        True, description="Weight k3 by the importance ratio (TRL's use_bias_correction_kl)."
    )
    epsilon_low: float = Field(0.2, ge=0, le=1, description="Lower PPO clip range.")
    epsilon_high: float = Field(0.2, ge=0, le=1, description="Upper PPO clip range.")
    loss_type: Literal["grpo", "bnpo", "dr_grpo", "dapo"] = Field(
        "grpo", description="Loss normalisation as TRL defines it."
    )
    scale_rewards: Literal["group", "batch", "none"] = Field(
        "group", description="Advantage scaling."
    )
    micro_batch_size: int = Field(16, ge=1, description="Sequences per forward pass.")
    grad_accum: int = Field(64, ge=1, description="Micro-batches per optimizer step.")
    max_grad_norm: float = Field(1.0, gt=0, description="Gradient-norm clip.")
    seed: int = Field(0, description="Training seed.")
    weight_decay: float = Field(0.0, ge=0, le=1, description="AdamW weight decay.")
    skip_tied_groups: bool = Field(
        True,
        description="Drop groups whose rewards all tie from the update (DAPO dynamic sampling): "
        "they carry no policy gradient, so this only saves compute and KL-only steps.",
    )
    max_completion_length: int = Field(
        0,
        ge=0,
        description="dr_grpo's constant length normaliser; 0 = longest episode's loss tokens.",
    )
    checkpoint_every: int = Field(
        0,
        ge=0,
        description="Also save a checkpoint every N steps under checkpoints/; 0 = final only.",
    )
    rft: Literal["off", "before", "instead"] = Field(
        "before", description="Fine-tune on passing episodes before or instead of GRPO (RFT)."
    )
    rft_steps: int = Field(4, ge=0, description="RFT full-batch steps (codeloop.train.rft).")
    rft_lr: float = Field(1e-4, gt=0, le=1.0, description="RFT AdamW learning rate.")
    rft_source: Literal["current", "archive"] = Field(
        "archive",
        description="RFT's episodes: tonight's scored trajectories, or those plus every "
        "retained passing episode of earlier nights in data/archive (history/archive_manifest.json).",
    )
    replay: ReplayConfig = Field(
        default_factory=ReplayConfig, description="Archived episodes mixed into the update."
    )
    keep_optimizer_state: bool = Field(
        True,
        description="Carry AdamW's moments across iterations: the candidate gets optimizer.pt "
        "and the next iteration resumes it from its policy checkpoint. A fresh AdamW's first "
        "steps move every weight by about lr whatever its gradient (sign-like); restarting it "
        "each night made each iteration's KL step larger (bench/learning_curve.py). Costs 2x the "
        "model's size on disk; off for hub models you would rather not copy.",
    )
    lora: LoraConfig = Field(default_factory=LoraConfig, description="LoRA adapters (peft).")
    gradient_checkpointing: bool = Field(
        False,
        description="Recompute activations in backward (less memory, more time a step: "
        "bench/grpo_vs_trl.py measures it); puts "
        "the model in train mode, so keep the model's own dropout at 0.",
    )
    bf16: bool = Field(
        False, description="bf16 autocast for the forward passes (CUDA; CPU autocast works too)."
    )
    strategy: Literal["ddp", "fsdp"] = Field(
        "ddp",
        description="How a multi-process launch (torchrun, accelerate launch) trains: ddp keeps "
        "a full replica of the weights, gradients and AdamW state on every rank; fsdp shards all "
        "three across the ranks (torch FSDP2, one unit per transformer block plus the root; bf16 "
        "compute with fp32 gradient reduction on CUDA) and gathers the full weights to rank 0 to "
        "save. Same update either way; a single process trains unsharded (codeloop.train.sharding).",
    )

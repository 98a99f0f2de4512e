"""The section models of params.yaml, one per stage or shared section, a description on
every field; codeloop.config assembles them into ``Params`` and loads the file. Split
from config.py only for size: like it, this imports nothing of the domain.
"""

from __future__ import annotations

from typing import Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class PolicyConfig(_Section):
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


class PolicyInitConfig(_Section):
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


class SftConfig(_Section):
    steps: int = Field(
        1200, ge=0, description="SFT optimizer steps on reference solutions; 0 = copy."
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
        0.03,
        ge=0,
        lt=1,
        description="Share of SFT examples that are expert agent episodes on repository "
        "training tasks (scripted expert through the real environment); 0 = none.",
    )
    slip_fraction: float = Field(
        0.0,
        ge=0,
        le=1,
        description="Share of expert episodes that first make a wrong edit (another name in "
        "its old text; kept out of the loss) and mend it from the no_match error's closest "
        "lines, so the policy learns to recover from a failed edit; 0 = none.",
    )
    seed: int = Field(0, description="Seed of SFT example order.")


class CurriculumStage(_Section):
    until: int = Field(ge=0, description="Last iteration (inclusive) this stage applies to.")
    proportions: list[float] = Field(description="Sampling share per bucket, easiest first.")


class BucketConfig(_Section):
    n_buckets: int = Field(3, ge=1, le=20, description="Number of difficulty buckets.")
    proportions: list[float] = Field(
        default_factory=lambda: [0.4, 0.4, 0.2],
        description="Sampling share per bucket, easiest first; normalised to sum 1.",
    )
    tasks_per_iteration: int = Field(128, ge=1, description="Tasks the plan samples per iteration.")
    seed: int = Field(0, description="Seed of the sampling plan.")
    curriculum: list[CurriculumStage] = Field(
        default_factory=lambda: [CurriculumStage(until=1, proportions=[0.6, 0.3, 0.1])],
        description="Proportions per iteration range; the first stage with until >= "
        "rollout.iteration applies, later iterations use bucket.proportions.",
    )
    pass_rate_weight: float = Field(
        0.8,
        ge=0,
        le=1,
        description="Weight of 1 - empirical pass rate vs the proxy score when history exists.",
    )


# what sandbox.require can name (codeloop.sandbox.isolation.PROPERTIES says what each means);
# the default asks all but the optional ones (isolation.OPTIONAL: the host decides those)
SealProperty = Literal["pid_ns", "net_ns", "ipc_ns", "mount_ns", "private_root",
                       "read_only_root", "caps_dropped", "no_new_privs", "seccomp", "rlimits",
                       "not_host_root", "job_memory_cgroup"]
OPTIONAL_SEAL = ("job_memory_cgroup",)


class SandboxConfig(_Section):
    backend: Literal["subprocess", "local", "docker"] = Field(
        "local", description="Executor backend: local (zygote), docker, or plain subprocess."
    )
    timeout_s: float = Field(
        5.0,
        gt=0,
        le=600,
        description="Time budget per run (s): CPU seconds, and wall time not spent waiting for a"
        " CPU; hard wall cap 10x + 1 s.",
    )
    memory_mb: int = Field(
        512,
        ge=32,
        description="Memory budget per run (MiB): address space per process and, where a"
        " memory cgroup can be made (job_memory_cgroup), all processes of the run together.",
    )
    workers: int = Field(0, ge=0, le=256, description="Parallel workers; 0 = one per core.")
    max_output_bytes: int = Field(65536, ge=1024, description="Cap on captured stdout/stderr.")
    require: list[SealProperty] = Field(
        default_factory=lambda: [p for p in get_args(SealProperty) if p not in OPTIONAL_SEAL],
        description="Isolation the sandbox must really have (probed at start), else preflight,"
        " exec and the local/docker backends refuse it: pid_ns, net_ns, ipc_ns, mount_ns,"
        " private_root, read_only_root, caps_dropped, no_new_privs, seccomp, rlimits,"
        " not_host_root, job_memory_cgroup. Default: all but job_memory_cgroup (the full"
        " seal; a per-job memory cgroup needs root or a delegated cgroup).",
    )
    ro_binds: list[str] = Field(
        default_factory=list,
        description="Host dirs (absolute) mounted read-only at the same path in the sandbox's"
        " private root (a task environment); nothing else of the host is visible.",
    )

    @field_validator("ro_binds")
    @classmethod
    def _absolute_binds(cls, v: list[str]) -> list[str]:
        for path in v:
            if not path.startswith("/") or path.rstrip("/") == "" or ".." in path.split("/"):
                raise ValueError(f"ro_binds entry {path!r}: must be an absolute path below /")
        return v


class RolloutConfig(_Section):
    samples_per_task: int = Field(4, ge=1, le=256, description="Completions per task (GRPO group).")
    max_steps: int = Field(1, ge=1, le=20, description="Generate + revise turns per episode.")
    temperature: float = Field(1.0, gt=0, le=5, description="Sampling temperature.")
    top_p: float = Field(0.95, gt=0, le=1, description="Nucleus sampling mass.")
    repetition_penalty: float = Field(1.0, ge=1, le=5, description="HF repetition penalty.")
    max_new_tokens: int = Field(64, ge=1, le=8192, description="Tokens per generation.")
    agent_max_new_tokens: int = Field(
        96, ge=1, le=8192, description="Tokens per tool call of an agent (repo task) turn."
    )
    batch_size: int = Field(64, ge=1, description="Sequences per generate() call.")
    seed: int = Field(0, description="Sampling seed.")
    iteration: int = Field(0, ge=0, description="Iteration number stamped into trajectories.")
    resume: bool = Field(True, description="Keep finished groups: a killed rollout resumes.")
    resume_shard_tasks: int = Field(16, ge=1, description="Tasks per rollout resume shard.")
    mode: Literal["self_debug", "rubber_duck", "tdd"] = Field(
        "self_debug",
        description="Function-task episodes: self_debug (code, run, read the error, revise),"
        " rubber_duck (after a failed run the model first explains the code and the failure in"
        " prose, then revises), tdd (the model first writes asserts for the statement, judged"
        " against the reference and wrong variants, then the code).",
    )
    agent_mode: Literal["self_debug", "rubber_duck"] = Field(
        "self_debug",
        description="Repository-task episodes: self_debug (tool calls only) or rubber_duck"
        " (after a failing run_tests the model explains the failure in prose before its next call).",
    )


# The reward compositions there are, by name. codeloop.rewards.registry registers exactly
# these (it checks at import, tests/test_score_registry.py too): config, which everything
# stands on, must not import the reward code (and through it the sandbox) to validate.
REWARD_VERSIONS = ("v1", "v2", "v2-critic", "v2-judge", "v3", "v4")


class RewardConfig(_Section):
    version: str = Field(
        "v1",
        description="Reward composition (codeloop.rewards.registry): v1, v2, v2-critic, ..., v3 (repo tasks).",
    )
    repo_version: str = Field(
        "v4",
        description="Reward composition for repository (agent) tasks: judged final diff; "
        "function tasks use `version`.",
    )
    judge_kind: Literal["http", "hf"] = Field(
        "http", description="Judge backend (v2-judge): OpenAI-compatible HTTP or local HF model."
    )
    judge_url: str = Field(
        "", description="Judge: base URL of an OpenAI-compatible API (http) or model path (hf)."
    )
    judge_model: str = Field("", description="Judge: model name sent to the HTTP endpoint.")
    judge_api_key_env: str = Field(
        "", description="Judge: environment variable holding the API key (never the key itself)."
    )
    judge_timeout_s: float = Field(30.0, gt=0, le=600, description="Judge: HTTP timeout (s).")
    critic_path: str = Field("", description="Critic directory (critic.json + .npz), v2-critic.")
    tdd_weight: float = Field(
        0.2, ge=0, le=1,
        description="tdd episodes: weight of the test-quality term (the share of the model's"
        " asserts that pass on the reference solution and fail on the wrong variants).",
    )
    explain_weight: float = Field(
        0.0, ge=0, le=1,
        description="rubber_duck episodes: process reward for an explanation that names the"
        " failing line (quotes the failing test's call or the line the error points at); 0 = off.",
    )

    @field_validator("version", "repo_version")
    @classmethod
    def _known_version(cls, v: str) -> str:
        if v not in REWARD_VERSIONS:
            known = ", ".join(sorted(REWARD_VERSIONS))
            raise ValueError(f"unknown reward version {v!r}; allowed: {known}")
        return v


class ScoreConfig(_Section):
    replay_sample: int = Field(20, ge=0, description="Trajectories replayed after scoring.")
    replay_seed: int = Field(0, description="Seed of the replay sample.")
    hidden_diagnostics: bool = Field(
        True, description="Also run hidden tests (diagnostics only, never in the reward)."
    )
    alarm_gap_threshold: float = Field(
        0.2, ge=0, le=1, description="Hacking alarm: largest visible-hidden pass-rate gap."
    )
    alarm_gap_widen: float = Field(
        0.1, ge=0, le=1, description="Hacking alarm: largest gap increase over one iteration."
    )
    alarm_min_delta: float = Field(
        0.01, ge=0, le=1, description="Hacking alarm: noise floor for reward/hidden-rate moves."
    )
    resume: bool = Field(True, description="Keep scored shards: a killed score resumes.")
    resume_shard_groups: int = Field(16, ge=1, description="GRPO groups per score resume shard.")


class CriticConfig(_Section):
    holdout_fraction: float = Field(
        0.2, ge=0, lt=1, description="Share of tasks held out to measure the critic's AUC."
    )
    seed: int = Field(0, description="Seed of the task-level holdout split.")
    dim_bits: int = Field(16, ge=8, le=24, description="Hashed feature space = 2**dim_bits.")
    epochs: int = Field(60, ge=1, description="Full-batch gradient steps of the fit.")
    lr: float = Field(0.5, gt=0, description="Gradient step size of the logistic regression.")
    l2: float = Field(1e-4, ge=0, description="L2 penalty on the weights.")


class LoraConfig(_Section):
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


class ReplayConfig(_Section):  # codeloop.train.replay
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


class TrainConfig(_Section):
    steps: int = Field(2, ge=0, description="Optimizer steps per iteration.")
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
        "each night doubled the per-iteration KL (bench/learning_curve.py). Costs 2x the "
        "model's size on disk; off for hub models you would rather not copy.",
    )
    lora: LoraConfig = Field(default_factory=LoraConfig, description="LoRA adapters (peft).")
    gradient_checkpointing: bool = Field(
        False,
        description="Recompute activations in backward (less memory, more time: +11% a step in "
        "bench/grpo_vs_trl.py on CPU); puts "
        "the model in train mode, so keep the model's own dropout at 0.",
    )
    bf16: bool = Field(
        False, description="bf16 autocast for the forward passes (CUDA; CPU autocast works too)."
    )


class EvaluateConfig(_Section):
    samples_per_task: int = Field(1, ge=1, le=200, description="n per frozen task for pass@k.")
    temperature: float = Field(0.2, gt=0, le=5, description="Sampling temperature at eval.")
    max_new_tokens: int = Field(128, ge=1, le=8192, description="Tokens per generation.")
    max_steps: int = Field(1, ge=1, le=20, description="Turns per eval episode.")
    agent_max_new_tokens: int = Field(
        96, ge=1, le=8192, description="Tokens per tool call in repo-task eval episodes."
    )
    max_tasks_per_set: int = Field(0, ge=0, description="Cap per frozen set; 0 = all.")
    gate_tolerance: float = Field(
        0.02, ge=0, le=1, description="Largest pass@1 drop allowed before promotion is refused."
    )

"""params.yaml's reward sections: the reward composition (reward), the score stage
(score) and the learned critic (critic).

Config imports nothing of the domain; codeloop.config re-exports every name.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from codeloop.config.section import Section

# The reward compositions there are, by name. codeloop.rewards.registry registers exactly
# these (it checks at import, tests/test_score_registry.py too): config, which everything
# stands on, must not import the reward code (and through it the sandbox) to validate.
REWARD_VERSIONS = ("v1", "v2", "v2-critic", "v2-judge", "v3", "v4")


class RewardConfig(Section):
    visible_subset: float = Field(
        1.0,
        gt=0,
        le=1,
        description="Share of a function task's visible tests each episode is shown and "
        "rewarded on: a subset seeded by task, iteration and rollout seed (one per GRPO "
        "group, other ones next iteration), so no fixed test list can be memorised; replay "
        "recomputes it; 1 = all.",
    )
    version: str = Field(
        "v1",
        description="Reward composition of function tasks (codeloop.rewards.registry): v1 or "
        "v2. v2-critic and v2-judge are unreleased: score and replay take them, train refuses "
        "them.",
    )
    repo_version: str = Field(
        "v4",
        description="Reward composition for repository (agent) tasks: judged final diff; "
        "function tasks use `version`.",
    )
    judge_kind: Literal["http", "hf"] = Field(
        "http",
        description="Judge backend of the unreleased v2-judge: OpenAI-compatible HTTP or "
        "local HF model.",
    )
    judge_url: str = Field(
        "", description="Judge: base URL of an OpenAI-compatible API (http) or model path (hf)."
    )
    judge_model: str = Field("", description="Judge: model name sent to the HTTP endpoint.")
    judge_api_key_env: str = Field(
        "", description="Judge: environment variable holding the API key (never the key itself)."
    )
    judge_timeout_s: float = Field(30.0, gt=0, le=600, description="Judge: HTTP timeout (s).")
    critic_path: str = Field(
        "", description="Critic directory (critic.json + .npz) of the unreleased v2-critic."
    )
    tdd_weight: float = Field(
        0.2, ge=0, le=1,
        description="tdd episodes: weight of the test-quality term. Function tasks: the share"
        " of the model's asserts that pass on the reference solution times the share of"
        " known-wrong codes (reference mutants, failed turns) they catch; repository tasks: 1"
        " when the model's test files pass on the reference tree and fail on the buggy tree.",
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


class ScoreConfig(Section):
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


class CriticConfig(Section):
    holdout_fraction: float = Field(
        0.2, ge=0, lt=1, description="Share of tasks held out to measure the critic's AUC."
    )
    seed: int = Field(0, description="Seed of the task-level holdout split.")
    dim_bits: int = Field(16, ge=8, le=24, description="Hashed feature space = 2**dim_bits.")
    epochs: int = Field(60, ge=1, description="Full-batch gradient steps of the fit.")
    lr: float = Field(0.5, gt=0, description="Gradient step size of the logistic regression.")
    l2: float = Field(1e-4, ge=0, description="L2 penalty on the weights.")

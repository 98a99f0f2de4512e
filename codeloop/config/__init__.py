"""params.yaml, validated: one model per section, a description on every field.

Unknown keys, wrong types and out-of-range values stop with a message that names the
key (``rollout.temperature``) and what is allowed. Stages read their own section only,
so dvc.yaml can list the exact keys each stage depends on.

One module per group of sections (policy, data, rollout, reward, train, evaluate, mint);
this package assembles them into ``Params``, loads the file and re-exports every name.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, Field, ValidationError

from codeloop.config.data import (
    BucketConfig,
    CleanConfig,
    CurriculumStage,
    RepoTasksConfig,
    RetentionConfig,
    SourceSpec,
)
from codeloop.config.evaluate import EvaluateConfig
from codeloop.config.mint import (
    MintSection,
    RepoEntry,
    ReposList,
    load_repos_list,
    parse_repos_list,
)
from codeloop.config.policy import PolicyConfig, PolicyInitConfig, SftConfig
from codeloop.config.reward import REWARD_VERSIONS, CriticConfig, RewardConfig, ScoreConfig
from codeloop.config.rollout import (
    AgentConfig,
    RolloutConfig,
    RunnerConfig,
    SandboxConfig,
    SealProperty,
)
from codeloop.config.section import Section
from codeloop.config.train import LoraConfig, ReplayConfig, TrainConfig

__all__ = [
    "ConfigError",
    "Section",
    "DEFAULT_PARAMS",
    "Params",
    "field_docs",
    "load_params",
    "parse_params",
    "PolicyConfig",
    "PolicyInitConfig",
    "SftConfig",
    "SourceSpec",
    "CleanConfig",
    "RepoTasksConfig",
    "CurriculumStage",
    "BucketConfig",
    "SealProperty",
    "SandboxConfig",
    "RolloutConfig",
    "REWARD_VERSIONS",
    "RewardConfig",
    "ScoreConfig",
    "CriticConfig",
    "LoraConfig",
    "ReplayConfig",
    "TrainConfig",
    "EvaluateConfig",
    "RetentionConfig",
    "RunnerConfig",
    "AgentConfig",
    "MintSection",
    "RepoEntry",
    "ReposList",
    "load_repos_list",
    "parse_repos_list",
]

DEFAULT_PARAMS = Path("params.yaml")


class ConfigError(ValueError):
    """A params file that cannot be used; the message names the file and the key."""


class Params(Section):
    policy: PolicyConfig = Field(default_factory=PolicyConfig, description="Policy selection.")
    policy_init: PolicyInitConfig = Field(
        default_factory=PolicyInitConfig, description="Embedded default policy."
    )
    sft: SftConfig = Field(default_factory=SftConfig, description="SFT warm-start stage.")
    clean: CleanConfig = Field(default_factory=CleanConfig, description="Data cleaning stage.")
    bucket: BucketConfig = Field(default_factory=BucketConfig, description="Bucketing stage.")
    sandbox: SandboxConfig = Field(default_factory=SandboxConfig, description="Executor.")
    rollout: RolloutConfig = Field(default_factory=RolloutConfig, description="Rollout stage.")
    reward: RewardConfig = Field(default_factory=RewardConfig, description="Reward version.")
    score: ScoreConfig = Field(default_factory=ScoreConfig, description="Score stage.")
    critic: CriticConfig = Field(
        default_factory=CriticConfig, description="Learned critic stage (CodeRL)."
    )
    train: TrainConfig = Field(default_factory=TrainConfig, description="GRPO train stage.")
    evaluate: EvaluateConfig = Field(
        default_factory=EvaluateConfig, description="Frozen-set evaluation stage."
    )
    runner: RunnerConfig = Field(default_factory=RunnerConfig, description="Task runner.")
    retention: RetentionConfig = Field(default_factory=RetentionConfig, description="Archive.")
    agent: AgentConfig = Field(
        default_factory=AgentConfig, description="Coding agent's environment (repo tasks)."
    )
    mint: MintSection = Field(
        default_factory=MintSection,
        description="`codeloop mint`: repository tasks minted from real packages.",
    )


def _describe(err: dict[str, Any], model: type[BaseModel]) -> str:
    key = ".".join(str(p) for p in err["loc"])
    msg = f"{key}: {err['msg']}"
    if err["type"] == "extra_forbidden":
        section = model
        for part in err["loc"][:-1]:
            field = section.model_fields.get(str(part)) if isinstance(part, str) else None
            ann = getattr(field, "annotation", None) if field else None
            if isinstance(ann, type) and issubclass(ann, BaseModel):
                section = ann
        msg = f"{key}: unknown key; allowed: {', '.join(sorted(section.model_fields))}"
    elif "input" in err and not isinstance(err["input"], dict):
        msg += f" (got {err['input']!r})"
    return msg


def parse_params(data: dict[str, Any], source: str = "params.yaml") -> Params:
    """Validate a params mapping; raise ConfigError naming every bad key."""
    try:
        return Params.model_validate(data or {})
    except ValidationError as exc:
        lines = [_describe(e, Params) for e in exc.errors()]
        raise ConfigError(f"{source}: invalid params:\n  " + "\n  ".join(lines)) from None


def load_params(path: str | Path = DEFAULT_PARAMS) -> Params:
    """Read and validate params.yaml."""
    path = Path(path)
    if not path.exists():
        raise ConfigError(f"{path}: params file not found")
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: top level must be a mapping of sections")
    return parse_params(data, str(path))


def field_docs(model: type[BaseModel] = Params, prefix: str = "") -> dict[str, str]:
    """Every params key with its description (used by `codeloop params --doc`)."""
    out: dict[str, str] = {}
    for name, f in model.model_fields.items():
        ann = f.annotation
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            out.update(field_docs(ann, f"{prefix}{name}."))
        else:
            out[f"{prefix}{name}"] = f.description or ""
    return out

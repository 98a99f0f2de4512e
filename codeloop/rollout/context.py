"""What every episode of one stage run shares, built once per stage and passed whole."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from codeloop.config import AgentConfig, Params, RolloutConfig, SandboxConfig


@dataclass(frozen=True)
class EpisodeContext:
    """The sampling settings (``rollout``: seed, temperature, group size, turn and token
    limits, episode modes), the sandbox deadline of a function-task run, the agent params
    and snapshots of repository tasks, and the stamps every trajectory carries. Plain
    picklable data: a rollout chunk ships it to a thread, a Dask or a Ray worker."""

    rollout: RolloutConfig
    dataset_version: str
    iteration: int
    timeout_s: float  # one function-task run's deadline (sandbox.timeout_s; 0: the executor's)
    agent: AgentConfig = field(default_factory=AgentConfig)
    repos_dir: str = ""  # the repository tasks' snapshots (data/clean/repos)
    visible_subset: float = 1.0  # reward.visible_subset: share of visible tests an episode sees

    @property
    def seed(self) -> int:
        return self.rollout.seed

    @classmethod
    def of(cls, rollout: RolloutConfig, sandbox: SandboxConfig, dataset_version: str, *,
           agent: AgentConfig | None = None, repos_dir: str = "") -> EpisodeContext:
        """The context of a rollout at ``rollout.iteration`` with the sandbox's deadline."""
        return cls(rollout=rollout, dataset_version=dataset_version,
                   iteration=rollout.iteration, timeout_s=sandbox.timeout_s,
                   agent=agent or AgentConfig(), repos_dir=str(repos_dir))

    @classmethod
    def from_params(cls, params: Params, dataset_version: str, repos_dir: str) -> EpisodeContext:
        """The rollout stage's context: params' rollout, sandbox and agent sections."""
        ctx = cls.of(params.rollout, params.sandbox, dataset_version, agent=params.agent,
                     repos_dir=repos_dir)
        return replace(ctx, visible_subset=params.reward.visible_subset)

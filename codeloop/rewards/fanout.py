"""The score stage's fan-out: stored trajectories scored over the configured runner.

``fan_out_score`` ships chunks of whole GRPO groups (``ScoreJob``) to
codeloop.rollout.runners.fan_out; each chunk opens its own sandbox executor (with
workspaces and an envs root when it holds repository tasks: codeloop.agent.executor) and
builds its own reward extras (critic, judge client), so only plain data crosses processes
and every runner gives the same rows in input order. Every kind of row is scored here,
each with its own scorer (codeloop.rewards.kinds).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field, replace

from codeloop.config import AgentConfig, RewardConfig, RunnerConfig, SandboxConfig
from codeloop.rollout.resume import ShardStore, code_hash, shard_key
from codeloop.rollout.runners import absolute, chunked, fan_out
from codeloop.schema import Task, Trajectory


def score_rows(
    trajs: list[Trajectory],
    tasks_by_id: dict[str, Task],
    executor,
    *,
    reward: RewardConfig,
    hidden: bool = True,
    repos_dir: str = "",
    agent: AgentConfig | None = None,
) -> list[Trajectory]:
    """Scored copies of ``trajs`` on ``executor``, each kind with its scorer and version."""
    from codeloop.agent.judge import judge_config
    from codeloop.rewards.kinds import ScoreContext, score_by_kind

    # Reward extras are built where the chunk runs: a critic never crosses processes.
    judge = judge_config(agent) if agent is not None else None
    ctx = ScoreContext(reward, executor, repos_dir=repos_dir, judge=judge, hidden=hidden)
    return score_by_kind(trajs, tasks_by_id, ctx)


@dataclass
class RepoSetup:
    """Where repository tasks' snapshots and environments are (unused by function rows)."""

    agent: AgentConfig = field(default_factory=AgentConfig)
    repos_dir: str = ""
    envs_dir: str = ""  # the envs root built for the sandbox ('' = agent.envs_dir)
    clean_envs: str = ""  # the clean stage's env dirs the tasks' own envs come from


@dataclass
class ScoreJob:
    """One chunk of the score stage: whole GRPO groups and the tasks they refer to."""

    trajs: list[Trajectory]
    tasks_by_id: dict[str, Task]
    reward: RewardConfig
    sandbox: SandboxConfig
    hidden: bool = True
    resume_dir: str = ""  # non-empty: this chunk is one resume shard, named shard_key
    shard_key: str = ""
    repos: RepoSetup = field(default_factory=RepoSetup)


# Threads of one process open executors one at a time: the envs root is built once.
_OPEN = threading.Lock()


def _open(job: ScoreJob):
    from codeloop.agent.executor import open_executor

    tasks = [job.tasks_by_id[k] for k in sorted(job.tasks_by_id)]
    r = job.repos
    with _OPEN:
        return open_executor(job.sandbox, r.agent, tasks, envs_dir=r.envs_dir,
                             clean_envs=r.clean_envs)


def run_score_chunk(job: ScoreJob) -> list[Trajectory]:
    """Score one chunk of stored trajectories with its own sandbox executor."""
    store = ShardStore(job.resume_dir) if job.resume_dir else None
    if store and (done := store.load(job.shard_key)) is not None:
        return done  # a killed run scored this shard already
    executor = _open(job)
    try:
        rows = score_rows(
            job.trajs, job.tasks_by_id, executor, reward=job.reward, hidden=job.hidden,
            repos_dir=job.repos.repos_dir, agent=job.repos.agent,
        )
    finally:
        executor.close()
    if store:
        store.save(job.shard_key, rows)
    return rows


def _absolute(r: RepoSetup) -> RepoSetup:
    """r's dirs as this process sees them: a worker elsewhere has a working dir of its own."""
    return replace(r, repos_dir=absolute(r.repos_dir), clean_envs=absolute(r.clean_envs),
                   envs_dir=absolute(r.envs_dir or r.agent.envs_dir))


def _chunks(groups: list[list[int]], n_chunks: int, resume_groups: int) -> list[list[list[int]]]:
    """Chunks of whole groups: n_chunks of them, or fixed shards of resume_groups groups."""
    if resume_groups:  # fixed shards, independent of the runner: a rerun finds them
        return [groups[i : i + resume_groups] for i in range(0, len(groups), resume_groups)]
    return chunked(groups, n_chunks)


def fan_out_score(
    trajs: list[Trajectory],
    tasks_by_id: dict[str, Task],
    *,
    reward: RewardConfig,
    sandbox: SandboxConfig,
    runner: RunnerConfig,
    hidden: bool = True,
    n_chunks: int = 0,
    resume_dir: str = "",
    resume_shard_groups: int = 16,
    repos: RepoSetup | None = None,
) -> list[Trajectory]:
    """Scored copies of trajs in input order, fanned out in chunks of whole groups.

    resume_dir: score in shards of resume_shard_groups groups kept there, and reuse the
    shards a killed run finished (codeloop.rollout.resume). repos: where repository
    tasks' snapshots and environments are.
    """
    repos = _absolute(repos or RepoSetup())
    resume_dir = absolute(resume_dir)
    groups: dict[str, list[int]] = {}
    for i, t in enumerate(trajs):
        groups.setdefault(t.prompt_key, []).append(i)
    inputs = {}
    if resume_dir:
        inputs = {
            "reward": reward.model_dump(),
            "sandbox": sandbox.model_dump(),
            "hidden": hidden,
            "agent": repos.agent.model_dump(),
            "code": code_hash("rewards", "sandbox", "agent"),
        }
    jobs, where = [], []
    shards = resume_shard_groups if resume_dir else 0
    for chunk in _chunks(list(groups.values()), n_chunks or runner.workers, shards):
        idx = [i for g in chunk for i in g]
        ids = {trajs[i].task_id for i in idx}
        by_id = {k: v for k, v in tasks_by_id.items() if k in ids}
        rows = [trajs[i] for i in idx]
        key = shard_key(inputs, rows + [by_id[k] for k in sorted(by_id)]) if resume_dir else ""
        jobs.append(ScoreJob(rows, by_id, reward, sandbox, hidden, resume_dir, key, repos))
        where.append(idx)
    out: list[Trajectory | None] = [None] * len(trajs)
    for idx, rows in zip(where, fan_out(run_score_chunk, jobs, runner), strict=True):
        for i, t in zip(idx, rows, strict=True):
            out[i] = t
    return out  # type: ignore[return-value]  (every index is filled above)

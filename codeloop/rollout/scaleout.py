"""Rollout + score fanned out over the configured runner (threads, Dask, Ray).

``rollout_and_score`` splits the planned tasks into contiguous chunks and ships one
``ChunkJob`` per chunk to ``codeloop.rollout.runners.fan_out``; each chunk loads the policy from
its checkpoint directory, opens its own sandbox executor, runs ``run_rollout`` and then
``score_trajectories`` on its rows. Only plain data crosses process boundaries (paths,
pydantic configs, Task and Trajectory rows), so the same job runs in a thread, a Dask
worker process or a Ray worker.

Determinism: every engine gives the same rows in the same order. ``Policy.generate``
samples each row from its own generator seeded from the rollout seed stream (seed,
iteration, turn) and the row's own prompt and rank, never from torch's global RNG, so a
row depends neither on where its chunk runs nor on which other rows share its batch
(up to float rounding of differently padded batches, which can flip a draw only when it
lands within rounding error of a token boundary). Chunks of one process therefore
generate concurrently without a lock. Policy loading is serialised inside
``Policy.load`` (transformers' from_pretrained is not thread-safe).
"""

from __future__ import annotations

from dataclasses import dataclass

from codeloop.config import RewardConfig, RolloutConfig, RunnerConfig, SandboxConfig
from codeloop.rollout.runners import chunked, fan_out
from codeloop.schema import Task, Trajectory


@dataclass
class ChunkJob:
    """Everything one rollout chunk needs, as plain picklable data."""

    policy_dir: str
    tasks: list[Task]
    rollout: RolloutConfig
    sandbox: SandboxConfig
    reward: RewardConfig | None  # None: roll out only (the rollout stage)
    dataset_version: str
    iteration: int
    hidden: bool = True
    torch_threads: int = 0  # 0: as Policy.load sets it (CODELOOP_THREADS, default 1)


@dataclass
class ScoreJob:
    """One chunk of the score stage: whole GRPO groups and the tasks they refer to."""

    trajs: list[Trajectory]
    tasks_by_id: dict[str, Task]
    reward: RewardConfig
    sandbox: SandboxConfig
    hidden: bool = True


def _score(trajs, tasks_by_id, reward: RewardConfig, hidden: bool, executor):
    from codeloop.rewards import score_trajectories
    from codeloop.rewards.extras import build_extras

    # Built where the chunk runs: a critic or a judge client never crosses processes.
    extras = build_extras(reward)
    return score_trajectories(trajs, tasks_by_id, reward.version, executor, hidden=hidden, **extras)


def run_chunk(job: ChunkJob) -> list[Trajectory]:
    """Roll out (and score) one chunk of tasks; top-level so Dask/Ray pickle it by name."""
    from codeloop.policy.model import Policy
    from codeloop.rollout.episodes import run_rollout
    from codeloop.sandbox import make_executor

    policy = Policy.load(job.policy_dir)
    if job.torch_threads:
        import torch

        torch.set_num_threads(job.torch_threads)
    executor = make_executor(job.sandbox)
    try:
        trajs = run_rollout(
            job.tasks,
            policy,
            executor,
            job.rollout,
            timeout_s=job.sandbox.timeout_s,
            dataset_version=job.dataset_version,
            iteration=job.iteration,
        )
        if job.reward is not None:
            by_id = {t.task_id: t for t in job.tasks}
            trajs = _score(trajs, by_id, job.reward, job.hidden, executor)
    finally:
        executor.close()
    return trajs


def run_score_chunk(job: ScoreJob) -> list[Trajectory]:
    """Score one chunk of stored trajectories with its own sandbox executor."""
    from codeloop.sandbox import make_executor

    executor = make_executor(job.sandbox)
    try:
        return _score(job.trajs, job.tasks_by_id, job.reward, job.hidden, executor)
    finally:
        executor.close()


def rollout_and_score(
    tasks: list[Task],
    policy_dir: str,
    *,
    rollout: RolloutConfig,
    sandbox: SandboxConfig,
    reward: RewardConfig | None = None,
    runner: RunnerConfig,
    dataset_version: str,
    n_chunks: int = 0,
    hidden: bool = True,
    torch_threads: int = 0,
) -> list[Trajectory]:
    """All tasks' trajectories in task order, scored with ``reward`` (None: rollout only).

    n_chunks 0 = one chunk per runner worker. torch_threads > 0 sets torch's threads in
    each chunk (a different count can change matmul rounding, so keep it equal across
    runs that must agree row for row).
    """
    jobs = [
        ChunkJob(
            policy_dir=str(policy_dir),
            tasks=c,
            rollout=rollout,
            sandbox=sandbox,
            reward=reward,
            dataset_version=dataset_version,
            iteration=rollout.iteration,
            hidden=hidden,
            torch_threads=torch_threads,
        )
        for c in chunked(tasks, n_chunks or runner.workers)
    ]
    return [t for rows in fan_out(run_chunk, jobs, runner) for t in rows]


def score_fanned(
    trajs: list[Trajectory],
    tasks_by_id: dict[str, Task],
    *,
    reward: RewardConfig,
    sandbox: SandboxConfig,
    runner: RunnerConfig,
    hidden: bool = True,
    n_chunks: int = 0,
) -> list[Trajectory]:
    """Scored copies of trajs in input order, fanned out in chunks of whole groups."""
    groups: dict[str, list[int]] = {}
    for i, t in enumerate(trajs):
        groups.setdefault(t.prompt_key, []).append(i)
    jobs, where = [], []
    for chunk in chunked(list(groups.values()), n_chunks or runner.workers):
        idx = [i for g in chunk for i in g]
        ids = {trajs[i].task_id for i in idx}
        by_id = {k: v for k, v in tasks_by_id.items() if k in ids}
        jobs.append(ScoreJob([trajs[i] for i in idx], by_id, reward, sandbox, hidden))
        where.append(idx)
    out: list[Trajectory | None] = [None] * len(trajs)
    for idx, rows in zip(where, fan_out(run_score_chunk, jobs, runner), strict=True):
        for i, t in zip(idx, rows, strict=True):
            out[i] = t
    return out  # type: ignore[return-value]  (every index is filled above)

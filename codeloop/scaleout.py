"""Rollout + score fanned out over the configured runner (threads, Dask, Ray).

``rollout_and_score`` splits the planned tasks into contiguous chunks and ships one
``ChunkJob`` per chunk to ``codeloop.runners.fan_out``; each chunk loads the policy from
its checkpoint directory, opens its own sandbox executor, runs ``run_rollout`` and then
``score_trajectories`` on its rows. Only plain data crosses process boundaries (paths,
pydantic configs, Task and Trajectory rows), so the same job runs in a thread, a Dask
worker process or a Ray worker.

Determinism: for a given chunking, every engine gives the same rows in the same order.
Each chunk samples with the rollout seed stream (seed, iteration, turn), so rows depend
on how tasks are chunked, never on where a chunk runs. ``Policy.generate`` seeds torch's
process-global RNG, so two threads of one process must not sample at the same time:
generation is serialised per process by ``_GENERATE_LOCK`` (sandbox runs and scoring
still overlap). In Dask or Ray each worker process has its own RNG and no lock waits.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from codeloop.config import RewardConfig, RolloutConfig, RunnerConfig, SandboxConfig
from codeloop.runners import chunked, fan_out
from codeloop.schema import Task, Trajectory

_GENERATE_LOCK = threading.Lock()


@dataclass
class ChunkJob:
    """Everything one chunk needs, as plain picklable data."""

    policy_dir: str
    tasks: list[Task]
    rollout: RolloutConfig
    sandbox: SandboxConfig
    reward_version: str
    dataset_version: str
    iteration: int
    score: bool = True
    torch_threads: int = 0  # 0: as Policy.load sets it (all cores of the process)


class _SerialisedPolicy:
    """A Policy whose generate() holds the per-process lock (global torch RNG)."""

    def __init__(self, policy: Any):
        self._policy = policy

    def __getattr__(self, name: str) -> Any:
        return getattr(self._policy, name)

    def generate(self, *args: Any, **kwargs: Any):
        with _GENERATE_LOCK:
            return self._policy.generate(*args, **kwargs)


def run_chunk(job: ChunkJob) -> list[Trajectory]:
    """Roll out (and score) one chunk of tasks; top-level so Dask/Ray pickle it by name."""
    from codeloop.policy import Policy
    from codeloop.rewards import score_trajectories
    from codeloop.rollout import run_rollout
    from codeloop.sandbox import make_executor

    policy = _SerialisedPolicy(Policy.load(job.policy_dir))
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
        if job.score:
            by_id = {t.task_id: t for t in job.tasks}
            trajs = score_trajectories(trajs, by_id, job.reward_version, executor)
    finally:
        executor.close()
    return trajs


def rollout_and_score(
    tasks: list[Task],
    policy_dir: str,
    *,
    rollout: RolloutConfig,
    sandbox: SandboxConfig,
    reward: RewardConfig,
    runner: RunnerConfig,
    dataset_version: str,
    n_chunks: int = 0,
    score: bool = True,
    torch_threads: int = 0,
) -> list[Trajectory]:
    """All tasks' trajectories, scored, in task order; n_chunks 0 = one per worker.

    torch_threads > 0 caps torch's threads in each chunk (local worker processes share
    the cores, and each would otherwise use all of them). It is off by default because a
    different thread count can change matmul rounding and thus the sampled tokens: with
    it, engines no longer give bit-identical rows.
    """
    chunks = chunked(tasks, n_chunks or runner.workers)
    jobs = [
        ChunkJob(
            policy_dir=str(policy_dir),
            tasks=c,
            rollout=rollout,
            sandbox=sandbox,
            reward_version=reward.version,
            dataset_version=dataset_version,
            iteration=rollout.iteration,
            score=score,
            torch_threads=torch_threads,
        )
        for c in chunks
    ]
    return [t for rows in fan_out(run_chunk, jobs, runner) for t in rows]

"""Rollout fanned out over the configured runner (threads, Dask, Ray).

``fan_out_rollout`` splits the planned tasks into contiguous chunks and ships one
``ChunkJob`` per chunk to ``codeloop.rollout.runners.fan_out``; each chunk loads the policy
from its checkpoint directory, opens its own sandbox executor, runs ``run_rollout`` and,
when the job carries a ``score`` function (benchmarks: rollout and score in one pass;
e.g. ``functools.partial(codeloop.rewards.fanout.score_rows, reward=...)``), scores its
rows with it. This module never imports the reward code: the rollout stage, which never
scores, must not rerun when a reward file changes (dvc.yaml deps are its import closure).
The score stage's own fan-out is codeloop.rewards.fanout. Only plain data (and top-level
functions) cross process boundaries (paths,
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

from collections.abc import Callable
from dataclasses import dataclass

from codeloop.config import RolloutConfig, RunnerConfig, SandboxConfig
from codeloop.rollout.runners import chunked, fan_out
from codeloop.schema import Task, Trajectory


@dataclass
class ChunkJob:
    """Everything one rollout chunk needs, as plain picklable data."""

    policy_dir: str
    tasks: list[Task]
    rollout: RolloutConfig
    sandbox: SandboxConfig
    score: Callable | None  # (trajs, tasks_by_id, executor) -> scored; None: roll out only
    dataset_version: str
    iteration: int
    torch_threads: int = 0  # 0: as Policy.load sets it (CODELOOP_THREADS, default 1)


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
        if job.score is not None:
            trajs = job.score(trajs, {t.task_id: t for t in job.tasks}, executor)
    finally:
        executor.close()
    return trajs


def fan_out_rollout(
    tasks: list[Task],
    policy_dir: str,
    *,
    rollout: RolloutConfig,
    sandbox: SandboxConfig,
    score: Callable | None = None,
    runner: RunnerConfig,
    dataset_version: str,
    n_chunks: int = 0,
    torch_threads: int = 0,
) -> list[Trajectory]:
    """All tasks' trajectories in task order, scored by ``score`` (None: rollout only).

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
            score=score,
            dataset_version=dataset_version,
            iteration=rollout.iteration,
            torch_threads=torch_threads,
        )
        for c in chunked(tasks, n_chunks or runner.workers)
    ]
    return [t for rows in fan_out(run_chunk, jobs, runner) for t in rows]

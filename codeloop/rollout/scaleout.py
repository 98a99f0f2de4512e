"""Rollout fanned out over the configured runner (threads, Dask, Ray).

``fan_out_rollout`` splits the planned tasks into contiguous chunks and ships one
``ChunkJob`` per chunk to ``codeloop.rollout.runners.fan_out``; each chunk loads the policy
from its checkpoint directory, opens its own sandbox executor, runs ``run_mixed_rollout`` (function tasks through ``run_rollout``, repo
tasks as agent episodes) and,
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
from dataclasses import dataclass, field
from typing import Any

from codeloop.config import RolloutConfig, RunnerConfig, SandboxConfig
from codeloop.rollout.resume import ShardStore, code_hash, policy_version, shard_key
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
    device: str = "auto"  # policy.device, resolved in the worker (codeloop.policy.device)
    quantize: str | None = None  # as train loads it (lora.training_quantize); None: recorded
    resume_dir: str = ""  # non-empty: tasks are rolled out in groups kept as shards
    groups: list[list[Task]] = field(default_factory=list)  # the shards' tasks, in order
    resume_inputs: dict = field(default_factory=dict)  # what every shard key hashes
    agent: Any = None  # the agent params (codeloop.config AgentConfig) for repo tasks
    repos_dir: str = ""  # data/clean/repos: the repo tasks' snapshots
    envs_root: str = ""  # test env dirs the agent sandbox mounts (repo tasks)


def _roll(job: ChunkJob, tasks: list[Task], policy, executor) -> list[Trajectory]:
    from codeloop.rollout.agent_episodes import run_mixed_rollout

    # The task's kind decides the episode kind: function tasks self-debug, repo tasks
    # are agent episodes in a sealed workspace (codeloop.rollout.agent_episodes).
    trajs = run_mixed_rollout(
        tasks,
        policy,
        executor,
        job.rollout,
        timeout_s=job.sandbox.timeout_s,
        dataset_version=job.dataset_version,
        iteration=job.iteration,
        agent_cfg=job.agent,
        repos_dir=job.repos_dir,
    )
    if job.score is not None:
        trajs = job.score(trajs, {t.task_id: t for t in tasks}, executor)
    return trajs


def run_chunk(job: ChunkJob) -> list[Trajectory]:
    """Roll out (and score) one chunk of tasks; top-level so Dask/Ray pickle it by name."""
    from codeloop.policy.model import Policy
    from codeloop.sandbox import make_executor

    store = ShardStore(job.resume_dir) if job.resume_dir else None
    groups = job.groups if store else [job.tasks]
    keys = [shard_key(job.resume_inputs, g) for g in groups] if store else []
    done = [store.load(k) for k in keys] if store else [None]
    if all(d is not None for d in done):
        return [t for d in done for t in d]  # every group finished before: nothing to load
    policy = Policy.load(job.policy_dir, job.quantize, job.device)
    if job.torch_threads:
        import torch

        torch.set_num_threads(job.torch_threads)
    agent = any(t.kind == "repo" for t in job.tasks)  # workspaces only when needed
    executor = make_executor(job.sandbox, workspaces=agent, envs_root=job.envs_root or None)
    out: list[Trajectory] = []
    try:
        for i, group in enumerate(groups):
            trajs = done[i]
            if trajs is None:
                trajs = _roll(job, group, policy, executor)
                if store:
                    store.save(keys[i], trajs)
            out += trajs
    finally:
        executor.close()
    return out


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
    resume_dir: str = "",
    device: str = "auto",
    quantize: str | None = None,
    agent: Any = None,
    repos_dir: str = "",
    envs_root: str = "",
) -> list[Trajectory]:
    """All tasks' trajectories in task order, scored by ``score`` (None: rollout only).

    n_chunks 0 = one chunk per runner worker. torch_threads > 0 sets torch's threads in
    each chunk (a different count can change matmul rounding, so keep it equal across
    runs that must agree row for row). resume_dir: keep finished groups of
    ``rollout.resume_shard_tasks`` tasks there and skip those a killed run finished
    (codeloop.rollout.resume); rollout only (score None). device: policy.device;
    quantize: the base's quantize mode (QLoRA's first night samples the 4-bit base it trains).
    """
    if resume_dir and score is not None:
        raise ValueError("resume_dir: resumable rollout keys shards on rollout inputs only")
    groups: list[list[Task]] = []
    inputs: dict = {}
    if resume_dir:
        # Fixed groups, independent of the runner: a rerun on other workers finds them.
        size = rollout.resume_shard_tasks
        groups = [tasks[i : i + size] for i in range(0, len(tasks), size)]
        inputs = {
            "policy": policy_version(policy_dir),
            "quantize": quantize,
            "rollout": rollout.model_dump(),
            "sandbox": sandbox.model_dump(),
            "dataset_version": dataset_version,
            "agent": agent.model_dump() if agent is not None else None,
            "code": code_hash("policy", "rollout", "sandbox", "agent"),
        }
    units = groups if resume_dir else tasks
    jobs = [
        ChunkJob(
            policy_dir=str(policy_dir),
            tasks=[t for g in c for t in g] if resume_dir else c,
            rollout=rollout,
            sandbox=sandbox,
            score=score,
            dataset_version=dataset_version,
            iteration=rollout.iteration,
            torch_threads=torch_threads,
            resume_dir=str(resume_dir),
            groups=c if resume_dir else [],
            resume_inputs=inputs,
            device=device,
            quantize=quantize,
            agent=agent,
            repos_dir=str(repos_dir),
            envs_root=str(envs_root),
        )
        for c in chunked(units, n_chunks or runner.workers)
    ]
    return [t for rows in fan_out(run_chunk, jobs, runner) for t in rows]

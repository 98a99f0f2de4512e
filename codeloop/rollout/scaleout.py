"""Rollout fanned out over the configured runner (threads, Dask, Ray).

``fan_out_rollout`` splits the planned tasks into contiguous chunks and ships one
``ChunkJob`` per chunk to ``codeloop.rollout.runners.fan_out``; each chunk loads the policy
from its checkpoint directory, opens its own sandbox executor, runs the episodes of its
tasks (``codeloop.rollout.envs.run_episodes``: each task kind through its env) and, when
the job carries a ``score`` function (benchmarks: rollout and score in one pass; e.g.
``functools.partial(codeloop.rewards.fanout.score_rows, reward=...)``), scores its rows
with it. This module never imports the reward code: the rollout stage, which never
scores, must not rerun when a reward file changes (dvc.yaml deps are its import closure).
Only plain data (and top-level functions) cross process boundaries (paths, pydantic
configs, the EpisodeContext, Task and Trajectory rows), so the same job runs in a thread,
a Dask worker process or a Ray worker.

Determinism: every runner gives the same rows in the same order. ``Policy.generate``
samples each row from its own generator seeded from the rollout seed stream (seed,
iteration, turn) and the row's own prompt and rank, never from torch's global RNG, so a
row depends neither on where its chunk runs nor on which other rows share its batch
(up to float rounding of differently padded batches, which can flip a draw only when it
lands within rounding error of a token boundary). Chunks of one process therefore
generate concurrently without a lock. Policy loading is serialised inside
``Policy.load`` (transformers' from_pretrained is not thread-safe).

With ``policy.engine: vllm`` a chunk does not load the model: every chunk of a process
samples through that process's one engine (``codeloop.policy.engine.shared_engine_policy``,
continuous batching across chunks); a Dask or Ray worker process starts its own, on its
own device, unless ``policy.engine_url`` names a server they all share. The engine's rows
are its own (another sampler), the same for the same seeds on any runner.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

from codeloop.config import RunnerConfig, SandboxConfig
from codeloop.policy.engine import EngineSettings
from codeloop.policy.engine_policy import shared_engine_policy
from codeloop.rollout.context import EpisodeContext
from codeloop.rollout.resume import ShardStore, code_hash, policy_version, shard_key
from codeloop.rollout.runners import absolute, chunked, fan_out
from codeloop.schema import Task, Trajectory


@dataclass(frozen=True)
class PolicySource:
    """Where a chunk loads the policy from and how."""

    policy_dir: str
    device: str = "auto"  # policy.device, resolved in the worker (codeloop.policy.device)
    quantize: str | None = None  # as train loads it (lora.training_quantize); None: recorded
    torch_threads: int = 0  # 0: as Policy.load sets it (CODELOOP_THREADS, default 1)
    engine: EngineSettings | None = None  # policy.engine other than hf: who samples it

    def open(self):
        """The policy to sample from: loaded here (hf) or served by this process's engine."""
        if self.engine is not None:
            return shared_engine_policy(self.policy_dir, self.engine, self.quantize)
        from codeloop.policy.model import Policy

        policy = Policy.load(self.policy_dir, self.quantize, self.device)
        if self.torch_threads:
            import torch

            torch.set_num_threads(self.torch_threads)
        return policy


@dataclass
class ChunkJob:
    """Everything one rollout chunk needs, as plain picklable data."""

    source: PolicySource
    tasks: list[Task]
    ctx: EpisodeContext
    sandbox: SandboxConfig
    score: Callable | None  # (trajs, tasks_by_id, executor) -> scored; None: roll out only
    envs_root: str = ""  # test env dirs the agent sandbox mounts (repo tasks)
    resume_dir: str = ""  # non-empty: tasks are rolled out in groups kept as shards
    groups: list[list[Task]] = field(default_factory=list)  # the shards' tasks, in order
    resume_inputs: dict = field(default_factory=dict)  # what every shard key hashes


def _roll(job: ChunkJob, tasks: list[Task], policy, executor) -> list[Trajectory]:
    from codeloop.rollout.envs import run_episodes

    trajs = run_episodes(tasks, policy, executor, job.ctx)
    if job.score is not None:
        trajs = job.score(trajs, {t.task_id: t for t in tasks}, executor)
    return trajs


def run_chunk(job: ChunkJob) -> list[Trajectory]:
    """Roll out (and score) one chunk of tasks; top-level so Dask/Ray pickle it by name."""
    from codeloop.agent.executor import open_executor

    store = ShardStore(job.resume_dir) if job.resume_dir else None
    groups = job.groups if store else [job.tasks]
    keys = [shard_key(job.resume_inputs, g) for g in groups] if store else []
    done = [store.load(k) for k in keys] if store else [None]
    if all(d is not None for d in done):
        return [t for d in done for t in d]  # every group finished before: nothing to load
    policy = job.source.open()
    executor = open_executor(job.sandbox, job.ctx.agent, job.tasks, envs_dir=job.envs_root)
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
    source: PolicySource | str,
    ctx: EpisodeContext,
    *,
    sandbox: SandboxConfig,
    runner: RunnerConfig,
    score: Callable | None = None,
    n_chunks: int = 0,
    resume_dir: str = "",
    envs_root: str = "",
) -> list[Trajectory]:
    """All tasks' trajectories in task order, scored by ``score`` (None: rollout only).

    source: the policy directory (or a PolicySource with its device, quantize mode and
    torch threads: a different thread count can change matmul rounding, so keep it equal
    across runs that must agree row for row). n_chunks 0 = one chunk per runner worker.
    resume_dir: keep finished groups of ``rollout.resume_shard_tasks`` tasks there and
    skip those a killed run finished (codeloop.rollout.resume); rollout only (score None).
    """
    if resume_dir and score is not None:
        raise ValueError("resume_dir: resumable rollout keys shards on rollout inputs only")
    src = source if isinstance(source, PolicySource) else PolicySource(str(source))
    # Paths as this process sees them: a worker elsewhere has a working dir of its own.
    src = replace(src, policy_dir=absolute(src.policy_dir))
    ctx = replace(ctx, repos_dir=absolute(ctx.repos_dir))
    envs_root = absolute(envs_root or ctx.agent.envs_dir)
    groups: list[list[Task]] = []
    inputs: dict = {}
    if resume_dir:
        # Fixed groups, independent of the runner: a rerun on other workers finds them.
        size = ctx.rollout.resume_shard_tasks
        groups = [tasks[i : i + size] for i in range(0, len(tasks), size)]
        inputs = _resume_inputs(src, ctx, sandbox)
    units = groups if resume_dir else tasks
    jobs = [
        ChunkJob(
            source=src,
            tasks=[t for g in c for t in g] if resume_dir else c,
            ctx=ctx,
            sandbox=sandbox,
            score=score,
            envs_root=envs_root,
            resume_dir=absolute(resume_dir),
            groups=c if resume_dir else [],
            resume_inputs=inputs,
        )
        for c in chunked(units, n_chunks or runner.workers)
    ]
    return [t for rows in fan_out(run_chunk, jobs, runner) for t in rows]


def _resume_inputs(src: PolicySource, ctx: EpisodeContext, sandbox: SandboxConfig) -> dict:
    """What a finished group's rows depend on: a shard is reused only when all agree."""
    return {
        "policy": policy_version(src.policy_dir),
        "quantize": src.quantize,
        "engine": [src.engine.engine, src.engine.dtype] if src.engine else "hf",
        "rollout": ctx.rollout.model_dump(),
        "sandbox": sandbox.model_dump(),
        "dataset_version": ctx.dataset_version,
        "iteration": ctx.iteration,
        "agent": ctx.agent.model_dump(),
        "code": code_hash("policy", "rollout", "sandbox", "agent"),
    }

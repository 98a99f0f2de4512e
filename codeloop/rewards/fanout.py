"""The score stage's fan-out: stored trajectories scored over the configured runner.

``fan_out_score`` ships chunks of whole GRPO groups (``ScoreJob``) to
codeloop.rollout.runners.fan_out; each chunk opens its own sandbox executor and builds
its own reward extras (critic, judge client), so only plain data crosses processes and
every runner gives the same rows in input order.
"""

from __future__ import annotations

from dataclasses import dataclass

from codeloop.config import RewardConfig, RunnerConfig, SandboxConfig
from codeloop.rollout.runners import chunked, fan_out
from codeloop.schema import Task, Trajectory


def score_rows(
    trajs: list[Trajectory],
    tasks_by_id: dict[str, Task],
    executor,
    *,
    reward: RewardConfig,
    hidden: bool = True,
) -> list[Trajectory]:
    """Scored copies of ``trajs`` with ``reward``'s version on ``executor``."""
    from codeloop.rewards import score_trajectories
    from codeloop.rewards.extras import build_extras

    # Built where the chunk runs: a critic or a judge client never crosses processes.
    extras = build_extras(reward)
    return score_trajectories(trajs, tasks_by_id, reward.version, executor, hidden=hidden, **extras)


@dataclass
class ScoreJob:
    """One chunk of the score stage: whole GRPO groups and the tasks they refer to."""

    trajs: list[Trajectory]
    tasks_by_id: dict[str, Task]
    reward: RewardConfig
    sandbox: SandboxConfig
    hidden: bool = True


def run_score_chunk(job: ScoreJob) -> list[Trajectory]:
    """Score one chunk of stored trajectories with its own sandbox executor."""
    from codeloop.sandbox import make_executor

    executor = make_executor(job.sandbox)
    try:
        return score_rows(
            job.trajs, job.tasks_by_id, executor, reward=job.reward, hidden=job.hidden
        )
    finally:
        executor.close()


def fan_out_score(
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

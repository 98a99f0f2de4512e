"""Prefect tasks of the score stage (thin wrappers over codeloop.rewards)."""

from __future__ import annotations

from typing import Any

from prefect import task
from prefect.cache_policies import NONE
from prefect.logging import get_run_logger

from codeloop.config import Params
from codeloop.io import read_tasks, read_trajectories, write_trajectories
from codeloop.schema import Task, Trajectory


@task(name="load-rollouts", cache_policy=NONE)
def load_rollouts(rollouts_dir: str, tasks_path: str) -> tuple[list[Trajectory], dict[str, Task]]:
    """Unscored trajectories and the tasks they refer to, by task_id."""
    trajs = read_trajectories(rollouts_dir)
    tasks = {t.task_id: t for t in read_tasks(tasks_path)}
    get_run_logger().info("%d trajectories over %d tasks", len(trajs), len(tasks))
    return trajs, tasks


@task(name="score-trajectories", cache_policy=NONE)
def score_batch(
    params: Params, trajs: list[Trajectory], tasks_by_id: dict[str, Task]
) -> list[Trajectory]:
    """Re-execute final code in the sandbox and apply params' reward version, over params.runner."""
    from codeloop.rollout.scaleout import score_fanned

    get_run_logger().info("scoring on runner %s x%d", params.runner.kind, params.runner.workers)
    return score_fanned(
        trajs,
        tasks_by_id,
        reward=params.reward,
        sandbox=params.sandbox,
        runner=params.runner,
        hidden=params.score.hidden_diagnostics,
    )


@task(name="write-trajectories", cache_policy=NONE)
def write_scored(out_dir: str, trajs: list[Trajectory]) -> int:
    write_trajectories(out_dir, trajs)
    return len(trajs)


@task(name="replay-sample", cache_policy=NONE)
def replay_sample(params: Params, traj_dir: str, tasks_by_id: dict[str, Task]) -> dict[str, Any]:
    """Replay score.replay_sample stored trajectories; returns the summary and the table."""
    from codeloop.rewards.extras import build_extras_for
    from codeloop.rewards.replay import replay, sample_trajectories
    from codeloop.sandbox import make_executor

    stored = read_trajectories(traj_dir)
    sample = sample_trajectories(stored, params.score.replay_sample, params.score.replay_seed)
    extras = build_extras_for(params.reward, {t.metadata.reward_fn_version for t in sample})
    executor = make_executor(params.sandbox)
    try:
        report = replay(sample, tasks_by_id, executor, **extras)
    finally:
        executor.close()
    get_run_logger().info("replay:\n%s", report.table(only_problems=True))
    return {**report.summary(), "table": report.table(only_problems=True)}


@task(name="publish-reward-components", cache_policy=NONE)
def publish_components(metrics: dict[str, Any]) -> None:
    """Table artifact 'reward-components': one row per component distribution."""
    from prefect.artifacts import create_table_artifact

    rows = [{"component": "reward", **metrics["reward"]}]
    rows += [{"component": k, **v} for k, v in metrics["components"].items()]
    create_table_artifact(
        key="reward-components",
        table=rows,
        description=f"Reward {metrics['reward_version']}: component distributions",
    )

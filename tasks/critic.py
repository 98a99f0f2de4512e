"""Prefect tasks of the critic stage (thin wrappers over codeloop.rewards.critic)."""

from __future__ import annotations

from typing import Any

from prefect import task
from prefect.cache_policies import NONE
from prefect.logging import get_run_logger

from codeloop.config import CriticConfig
from codeloop.rewards.critic import train_from_config
from codeloop.schema import Task, Trajectory


@task(name="fit-critic", cache_policy=NONE)
def fit_critic(
    cfg: CriticConfig, trajs: list[Trajectory], tasks_by_id: dict[str, Task], out_dir: str
) -> dict[str, Any]:
    """Fit the critic on the scored trajectories, save it to ``out_dir``, return metrics."""
    critic, metrics = train_from_config(trajs, tasks_by_id, cfg)
    critic.save(out_dir)
    get_run_logger().info(
        "critic on %d examples (pass rate %.3f, skipped %s): held-out AUC %s over %d rows",
        metrics["n_examples"],
        metrics["pass_rate"],
        metrics["skipped"] or "none",
        metrics["holdout_auc"],
        metrics["n_holdout"],
    )
    return metrics

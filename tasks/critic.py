"""Prefect tasks of the critic stage (thin wrappers over codeloop.rewards.critic)."""

from __future__ import annotations

from typing import Any

from prefect import task
from prefect.cache_policies import NONE
from prefect.logging import get_run_logger

from codeloop.config import CriticConfig
from codeloop.rewards.critic import fit_with_holdout, labelled_examples
from codeloop.schema import Task, Trajectory


@task(name="fit-critic", cache_policy=NONE)
def fit_critic(
    cfg: CriticConfig, trajs: list[Trajectory], tasks_by_id: dict[str, Task], out_dir: str
) -> dict[str, Any]:
    """Fit the critic on the scored trajectories, save it to ``out_dir``, return metrics."""
    examples = labelled_examples(trajs, tasks_by_id)
    if not examples:
        raise ValueError("critic: no scored trajectory carries a label (binary_pass)")
    critic, metrics = fit_with_holdout(
        examples,
        holdout_fraction=cfg.holdout_fraction,
        seed=cfg.seed,
        dim=1 << cfg.dim_bits,
        epochs=cfg.epochs,
        lr=cfg.lr,
        l2=cfg.l2,
    )
    critic.save(out_dir)
    get_run_logger().info(
        "critic on %d examples (pass rate %.3f): held-out AUC %s over %d rows",
        metrics["n_examples"],
        metrics["pass_rate"],
        metrics["holdout_auc"],
        metrics["n_holdout"],
    )
    return metrics

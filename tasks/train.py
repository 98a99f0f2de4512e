"""Prefect tasks of the train stage (thin wrappers over codeloop.train.trainer)."""

from __future__ import annotations

from typing import Any

from prefect import task
from prefect.logging import get_run_logger

from codeloop.config import Params, TrainConfig
from codeloop.io import read_trajectories
from codeloop.ops.preflight import run_preflight
from codeloop.schema import Trajectory


@task(name="preflight")
def check_preflight(params: Params, root: str = ".") -> dict[str, Any]:
    """Refuse to train when `codeloop preflight` fails on the workspace at ``root``."""
    report = run_preflight(params, root)
    if not report.ok:
        raise RuntimeError(f"preflight failed, refusing to train:\n{report.render()}")
    get_run_logger().info("preflight ok")
    return {"ok": True}


@task(name="load-trajectories")
def load_trajectories(path: str) -> list[Trajectory]:
    """Scored trajectories (complete rows written by the score stage)."""
    trajs = read_trajectories(path)
    unscored = [t.trajectory_id for t in trajs if not t.metadata.reward_fn_version]
    if unscored:
        raise ValueError(
            f"{path}: {len(unscored)} trajectories have no metadata.reward_fn_version "
            f"(not scored), e.g. {unscored[:3]}; run the score stage first"
        )
    get_run_logger().info("%d scored trajectories from %s", len(trajs), path)
    return trajs


@task(name="train-grpo")
def train_policy(
    policy_dir: str, trajectories: list[Trajectory], cfg: TrainConfig, out_dir: str
) -> dict[str, Any]:
    """One GRPO iteration; deterministic for its inputs, so no retries."""
    from codeloop.train.trainer import train_grpo

    log = get_run_logger()
    m = train_grpo(policy_dir, trajectories, cfg, out_dir)
    for row in m["history"]:
        log.info(
            "step %d loss=%.4f kl=%.4f clip=%.3f entropy=%.3f grad_norm=%.3f",
            row["step"], row["loss"], row["kl"], row["clip_ratio_region"],
            row["entropy"], row["grad_norm"],
        )  # fmt: skip
    log.info(
        "candidate %s from %s: %d/%d trajectories in the update, reward %.3f±%.3f, "
        "frac_reward_zero_std=%.3f, excluded=%s",
        m["model_version"], m["policy_version"], m["n_in_update"], m["n_trajectories"],
        m["reward_mean"], m["reward_std"], m["frac_reward_zero_std"], m["excluded"],
    )  # fmt: skip
    return m

"""Prefect tasks of the policy_init and sft stages (thin wrappers over codeloop.policy.model/sft)."""

from __future__ import annotations

from typing import Any

from prefect import task
from prefect.logging import get_run_logger

from codeloop.config import Params


@task(name="init-policy")
def init_base_policy(params: Params, tasks_path: str, out_dir: str) -> str:
    """Build the embedded base policy (or load policy.model); returns its model_version."""
    from codeloop.policy.model import init_policy

    version = init_policy(params, tasks_path, out_dir)
    get_run_logger().info("base policy %s (%s) -> %s", version, params.policy.model, out_dir)
    return version


@task(name="sft")
def sft_policy(params: Params, base_dir: str, tasks_path: str, out_dir: str) -> dict[str, Any]:
    """SFT warm-start on reference solutions; returns loss/timing stats and model_version."""
    from codeloop.policy.sft import sft_stage

    stats = sft_stage(params, base_dir, tasks_path, out_dir)
    get_run_logger().info(
        "sft %s -> %s: %s steps on %s examples, loss %s -> %s",
        stats["base_version"][:12], stats["model_version"][:12], stats["steps"],
        stats["examples"], stats["loss_first"], stats["loss_last"],
    )  # fmt: skip
    return stats

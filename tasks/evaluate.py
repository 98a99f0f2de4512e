"""Prefect tasks of the evaluate stage (thin wrappers over codeloop.evaluate.metrics)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect import task
from prefect.logging import get_run_logger

from codeloop.config import Params
from codeloop.evaluate.metrics import evaluate_sets
from codeloop.io import read_json, read_tasks
from codeloop.schema import Task


@task(name="load-frozen-sets")
def load_frozen_sets(frozen_dir: str) -> dict[str, list[Task]]:
    """Every data/clean/frozen/<set>.parquet, by set name."""
    files = sorted(Path(frozen_dir).glob("*.parquet"))
    if not files:
        raise FileNotFoundError(f"{frozen_dir}: no frozen evaluation sets (*.parquet)")
    return {f.stem: read_tasks(f) for f in files}


@task(name="evaluate-candidate")
def evaluate_candidate(
    params: Params,
    policy_dir: str,
    sets: dict[str, list[Task]],
    training_tasks_path: str,
    manifest_path: str,
    iteration: int,
    critic_dir: str = "",
) -> dict[str, Any]:
    """Sample the candidate on the frozen sets and judge it (deterministic: no retries).

    With ``critic_dir`` (the critic stage's output), each set also gets ``pass@1_critic``.
    """
    from codeloop.policy.model import Policy
    from codeloop.rewards.critic import Critic
    from codeloop.sandbox import make_executor

    log = get_run_logger()
    policy = Policy.load(policy_dir)
    critic = Critic.load(critic_dir) if critic_dir else None
    training = read_tasks(training_tasks_path) if Path(training_tasks_path).exists() else None
    manifest = read_json(manifest_path) if Path(manifest_path).exists() else {}
    executor = make_executor(params.sandbox)
    try:
        result = evaluate_sets(
            policy,
            sets,
            executor,
            params.evaluate,
            training_tasks=training,
            timeout_s=params.sandbox.timeout_s,
            dataset_version=str(manifest.get("dataset_version", "")),
            iteration=iteration,
            critic=critic,
        )
    finally:
        executor.close()
    for name, m in result["sets"].items():
        log.info(
            "%s: pass@1=%.4f success=%.4f over %d tasks",
            name,
            m.get("pass@1", 0.0),
            m["success_rate"],
            m["n_tasks"],
        )
    return result

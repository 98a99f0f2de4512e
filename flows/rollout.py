"""Stage `rollout`: multi-turn self-debugging episodes of the current policy.

Run: ``python -m flows.rollout`` (reads ./params.yaml; no Prefect server needed).

Fans out over ``runner.*`` (threads by default, a Dask scheduler or LocalCluster, Ray)
through codeloop.rollout.scaleout; every runner writes the same rows, so ``runner`` is not a DVC
param of the stage. Reads ``rollout.*``, ``sandbox.*``, ``policy.checkpoint`` (the policy directory),
data/buckets/{plan.json, tasks.parquet} and data/clean/manifest.json (dataset_version).
Writes data/rollouts/ (Parquet shards + trajectories.jsonl; reward fields left for the
score stage) and metrics/rollout.json. Never reads ``reward.*``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect import flow

from codeloop.config import load_params
from codeloop.io import write_json, write_trajectories
from tasks.rollout import load_planned_tasks, rollout_tasks, summarize


@flow(name="rollout")
def rollout(params_path: str = "params.yaml", root: str = ".") -> dict[str, Any]:
    """Write data/rollouts and metrics/rollout.json under ``root``; returns the metrics."""
    base = Path(root)
    params = load_params(base / params_path)
    policy_dir = Path(params.policy.checkpoint)
    if not policy_dir.is_absolute():
        policy_dir = base / policy_dir
    tasks, dataset_version = load_planned_tasks(
        str(base / "data/buckets"), str(base / "data/clean/manifest.json")
    )
    trajs, seconds = rollout_tasks(params, str(policy_dir), tasks, dataset_version)
    write_trajectories(base / "data/rollouts", trajs)
    extra = {
        "model_version": trajs[0].metadata.model_version if trajs else "",
        "dataset_version": dataset_version,
        "iteration": params.rollout.iteration,
    }
    metrics = summarize(trajs, seconds, extra)
    write_json(base / "metrics/rollout.json", metrics)
    return metrics


if __name__ == "__main__":
    rollout()

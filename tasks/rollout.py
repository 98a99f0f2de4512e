"""Prefect tasks of the rollout stage (thin wrappers over codeloop.rollout.scaleout / codeloop.rollout.episodes)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from prefect import task
from prefect.logging import get_run_logger

from codeloop.config import Params
from codeloop.io import read_json, read_tasks
from codeloop.schema import Task, Trajectory


@task(name="load-plan")
def load_planned_tasks(buckets_dir: str, manifest_path: str) -> tuple[list[Task], str]:
    """The plan's tasks (in plan order) and the dataset_version from the clean manifest."""
    plan_path = Path(buckets_dir) / "plan.json"
    plan = read_json(plan_path)
    by_id = {t.task_id: t for t in read_tasks(Path(buckets_dir) / "tasks.parquet")}
    missing = [i for i in plan.get("task_ids", []) if i not in by_id]
    if missing:
        raise ValueError(
            f"{plan_path}: field task_ids names {len(missing)} tasks absent from "
            f"{buckets_dir}/tasks.parquet, e.g. {missing[:3]}"
        )
    manifest = read_json(manifest_path)
    if "dataset_version" not in manifest:
        raise ValueError(f"{manifest_path}: missing field dataset_version")
    return [by_id[i] for i in plan["task_ids"]], manifest["dataset_version"]


@task(name="rollout")
def rollout_tasks(
    params: Params, policy_dir: str, tasks: list[Task], dataset_version: str
) -> tuple[list[Trajectory], float]:
    """Sample the GRPO groups on the planned tasks over ``params.runner``; (rows, seconds)."""
    from codeloop.rollout.scaleout import rollout_and_score

    log = get_run_logger()
    t0 = time.perf_counter()
    trajs = rollout_and_score(
        tasks,
        policy_dir,
        rollout=params.rollout,
        sandbox=params.sandbox,
        runner=params.runner,
        dataset_version=dataset_version,
        reward=None,  # the score stage scores; rollout never reads reward.*
    )
    seconds = time.perf_counter() - t0
    version = trajs[0].metadata.model_version if trajs else "-"
    log.info(
        "%d trajectories on %d tasks from %s in %.1fs (runner %s x%d)",
        len(trajs), len(tasks), version[:12], seconds, params.runner.kind, params.runner.workers,
    )  # fmt: skip
    return trajs, seconds


@task(name="rollout-metrics")
def summarize(trajs: list[Trajectory], seconds: float, extra: dict[str, Any]) -> dict[str, Any]:
    from codeloop.rollout.episodes import rollout_metrics

    return {**rollout_metrics(trajs, seconds), **extra}

"""Stage `bucket`: difficulty buckets and the iteration's sampling plan.

Reads ``bucket.*``, ``rollout.iteration`` (curriculum position), data/clean/tasks.parquet
and history/pass_rates.json (empirical pass rates, may be ``{}`` or absent). Writes
data/buckets/{tasks.parquet, plan.json} and metrics/bucket.json; returns the plan.
"""

from __future__ import annotations

import logging
from typing import Any

from codeloop import io
from codeloop.config import Params
from codeloop.data.difficulty import assign_difficulty, make_plan, read_rates
from codeloop.paths import Paths
from codeloop.stages import Step, call

log = logging.getLogger(__name__)


def run(params: Params, paths: Paths, step: Step = call) -> dict[str, Any]:
    """Write data/buckets/tasks.parquet (difficulty = bucket id) and plan.json."""
    cfg = params.bucket
    tasks = io.read_tasks(paths.clean_tasks)
    rates = read_rates(paths.pass_rates)
    bucketed = step(assign_difficulty, tasks, rates, cfg)
    plan = step(make_plan, bucketed, cfg, params.rollout.iteration)
    manifest = paths.manifest
    plan["dataset_version"] = io.read_json(manifest)["dataset_version"] if manifest.exists() else ""
    plan["difficulty_source"] = "pass_rate+proxies" if rates else "proxies"
    plan["tasks_with_pass_rate"] = sum(1 for t in tasks if t.task_id in rates)
    io.write_tasks(paths.bucket_tasks, bucketed)
    io.write_json(paths.plan, plan)
    metrics = {f"bucket_{b}_size": n for b, n in enumerate(plan["bucket_sizes"])}
    metrics.update({f"bucket_{b}_planned": n for b, n in enumerate(plan["counts"])})
    metrics["planned_tasks"] = len(plan["task_ids"])
    if "repo_tasks" in plan:
        metrics["planned_repo_tasks"] = plan["repo_tasks"]
    io.write_json(paths.metrics("bucket"), metrics)
    log.info(
        "buckets %s, plan %s tasks by %s (%s)", plan["bucket_sizes"], len(plan["task_ids"]),
        [round(p, 3) for p in plan["proportions"]], plan["difficulty_source"],
    )
    return plan

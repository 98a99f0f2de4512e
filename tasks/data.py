"""Prefect tasks of the data stages (thin wrappers over codeloop.data.curate / codeloop.data.difficulty).

Retries only where a failure can be transient (the sandbox pool on a loaded machine);
bad input rows are quarantined by the library and never retried.
"""

from __future__ import annotations

from typing import Any

from prefect import task
from prefect.artifacts import create_table_artifact
from prefect.cache_policies import NONE
from prefect.logging import get_run_logger

from codeloop.config import Params


@task(name="clean-sources", cache_policy=NONE, retries=1, retry_delay_seconds=2)
def clean_sources(params: Params, out_dir: str, metrics_path: str) -> dict[str, Any]:
    """Load, validate, leak-check, dedupe, verify and split; write data/clean."""
    from codeloop.data.curate import run_clean

    report = run_clean(params, out_dir, metrics_path=metrics_path)
    log = get_run_logger()
    log.info(
        "rows in %d: kept %d (train %d, held-out %d), dropped %d %s, quarantined %d; balanced=%s",
        report["rows_in"],
        report["kept"],
        report["kept_train"],
        report["kept_heldout"],
        report["dropped"],
        report["dropped_by_reason"],
        report["quarantined"],
        report["balanced"],
    )
    log.info("dataset_version %s", report["dataset_version"])
    return report


@task(name="data-report-artifact", cache_policy=NONE)
def publish_data_report(report: dict[str, Any]) -> None:
    """A table artifact (key data-report) with the accounting of the clean stage."""
    rows = [{"outcome": "rows_in", "count": report["rows_in"]}]
    rows.append({"outcome": "kept_train", "count": report["kept_train"]})
    rows.append({"outcome": "kept_heldout", "count": report["kept_heldout"]})
    rows += [
        {"outcome": f"dropped:{k}", "count": v} for k, v in report["dropped_by_reason"].items()
    ]
    rows.append({"outcome": "quarantined", "count": report["quarantined"]})
    rows += [{"outcome": f"frozen:{k}", "count": v} for k, v in report["frozen"].items()]
    create_table_artifact(
        key="data-report",
        table=rows,
        description=f"clean stage, dataset_version {report['dataset_version'][:12]}",
    )


@task(name="bucket-tasks", cache_policy=NONE)
def bucket_tasks(
    params: Params, tasks_path: str, out_dir: str, pass_rates_path: str, metrics_path: str
) -> dict[str, Any]:
    """Assign difficulty buckets and write the sampling plan."""
    from codeloop.data.difficulty import run_bucket

    plan = run_bucket(params, tasks_path, out_dir, pass_rates_path, metrics_path)
    get_run_logger().info(
        "buckets %s, plan %s tasks by %s (%s)",
        plan["bucket_sizes"],
        len(plan["task_ids"]),
        [round(p, 3) for p in plan["proportions"]],
        plan["difficulty_source"],
    )
    return plan

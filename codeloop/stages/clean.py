"""Stage `clean`: raw sources -> data/clean (tasks, frozen sets, quarantine, report, manifest).

Reads ``clean.*`` (sources, frozen sets, thresholds) and ``sandbox.*`` (reference
verification). Writes data/clean/{tasks.parquet, frozen/<set>.parquet, quarantine.jsonl,
report.json, manifest.json} and metrics/clean.json (with the step's wall seconds and those
of repository-task verification); returns report.json's content.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from codeloop import io
from codeloop.config import Params
from codeloop.data.curate import clean_tasks, write_clean
from codeloop.paths import Paths
from codeloop.stages import Step, call

log = logging.getLogger(__name__)


def run(params: Params, paths: Paths, step: Step = call) -> dict[str, Any]:
    """Load, validate, leak-check, dedupe, verify and split; write data/clean."""
    # on its own sandbox executor: a retry gets a fresh one; repository snapshots are
    # stored content-addressed under data/clean/repos (tracked with the stage's out)
    start = time.perf_counter()
    result = step(clean_tasks, params, repos_dir=paths.clean_dir / "repos")
    seconds = time.perf_counter() - start
    report = step(write_clean, params, result, paths.clean_dir, paths.metrics("clean"))
    # wall times go to the metrics only: in data/clean they would change its hash each run
    metrics = io.read_json(paths.metrics("clean"))
    metrics.update(seconds=round(seconds, 2), repo_verify_seconds=result["repo_verify_seconds"])
    io.write_json(paths.metrics("clean"), metrics)
    log.info(
        "rows in %d: kept %d (train %d, held-out %d), dropped %d %s, quarantined %d; balanced=%s",
        report["rows_in"], report["kept"], report["kept_train"], report["kept_heldout"],
        report["dropped"], report["dropped_by_reason"], report["quarantined"], report["balanced"],
    )
    log.info("dataset_version %s", report["dataset_version"])
    if not report["balanced"]:
        raise RuntimeError(f"clean: accounting does not balance; see {paths.clean_report}")
    return report

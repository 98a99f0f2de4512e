"""Stage `bucket`: difficulty buckets and the iteration's sampling plan.

Run: ``python -m flows.bucket`` (reads ./params.yaml; no Prefect server needed).

Reads ``bucket.*``, ``rollout.iteration`` (curriculum position), data/clean/tasks.parquet
and history/pass_rates.json (empirical pass rates, may be ``{}`` or absent). Writes
data/buckets/{tasks.parquet, plan.json} and metrics/bucket.json.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect import flow

from codeloop.config import load_params
from tasks.data import bucket_tasks


@flow(name="bucket")
def bucket(params_path: str = "params.yaml", root: str = ".") -> dict[str, Any]:
    """Run the bucket stage under ``root``; returns the plan."""
    base = Path(root)
    params = load_params(base / params_path)
    return bucket_tasks(
        params,
        str(base / "data/clean/tasks.parquet"),
        str(base / "data/buckets"),
        str(base / "history/pass_rates.json"),
        str(base / "metrics/bucket.json"),
    )


if __name__ == "__main__":
    bucket()

"""Stage `clean`: raw sources -> data/clean (tasks, frozen sets, quarantine, report, manifest).

Run: ``python -m flows.clean`` (reads ./params.yaml; no Prefect server needed).

Reads ``clean.*`` (sources, frozen sets, thresholds) and ``sandbox.*`` (reference
verification). Writes data/clean/{tasks.parquet, frozen/<set>.parquet, quarantine.jsonl,
report.json, manifest.json} and metrics/clean.json, and a ``data-report`` table artifact.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect import flow

from codeloop.config import load_params
from tasks.data import clean_sources, publish_data_report


@flow(name="clean")
def clean(params_path: str = "params.yaml", root: str = ".") -> dict[str, Any]:
    """Run the clean stage under ``root``; returns the report."""
    base = Path(root)
    params = load_params(base / params_path)
    report = clean_sources(params, str(base / "data/clean"), str(base / "metrics/clean.json"))
    publish_data_report(report)
    if not report["balanced"]:
        raise RuntimeError("clean: accounting does not balance; see data/clean/report.json")
    return report


if __name__ == "__main__":
    clean()

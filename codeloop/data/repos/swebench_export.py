"""Repository tasks written as a SWE-bench dataset (``codeloop export --format swebench``).

``DIR/test.parquet`` (``datasets.load_dataset(DIR, split="test")`` reads it as SWE-bench's
HF datasets are read) and ``DIR/instances.jsonl`` (what the SWE-bench harness,
SWE-agent and mini-swe-agent take as a local dataset file), one row per repository
task in input order; columns and types in codeloop.data.repos.swebench_rows. Function
tasks have no SWE-bench form and are left out (counted in the summary).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from codeloop.data.repos.swebench_rows import to_swebench
from codeloop.io import read_tasks, write_jsonl


def export_swebench(tasks_path: str | os.PathLike, out_dir: str | os.PathLike) -> dict[str, Any]:
    """Write the repository tasks of a tasks.parquet as SWE-bench rows; returns
    {format, rows, skipped, path}. ValueError when the file holds no repository task."""
    tasks = read_tasks(tasks_path)
    rows = [to_swebench(t) for t in tasks if t.kind == "repo"]
    if not rows:
        raise ValueError(f"no repository task among {len(tasks)} tasks")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    # every column a string, also for a file whose tasks all leave one empty
    schema = pa.schema([(name, pa.string()) for name in rows[0]])
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), out / "test.parquet")
    write_jsonl(out / "instances.jsonl", rows)
    return {
        "format": "swebench",
        "rows": len(rows),
        "skipped": len(tasks) - len(rows),
        "path": str(out / "test.parquet"),
    }
